// Command benchserver is a stand-in for Countersign's `POST /hooks/{kind}` when timing the hook
// client against curl (the goal: `countersign hook` within 1.5× of a curl POST of the
// same body). It parses each event with internal/hooks and answers every PreToolUse and
// PermissionRequest with an allow, as a rule-decided call would be answered, so that both
// clients wait for the same server work.
//
//	go build -o /tmp/benchserver ./internal/hookclient/testdata/benchserver
//	/tmp/benchserver -addr 127.0.0.1:18600
package main

import (
	"flag"
	"io"
	"log"
	"net/http"

	"countersign/internal/hooks"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18600", "listen address")
	flag.Parse()
	http.HandleFunc("POST /hooks/{kind}", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, hooks.MaxBodyBytes))
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		ev, err := hooks.Parse(hooks.Kind(r.PathValue("kind")), body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		v := hooks.Verdict{}
		if ev.Name == hooks.PermissionRequest || ev.Name == hooks.PreToolUse {
			v.Decision = hooks.Allow
		}
		a, err := hooks.Encode(ev.Kind, ev.Name, v)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for k, v := range a.Headers() {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(a.JSON)
	})
	log.Fatal(http.ListenAndServe(*addr, nil))
}
