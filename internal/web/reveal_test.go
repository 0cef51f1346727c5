package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/notify"
	"countersign/internal/store/sqlite"
	"countersign/internal/web"
)

// trojanPath shows as "roletxt.go" where bidi is drawn (the override reverses "og.txt").
const trojanPath = "role\u202eog.txt"

// trojanLine is Trojan Source's "comment out" (CVE-2021-42574): drawn, it reads as a comparison
// with "user" followed by a comment; written, the comparison is with the whole string.
const trojanLine = "if access != \"user\u202e \u2066// Check if admin\u2069 \u2066\" {"

const markOpen = `<mark class="hidden-char" title="invisible or bidirectional character">`

func mark(cp string) string { return markOpen + "&lt;U+" + cp + "&gt;</mark>" }

// TestWriteFilePromptRevealsHiddenCharactersEverywhere (issue 28, acceptance 3): a write_file
// prompt whose path and content hold bidirectional characters shows each of them marked where it
// is — the path, the diff's lines — and says so above Approve, on every page that shows the
// prompt: the live fragment, the reloaded session page, the inbox and a decision link's page. No
// page carries one of them raw.
func TestWriteFilePromptRevealsHiddenCharactersEverywhere(t *testing.T) {
	args, _ := json.Marshal(map[string]string{"path": trojanPath, "content": trojanLine + "\n\tgrant()\n}\n"})
	script := `{"steps":[{"content":[{"type":"toolCall","id":"w","name":"write_file","arguments":` + string(args) + `}],"stopReason":"toolUse"},
	  {"content":[{"type":"text","text":"ok"}],"stopReason":"stop"}]}`
	ts := newTestServerAgent(t, map[string]string{"trojan": script}, func(c *web.Config, _ *http.Server) {
		c.Store.(*sqlite.DB).SetNotify([]notify.Receiver{aliceHook}, decisionLinks, nil)
		c.Receivers = []notify.Receiver{aliceHook}
	}, nil, builtinTool(t, "write_file"))
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "trojan", "model": "faux:trojan", "workspace": ts.workDir}, &sess)
	live := dialOwner(t, ts, "/sessions/"+sess.ID+"/live")
	events := ts.events(t, sess.ID)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	aid := next(t, events, "approval_requested")["approval"].(map[string]any)["id"].(string)
	ds, err := ts.db.Deliveries(context.Background(), sess.ID)
	if err != nil || len(ds) != 1 {
		t.Fatalf("deliveries %+v, %v", ds, err)
	}
	link := "/d/" + linkToken(t, ds[0])

	wantRevealed := func(t *testing.T, where, page string) {
		t.Helper()
		prompt := approvalGroup(t, page, aid)
		warning := `<p class="hidden-warning" role="alert">This path and content contain invisible or bidirectional characters, ` +
			`marked below like &lt;U+202E&gt;: what you see may not be what is written.</p>`
		for _, want := range []string{
			warning,
			`<code>role` + mark("202E") + `og.txt</code>`,
			`if access != &#34;user` + mark("202E") + ` ` + mark("2066") + `// Check if admin` + mark("2069") + ` ` + mark("2066") + `&#34; {`,
		} {
			if !strings.Contains(prompt, want) {
				t.Errorf("%s: the prompt lacks %s\n%s", where, want, prompt)
			}
		}
		if w, a := strings.Index(prompt, warning), strings.Index(prompt, `value="approve"`); w < 0 || a < 0 || w > a {
			t.Errorf("%s: the warning (at %d) is not above Approve (at %d)", where, w, a)
		}
		for _, raw := range []string{"\u202e", "\u2066", "\u2069"} {
			if i := strings.Index(page, raw); i >= 0 {
				t.Errorf("%s holds %q raw: …%s…", where, raw, page[max(i-120, 0):min(i+120, len(page))])
			}
		}
	}

	t.Run("live", func(t *testing.T) {
		wantRevealed(t, "the live fragment", readUntil(t, live, `data-approval-id="`+aid+`"`))
	})
	t.Run("reloaded", func(t *testing.T) {
		st, page := get(t, ts, nil, "/sessions/"+sess.ID)
		if st != 200 {
			t.Fatalf("page = %d", st)
		}
		wantRevealed(t, "the session page", page)
	})
	t.Run("inbox", func(t *testing.T) {
		st, page := get(t, ts, nil, "/inbox")
		if st != 200 {
			t.Fatalf("inbox = %d", st)
		}
		wantRevealed(t, "the inbox", page)
	})
	t.Run("decision link", func(t *testing.T) {
		e := &linkEnv{testServer: ts}
		st, page := e.do(t, "GET", link, nil, nil)
		if st != 200 {
			t.Fatalf("decision page = %d", st)
		}
		wantRevealed(t, "the decision page", page)
	})
}
