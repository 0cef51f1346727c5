// Command fakemodel serves this package's fake Anthropic Messages API and fake OpenAI Responses
// API on one local address, for the browser suite's runs of the real Claude Code and Codex
// (e2e/tests/real-agents.ts; SPEC §18). Every answer follows the directives in the run's own prompt
// (fakemodels.FromPrompt: `fake-bash: <command>`, `fake-guardian: allow|deny`), so one server
// serves every test at once. It prints "fakemodel listening on http://127.0.0.1:<port>" on
// stdout once it accepts connections, and logs each request on stderr with -v.
//
//	ANTHROPIC_BASE_URL=http://127.0.0.1:<port>                Claude Code
//	[model_providers.fake] base_url = "http://127.0.0.1:<port>/v1", wire_api = "responses"   Codex
//
// `make e2e` builds it as bin/fakemodel.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"

	"countersign/internal/fakemodels"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (port 0: a free one)")
	verbose := flag.Bool("v", false, "log every request on stderr")
	flag.Parse()

	mux := http.NewServeMux()
	mux.Handle("/v1/responses", &fakemodels.Responses{Script: fakemodels.FromPrompt()})
	mux.Handle("/", &fakemodels.Anthropic{Script: fakemodels.FromPrompt()})
	var h http.Handler = mux
	if *verbose {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			req := fakemodels.Request{Header: r.Header, Body: body}
			log.Printf("%s %s guardian=%v directives=%v", r.Method, r.URL, req.IsGuardian(), req.Directives())
			if os.Getenv("FAKEMODEL_DUMP") != "" {
				log.Printf("%s", body)
			}
			mux.ServeHTTP(w, r)
		})
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "fakemodel listening on http://%s\n", ln.Addr())
	log.Fatal(http.Serve(ln, h))
}
