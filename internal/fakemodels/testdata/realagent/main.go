// Command realagent runs the real Claude Code or Codex by hand against this package's fake models
// and a hooks endpoint that answers with internal/hooks (the way the end-to-end tests of SPEC §18
// will): it serves the fake model on -model-addr and `POST /hooks/{kind}` on -hooks-addr, and
// answers each PreToolUse / PermissionRequest with -verdict:
//
//	allow | deny | edit | none     the same verdict on both events
//	pr-allow | pr-deny | pr-edit   no verdict on PreToolUse, that verdict on PermissionRequest
//
// An edit replaces the command with -edited. Every hook event is logged on stderr as parsed,
// with the answer sent. Not built by ./...: go run ./internal/fakemodels/testdata/realagent.
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"strings"

	"countersign/internal/fakemodels"
	"countersign/internal/hooks"
)

func main() {
	modelAddr := flag.String("model-addr", "127.0.0.1:18650", "the fake model's address")
	hooksAddr := flag.String("hooks-addr", "127.0.0.1:18651", "the hooks endpoint's address")
	command := flag.String("command", "touch /tmp/h30/proof-1", "the command the fake model asks to run")
	edited := flag.String("edited", "touch /tmp/h30/proof-edited", "the command an edit runs instead")
	verdict := flag.String("verdict", "allow", "allow, deny, edit, none, pr-allow")
	token := flag.String("token", "", "the bearer token the hooks must send (empty: not checked)")
	flag.Parse()

	input, _ := json.Marshal(map[string]string{"command": *command, "description": "make a proof file"})
	// One address for both agents: /v1/responses is Codex's, the rest Claude Code's. Codex's
	// guardian denies, so that only a hook's allow runs the command.
	models := http.NewServeMux()
	models.Handle("/v1/responses", &fakemodels.Responses{Script: fakemodels.CodexShell(*command, "deny")})
	models.Handle("/", &fakemodels.Anthropic{Script: fakemodels.ToolThenText("Bash", string(input), "done")})
	go serve(*modelAddr, logged("model", models))

	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/{kind}", func(w http.ResponseWriter, r *http.Request) {
		if *token != "" && r.Header.Get("Authorization") != "Bearer "+*token {
			log.Printf("hook: 401 (an Authorization header: %v)", r.Header.Get("Authorization") != "")
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(http.MaxBytesReader(w, r.Body, hooks.MaxBodyBytes))
		ev, err := hooks.Parse(hooks.Kind(r.PathValue("kind")), body)
		if err != nil {
			log.Printf("hook: 400 %v\n%s", err, body)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		v := pick(*verdict, ev, *edited)
		if v.UpdatedInput != nil && !hooks.CanEdit(ev.Kind, ev.Name) {
			v = hooks.Verdict{Decision: hooks.Allow}
		}
		a, err := hooks.Encode(ev.Kind, ev.Name, v)
		if err != nil {
			log.Printf("hook: 500 %v", err)
			http.Error(w, err.Error(), 500)
			return
		}
		key := ""
		if ev.Name == hooks.PreToolUse || ev.Name == hooks.PermissionRequest {
			key, _ = hooks.MatchKey(ev)
			key = " key=" + key[7:19]
		}
		log.Printf("hook: %v%s input=%s → %s exit=%d %q", ev, key, ev.ToolInput, a.JSON, a.Exit, a.Stderr)
		for k, v := range a.Headers() {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(a.JSON)
	})
	serve(*hooksAddr, mux)
}

func pick(verdict string, ev hooks.Event, edited string) hooks.Verdict {
	if ev.Name != hooks.PreToolUse && ev.Name != hooks.PermissionRequest {
		return hooks.Verdict{}
	}
	if rest, ok := strings.CutPrefix(verdict, "pr-"); ok {
		if ev.Name != hooks.PermissionRequest {
			return hooks.Verdict{}
		}
		verdict = rest
	}
	switch verdict {
	case "allow":
		return hooks.Verdict{Decision: hooks.Allow}
	case "deny":
		return hooks.Verdict{Decision: hooks.Deny, Reason: "countersign says no: not this file"}
	case "edit":
		var in map[string]any
		_ = json.Unmarshal(ev.ToolInput, &in)
		if in == nil {
			in = map[string]any{}
		}
		if _, ok := in["cmd"]; ok {
			in["cmd"] = edited
		} else {
			in["command"] = edited
		}
		b, _ := json.Marshal(in)
		return hooks.Verdict{Decision: hooks.Allow, UpdatedInput: b}
	}
	return hooks.Verdict{}
}

func logged(name string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.Printf("%s: %s %s", name, r.Method, r.URL)
		h.ServeHTTP(w, r)
	})
}

func serve(addr string, h http.Handler) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.Serve(ln, h))
}
