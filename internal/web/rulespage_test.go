package web_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"countersign/internal/agent"
	"countersign/internal/gate"
)

// Issue 17, H3a: the Rules page, "Always allow…" on a prompt, the Mode combobox live, the
// session page's allow-all notice, and the audit naming the rule.

const formType = "application/x-www-form-urlencoded"

// xss is rule text and a note with markup in them: every page must show it as text.
const (
	xssRule = `shell(<img src=x onerror=alert(1)>)`
	xssNote = `<script>alert("note")</script>`
)

// assertEscaped fails when page holds the markup of xssRule or xssNote unescaped.
func assertEscaped(t *testing.T, where, page string) {
	t.Helper()
	for _, raw := range []string{"<img src=x", "<script>alert"} {
		if strings.Contains(page, raw) {
			t.Errorf("%s holds %q unescaped", where, raw)
		}
	}
}

// ruleIDs are the data-rule-id of the Rules page's rows, in order.
func ruleIDs(page string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`data-rule-id="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestRulesPageListsAddsAndDeletesRules: SPEC §14 and §6 "rules page". An empty state without
// rules; a rule added through the form is listed (text, effect, scope, source, creator, hits);
// a refused rule is explained in a role="alert" with the typed text kept; Delete on rows not
// from the policy file, which says "policy file" instead; a rule's markup is escaped.
func TestRulesPageListsAddsAndDeletesRules(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		ts := newTestServer(t, map[string]string{"x": `{"steps":[{"content":[{"type":"text","text":"hi"}],"stopReason":"stop"}]}`})
		st, page := get(t, ts, nil, "/rules")
		if st != 200 || !strings.Contains(page, "No rules yet.") || strings.Contains(page, "<table") {
			t.Fatalf("an empty Rules page = %d: %.500s", st, page)
		}
		if !strings.Contains(page, `<a href="/rules">Rules</a>`) {
			t.Error("the header has no Rules link")
		}
	})

	ts := rulesServer(t, map[string]string{"x": `{"steps":[{"content":[{"type":"text","text":"hi"}],"stopReason":"stop"}]}`})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "Fix <b>bugs</b>", "model": "faux:x"}, &sess)

	_, page := get(t, ts, nil, "/rules")
	if ids := ruleIDs(page); len(ids) != 1 || ids[0] != "policy:1" {
		t.Fatalf("rows %v, want the policy file's", ids)
	}
	if !strings.Contains(page, `<span class="note">policy file</span>`) || strings.Contains(page, "/rules/policy:1/delete") {
		t.Error("the policy file's row is not read-only")
	}

	// Refused: the parser's and the compiler's messages, the typed text kept.
	for _, tc := range []struct{ name, form, msg string }{
		{"does not parse", "rule=%28x&effect=deny&scope=server", "unbalanced parenthesis"},
		{"does not compile", "rule=shell%28bad%5B%29&effect=deny&scope=server", `bad specifier &#34;bad[&#34;`},
		{"unknown effect", "rule=shell&effect=yolo&scope=server", "Effect must be allow, ask or deny"},
		{"unknown scope", "rule=shell&effect=deny&scope=galaxy", "Scope must be server, workspace:&lt;folder&gt; or session:&lt;id&gt;"},
		{"relative workspace", "rule=shell&effect=deny&scope=workspace:..%2Fetc", "Scope must be server"},
		{"unknown session", "rule=shell&effect=deny&scope=session:nosuch", "session nosuch not found"},
		{"empty", "rule=+&effect=deny&scope=server", "A rule needs a text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := ts.do(t, "POST", "/rules", formType, tc.form, nil)
			if st != 400 || !strings.Contains(body, `role="alert"`) || !strings.Contains(body, tc.msg) {
				t.Fatalf("= %d, want 400 with %q in an alert: %.3000s", st, tc.msg, body)
			}
			form, _ := url.ParseQuery(tc.form)
			if want := `name="rule" value="` + strings.ReplaceAll(strings.ReplaceAll(form.Get("rule"), "(", "("), `"`, "&#34;"); !strings.Contains(body, want) {
				t.Errorf("the typed text is lost: want %q", want)
			}
		})
	}

	// Added: server, workspace and session scopes.
	for _, form := range []url.Values{
		{"rule": {xssRule}, "effect": {"deny"}, "scope": {"server"}, "note": {xssNote}},
		{"rule": {"shell"}, "effect": {"ask"}, "scope": {"workspace:" + sess.Workspace}},
		{"rule": {"*"}, "effect": {"allow"}, "scope": {"session:" + sess.ID}, "confirm": {"* @ session:" + sess.ID}},
	} {
		if st, body := ts.do(t, "POST", "/rules", formType, form.Encode(), nil); st != 200 || !strings.Contains(body, "<h1>Rules</h1>") {
			t.Fatalf("add %v = %d (want the page after the redirect): %.300s", form, st, body)
		}
	}
	_, page = get(t, ts, nil, "/rules")
	assertEscaped(t, "the Rules page", page)
	if !strings.Contains(page, "shell(&lt;img src=x onerror=alert(1)&gt;)") || !strings.Contains(page, "&lt;script&gt;alert(&#34;note&#34;)&lt;/script&gt;") {
		t.Error("the rule's text or note is not shown as text")
	}
	ids := ruleIDs(page)
	if len(ids) != 4 {
		t.Fatalf("rows %v, want the policy file's and three", ids)
	}
	for _, want := range []string{
		`<code class="rule-scope-detail">` + sess.Workspace + `</code>`,                                 // a workspace rule names its folder
		`<a class="rule-scope-detail" href="/sessions/` + sess.ID + `">Fix &lt;b&gt;bugs&lt;/b&gt;</a>`, // a session rule its session
		`<td data-label="Source">api</td>`, `<td data-label="Created by">owner`,
		`<td data-label="Hits" class="rule-hits">0</td>`, `<span class="note">never</span>`,
		`<span class="state effect-deny">deny</span>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the Rules page lacks %s", want)
		}
	}
	for _, id := range ids[1:] {
		if !strings.Contains(page, `action="/rules/`+id+`/delete"`) {
			t.Errorf("row %s has no Delete", id)
		}
	}

	// Delete: gone from the page and from the rules the next call sees; the policy file's is 403.
	if st, _ := ts.do(t, "POST", "/rules/"+ids[1]+"/delete", formType, "", nil); st != 200 {
		t.Errorf("Delete = %d", st)
	}
	if st, _ := ts.do(t, "POST", "/rules/policy:1/delete", formType, "", nil); st != http.StatusForbidden {
		t.Errorf("Delete of a policy-file rule = %d, want 403", st)
	}
	if st, _ := ts.do(t, "POST", "/rules/nosuch/delete", formType, "", nil); st != http.StatusNotFound {
		t.Errorf("Delete of an unknown rule = %d, want 404", st)
	}
	_, page = get(t, ts, nil, "/rules")
	if got := ruleIDs(page); len(got) != 3 || got[1] != ids[2] {
		t.Errorf("after Delete: rows %v", got)
	}
	var list struct{ Rules []listedRule }
	ts.call(t, "GET", "/api/rules", nil, &list)
	if len(list.Rules) != 3 {
		t.Errorf("the runner still has %d rules", len(list.Rules))
	}
}

// TestRulesPageIsTheOwnersOnly: a reviewer's link (even an approver's with canRemember) and no
// credentials get 401 on every route of the Rules page; a cross-site form post is refused (403)
// like every form; nothing changes.
func TestRulesPageIsTheOwnersOnly(t *testing.T) {
	ts := rulesServer(t, map[string]string{"x": `{"steps":[{"content":[{"type":"text","text":"hi"}],"stopReason":"stop"}]}`})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "r", "model": "faux:x"}, &sess)
	var mine listedRule
	ts.call(t, "POST", "/api/rules", map[string]any{"text": "shell", "effect": "ask", "scope": "server"}, &mine)
	l := createLink(t, ts, sess.ID, map[string]any{"role": "approver", "canRemember": true, "canEdit": true})
	rev := reviewer(t, ts, l.URL, "Mallory")
	add := "rule=*&effect=allow&scope=server"
	for _, tc := range []struct {
		name, method, path, body string
		client                   *http.Client
	}{
		{"no credentials read", "GET", "/rules", "", &http.Client{}},
		{"no credentials add", "POST", "/rules", add, &http.Client{}},
		{"no credentials delete", "POST", "/rules/" + mine.ID + "/delete", "", &http.Client{}},
		{"a reviewer reads", "GET", "/rules", "", rev},
		{"a reviewer adds", "POST", "/rules", add, rev},
		{"a reviewer deletes", "POST", "/rules/" + mine.ID + "/delete", "", rev},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st, body := ts.do(t, tc.method, tc.path, formType, tc.body, tc.client); st != http.StatusUnauthorized || strings.Contains(body, "shell") {
				t.Errorf("= %d, want 401 with nothing of the rules: %.200s", st, body)
			}
		})
	}
	if _, page := get(t, ts, rev, l.URL); strings.Contains(page, `href="/rules"`) {
		t.Error("a reviewer's page links to the Rules page")
	}
	for _, path := range []string{"/rules", "/rules/" + mine.ID + "/delete"} {
		req, _ := http.NewRequest("POST", ts.URL+path, strings.NewReader(add))
		req.Header.Set("Content-Type", formType)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Origin", "https://evil.example")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("cross-site POST %s = %d, want 403", path, res.StatusCode)
		}
	}
	var list struct{ Rules []listedRule }
	ts.call(t, "GET", "/api/rules", nil, &list)
	if len(list.Rules) != 2 || list.Rules[1].ID != mine.ID {
		t.Errorf("rules changed: %+v", list.Rules)
	}
}

// TestAlwaysAllowOnAPrompt: SPEC §14 "Remembering from the prompt" and §6. The owner's prompt
// offers "Always allow…" with the suggestion in the Rule box, the scopes and "Save rule"; an
// approver link without canRemember sees none of it and its remember decision is refused 403;
// a rule the compiler refuses is explained in a role="alert" and decides nothing; saving with
// scope workspace approves the call, says the rule's scope honestly (card, approval JSON,
// audit), and the next call the rule covers runs without a prompt, audited with a link to the
// rule on the Rules page.
func TestAlwaysAllowOnAPrompt(t *testing.T) {
	ts := rulesServer(t, map[string]string{"grant": grantTwice})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "rem", "model": "faux:grant"}, &sess)
	plain := createLink(t, ts, sess.ID, map[string]any{"role": "approver"})
	cPlain := reviewer(t, ts, plain.URL, "Pat")
	events := ts.events(t, sess.ID)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	id := next(t, events, "approval_requested")["approval"].(map[string]any)["id"].(string)

	_, page := get(t, ts, nil, "/sessions/"+sess.ID)
	for _, want := range []string{
		`data-action="remember" aria-expanded="false" aria-controls="remember-` + id + `">Always allow…</button>`,
		`<form id="remember-` + id + `" class="remember-form" hidden hx-post="/sessions/` + sess.ID + `/approvals/` + id + `/decision"`,
		`<input type="hidden" name="decision" value="remember">`,
		`Rule <input type="text" name="rule" value="shell"`,
		`<select name="scope"><option value="session" selected>session</option> <option value="workspace">workspace</option></select>`,
		`<button type="submit" class="primary">Save rule</button>`,
		// The form says what Save approves: the whole call, also beyond the rule (a review found
		// "ls; rm x" saved as run_command(ls:*) read as if the rule covered it).
		`Saving approves this whole call once, as asked (also any part of it the rule does not cover)`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the owner's prompt lacks %s", want)
		}
	}
	u, _ := url.Parse(plain.URL)
	if _, rp := get(t, ts, cPlain, ts.URL+u.Path); strings.Contains(rp, "Always allow") || strings.Contains(rp, "remember-form") {
		t.Error("a link without canRemember is offered Always allow…")
	}
	// A canRemember link is offered the session scope only (a workspace rule is refused it).
	trusted := createLink(t, ts, sess.ID, map[string]any{"role": "approver", "canRemember": true})
	cTrusted := reviewer(t, ts, trusted.URL, "Tess")
	tu, _ := url.Parse(trusted.URL)
	if _, rp := get(t, ts, cTrusted, ts.URL+tu.Path); !strings.Contains(rp, "Always allow") || !strings.Contains(rp, `<option value="session" selected>session</option>`) ||
		strings.Contains(rp, `<option value="workspace">`) {
		t.Error("a canRemember link's Always allow… does not offer the session scope alone")
	}
	form := url.Values{"decision": {"remember"}, "rule": {"shell"}, "scope": {"workspace"}}
	if st, _ := reviewerDecision(t, ts, cPlain, plain.URL, id, form); st != http.StatusForbidden {
		t.Errorf("remember without canRemember = %d, want 403", st)
	}
	bad := url.Values{"decision": {"remember"}, "rule": {"shell(bad[)"}, "scope": {"workspace"}}
	req, _ := http.NewRequest("POST", ts.URL+"/sessions/"+sess.ID+"/approvals/"+id+"/decision", strings.NewReader(bad.Encode()))
	req.Header.Set("Content-Type", formType)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("HX-Request", "true")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, res)
	if res.StatusCode != 400 || res.Header.Get("HX-Retarget") != "find .form-errors" || !strings.Contains(body, `<p class="form-error" role="alert">`) ||
		!strings.Contains(body, "bad specifier") {
		t.Errorf("a refused rule = %d %q: %.300s", res.StatusCode, res.Header.Get("HX-Retarget"), body)
	}
	if a, _ := ts.db.Approval(context.Background(), id); a.Status != gate.Pending {
		t.Fatalf("a refused rule decided the call: %+v", a)
	}

	st, slot := ts.do(t, "POST", "/sessions/"+sess.ID+"/approvals/"+id+"/decision", formType, form.Encode(), nil)
	if st != 200 || !strings.Contains(slot, "approved by owner and always allowed shell on this workspace") {
		t.Fatalf("Save rule = %d: %.500s", st, slot)
	}
	next(t, events, "agent_end")
	if ts.runs.Load() != 2 {
		t.Fatalf("shell ran %d times, want 2 (the second by the rule)", ts.runs.Load())
	}
	var list struct{ Rules []listedRule }
	ts.call(t, "GET", "/api/rules", nil, &list)
	if len(list.Rules) != 2 || list.Rules[1].Scope != "workspace" || list.Rules[1].Workspace != sess.Workspace || list.Rules[1].Source != "prompt" {
		t.Fatalf("rules %+v", list.Rules)
	}
	ruleID := list.Rules[1].ID
	a, _ := ts.db.Approval(context.Background(), id)
	if a.RuleScope != gate.ScopeWorkspace || a.RuleID != ruleID || a.RuleText != "shell" || a.DecisionSource != gate.FromPerson {
		t.Errorf("the remembered approval = %+v, want it to name its workspace rule", a)
	}
	_, audit := get(t, ts, nil, "/sessions/"+sess.ID+"/audit")
	for _, want := range []string{
		`<td data-label="Scope" class="col-scope">workspace</td>`,
		`saved rule <a class="rule-ref" href="/rules#rule-` + ruleID + `"><code>shell</code></a> (prompt, id ` + ruleID + `)`,
		`decided by rule <a class="rule-ref" href="/rules#rule-` + ruleID + `"><code>shell</code></a> (prompt, id ` + ruleID + `)`,
	} {
		if !strings.Contains(audit, want) {
			t.Errorf("the audit lacks %s\n%s", want, audit)
		}
	}
	// The call the rule decided on its own says the rule's scope too (a review found its Scope
	// cell empty): two workspace cells, the saving decision's and the rule's decision's.
	if n := strings.Count(audit, `<td data-label="Scope" class="col-scope">workspace</td>`); n != 2 {
		t.Errorf("%d workspace scope cells in the audit, want 2", n)
	}
	_, rulesPage := get(t, ts, nil, "/rules")
	if !strings.Contains(rulesPage, `<tr id="rule-`+ruleID+`"`) || !strings.Contains(rulesPage, `<td data-label="Hits" class="rule-hits">1</td>`) {
		t.Error("the Rules page lacks the remembered rule's anchor or its hit")
	}
}

// TestRuleTextIsEscapedOnEveryPage: a rule whose text holds markup, made on a prompt and
// deciding calls, shows as text on the session page, the audit and the Rules page.
func TestRuleTextIsEscapedOnEveryPage(t *testing.T) {
	ts := rulesServer(t, map[string]string{"grant": grantTwice})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "esc", "model": "faux:grant"}, &sess)
	events := ts.events(t, sess.ID)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	id := next(t, events, "approval_requested")["approval"].(map[string]any)["id"].(string)
	form := url.Values{"decision": {"remember"}, "rule": {xssRule}, "scope": {"session"}}
	st, slot := ts.do(t, "POST", "/sessions/"+sess.ID+"/approvals/"+id+"/decision", formType, form.Encode(), nil)
	if st != 200 {
		t.Fatalf("remember = %d: %.300s", st, slot)
	}
	assertEscaped(t, "the decided slot", slot)
	for _, path := range []string{"/sessions/" + sess.ID, "/sessions/" + sess.ID + "/audit", "/rules"} {
		st, page := get(t, ts, nil, path)
		if st != 200 {
			t.Errorf("%s = %d", path, st)
		}
		assertEscaped(t, path, page)
		if !strings.Contains(page, "&lt;img src=x onerror=alert(1)&gt;") {
			t.Errorf("%s does not show the rule's text", path)
		}
	}
}

// TestSessionPageSaysWhenEveryCallRunsWithoutAPrompt: SPEC §14 — an allow rule for "*" that
// reaches a session (its own, its workspace's, the server's) makes the page say every call runs
// without a prompt; another session, or a narrower rule, does not.
func TestSessionPageSaysWhenEveryCallRunsWithoutAPrompt(t *testing.T) {
	ts := rulesServer(t, map[string]string{"x": `{"steps":[{"content":[{"type":"text","text":"hi"}],"stopReason":"stop"}]}`})
	var a, b agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "a", "model": "faux:x"}, &a)
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "b", "model": "faux:x", "workspace": t.TempDir()}, &b)
	const says = "Every call in this session runs without a prompt"
	says1 := func(s agent.Session) bool {
		_, p := get(t, ts, nil, "/sessions/"+s.ID)
		return strings.Contains(p, says)
	}
	ts.call(t, "POST", "/api/rules", map[string]any{"text": "shell", "effect": "allow", "scope": "server"}, nil)
	if says1(a) || says1(b) {
		t.Fatal("a rule for one tool made the page say every call runs")
	}
	var r listedRule
	ts.call(t, "POST", "/api/rules", map[string]any{"text": "*", "effect": "allow", "scope": "session", "sessionId": a.ID}, &r)
	if !says1(a) || says1(b) {
		t.Errorf("a session rule *: session a says %v, b says %v; want a only", says1(a), says1(b))
	}
	ts.call(t, "DELETE", "/api/rules/"+r.ID, nil, nil)
	ts.call(t, "POST", "/api/rules", map[string]any{"text": "*", "effect": "allow", "scope": "workspace", "workspace": b.Workspace}, &r)
	if says1(a) || !says1(b) {
		t.Errorf("a workspace rule *: session a says %v, b says %v; want b only", says1(a), says1(b))
	}
	// The Rules page says it on the rule's row too (a review missed it there), and only there.
	_, rules := get(t, ts, nil, "/rules")
	if n := strings.Count(rules, "every call it reaches runs without a prompt"); n != 1 {
		t.Errorf("the Rules page warns %d times, want once (the * row):\n%s", n, rules)
	}
	if row := rules[strings.Index(rules, `id="rule-`+r.ID+`"`):]; !strings.Contains(row[:strings.Index(row, "</tr>")], "every call it reaches runs without a prompt") {
		t.Errorf("the warning is not on the * row")
	}
}

// TestModeFollowsOtherViewersLive: a mode switched on one page reaches the other pages of the
// session over their live socket — the owner's as the combobox, a reviewer's as text.
func TestModeFollowsOtherViewersLive(t *testing.T) {
	ts := rulesServer(t, map[string]string{"x": `{"steps":[{"content":[{"type":"text","text":"hi"}],"stopReason":"stop"}]}`})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "m", "model": "faux:x"}, &sess)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(ts.URL, "http")+"/sessions/"+sess.ID+"/live",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	// The socket subscribes after the handshake and first sends its resync: switch only after
	// that, or the switch may land before the subscription (a flake under -race).
	readMessage(t, c)
	if st, _ := ts.do(t, "POST", "/sessions/"+sess.ID+"/mode", formType, "mode=plan", nil); st != 200 {
		t.Fatalf("switch = %d", st)
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("no live mode: %v", err)
		}
		if strings.Contains(string(data), `id="mode-form"`) {
			if !strings.Contains(string(data), `<option value="plan" selected>`) {
				t.Errorf("the live mode is not plan: %.500s", data)
			}
			return
		}
	}
}

// TestModeFormWorksWithoutJavaScript: the Mode combobox is a real form (method post, action),
// and a plain post switches the mode and lands on the session page.
func TestModeFormWorksWithoutJavaScript(t *testing.T) {
	ts := rulesServer(t, map[string]string{"x": `{"steps":[{"content":[{"type":"text","text":"hi"}],"stopReason":"stop"}]}`})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "m", "model": "faux:x"}, &sess)
	_, page := get(t, ts, nil, "/sessions/"+sess.ID)
	if !strings.Contains(page, `<form method="post" action="/sessions/`+sess.ID+`/mode"`) {
		t.Error("the Mode form has no action for a browser without JavaScript")
	}
	req, _ := http.NewRequest("POST", ts.URL+"/sessions/"+sess.ID+"/mode", strings.NewReader("mode=plan"))
	req.Header.Set("Content-Type", formType)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/sessions/"+sess.ID {
		t.Errorf("a plain post = %d to %q, want 303 to the session page", res.StatusCode, res.Header.Get("Location"))
	}
	var got agent.Session
	ts.call(t, "GET", "/api/sessions/"+sess.ID, nil, &got)
	if got.Mode != gate.ModePlan {
		t.Errorf("mode = %q", got.Mode)
	}
}

func readAll(t *testing.T, res *http.Response) string {
	t.Helper()
	defer res.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := res.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
