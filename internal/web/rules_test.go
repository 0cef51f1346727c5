package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/gate"
)

// policyRule is a policy file's rule as the rules engine would load it.
var policyRule = gate.Rule{ID: "policy:1", Effect: gate.Deny, Tool: "danger", Scope: gate.ScopeServer,
	Source: gate.SourcePolicyFile, CreatedBy: "policy.json", Pos: "policy.json:3:14"}

func rulesServer(t *testing.T, scripts map[string]string) *testServer {
	return newTestServerAgent(t, scripts, nil, func(c *agent.Config) { c.PolicyRules = []gate.Rule{policyRule} })
}

type listedRule struct {
	ID, Text, Tool, Specifier, Scope, SessionID, Workspace, Source, CreatedBy, Effect string
	ReadOnly                                                                          bool
	Hits                                                                              int64
	CreatedVia                                                                        *linkRef
}

// TestRulesAPIListsCreatesAndDeletesRules: issue 17 item 5. The owner lists every rule (the policy
// file's read-only), creates one from its text or its tool and specifier, and deletes it; a
// policy-file rule cannot be deleted.
func TestRulesAPIListsCreatesAndDeletesRules(t *testing.T) {
	ts := rulesServer(t, map[string]string{"x": `{"steps":[{"content":[{"type":"text","text":"hi"}],"stopReason":"stop"}]}`})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "r", "model": "faux:x"}, &sess)

	var created listedRule
	if st := ts.call(t, "POST", "/api/rules", map[string]any{"text": "write_file(secrets/**)", "effect": "deny",
		"scope": "session", "sessionId": sess.ID}, &created); st != 201 {
		t.Fatalf("POST /api/rules = %d", st)
	}
	if created.Tool != "write_file" || created.Specifier != "secrets/**" || created.Text != "write_file(secrets/**)" ||
		created.Source != "api" || created.CreatedBy != "owner" || created.ReadOnly || created.ID == "" {
		t.Errorf("created %+v", created)
	}
	var ws listedRule
	if st := ts.call(t, "POST", "/api/rules", map[string]any{"tool": "shell", "effect": "allow", "scope": "workspace",
		"workspace": sess.Workspace + "/"}, &ws); st != 201 || ws.Workspace != sess.Workspace {
		t.Fatalf("workspace rule = %d %+v", st, ws)
	}
	var list struct{ Rules []listedRule }
	ts.call(t, "GET", "/api/rules", nil, &list)
	if len(list.Rules) != 3 || list.Rules[0].ID != "policy:1" || !list.Rules[0].ReadOnly || list.Rules[1].ID != created.ID || list.Rules[2].ID != ws.ID {
		t.Fatalf("GET /api/rules = %+v", list.Rules)
	}
	var e errBody
	if st := ts.call(t, "DELETE", "/api/rules/policy:1", nil, &e); st != http.StatusForbidden ||
		e.Error.Message != "Rule danger comes from the policy file and is read-only; change the file and restart." {
		t.Errorf("DELETE a policy-file rule = %d %+v", st, e)
	}
	if st := ts.call(t, "DELETE", "/api/rules/"+created.ID, nil, nil); st != http.StatusNoContent {
		t.Errorf("DELETE = %d", st)
	}
	if st := ts.call(t, "DELETE", "/api/rules/"+created.ID, nil, &e); st != http.StatusNotFound || e.Error.Message != "rule "+created.ID+" not found" {
		t.Errorf("DELETE again = %d %+v", st, e)
	}
	ts.call(t, "GET", "/api/rules", nil, &list)
	if len(list.Rules) != 2 {
		t.Errorf("after delete: %+v", list.Rules)
	}
	// Deleting a session deletes its session rules, in the store and in the list.
	var sr listedRule
	ts.call(t, "POST", "/api/rules", map[string]any{"text": "shell", "effect": "ask", "scope": "session", "sessionId": sess.ID}, &sr)
	if st := ts.call(t, "DELETE", "/api/sessions/"+sess.ID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("DELETE session = %d", st)
	}
	ts.call(t, "GET", "/api/rules", nil, &list)
	if len(list.Rules) != 2 || list.Rules[1].ID != ws.ID {
		t.Errorf("after deleting the session: %+v", list.Rules)
	}
}

// TestRulesAPIRefusesAttackers: every new route against no token, a reviewer's link, another
// session's id, a refused rule and huge or broken bodies; nothing changes.
func TestRulesAPIRefusesAttackers(t *testing.T) {
	ts := rulesServer(t, map[string]string{"x": `{"steps":[{"content":[{"type":"text","text":"hi"}],"stopReason":"stop"}]}`})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "r", "model": "faux:x"}, &sess)
	l := createLink(t, ts, sess.ID, map[string]any{"role": "approver", "canRemember": true, "canEdit": true})
	rev := reviewer(t, ts, l.URL, "Mallory")
	anon := &http.Client{}
	good := `{"text":"shell","effect":"allow","scope":"server"}`
	for _, tc := range []struct {
		name, method, path, body string
		client                   *http.Client
		status                   int
		msg                      string
	}{
		{"no token lists", "GET", "/api/rules", "", anon, 401, ""},
		{"no token creates", "POST", "/api/rules", good, anon, 401, ""},
		{"no token deletes", "DELETE", "/api/rules/policy:1", "", anon, 401, ""},
		{"no token switches the mode", "PATCH", "/api/sessions/" + sess.ID, `{"mode":"accept-edits"}`, anon, 401, ""},
		{"a reviewer lists", "GET", "/api/rules", "", rev, 401, ""},
		{"a reviewer creates", "POST", "/api/rules", good, rev, 401, ""},
		{"a reviewer deletes", "DELETE", "/api/rules/policy:1", "", rev, 401, ""},
		{"a reviewer switches the mode", "PATCH", "/api/sessions/" + sess.ID, `{"mode":"accept-edits"}`, rev, 401, ""},
		{"a rule for another session id", "POST", "/api/rules", `{"text":"shell","effect":"allow","scope":"session","sessionId":"nosuch"}`, nil, 404, "session nosuch not found"},
		{"a session rule without a session", "POST", "/api/rules", `{"text":"shell","effect":"allow","scope":"session"}`, nil, 400, "A session rule needs a session."},
		{"a server rule naming a session", "POST", "/api/rules", `{"text":"shell","effect":"allow","scope":"server","sessionId":"` + sess.ID + `"}`, nil, 400, "Only a session rule names a session."},
		{"the compiler refuses it", "POST", "/api/rules", `{"text":"write_file(bad[)","effect":"deny","scope":"server"}`, nil, 400, `rule write_file(bad[): bad specifier "bad["`},
		{"text that does not parse", "POST", "/api/rules", `{"text":"(x","effect":"deny","scope":"server"}`, nil, 400, "col 1: unbalanced parenthesis"},
		{"text and tool both", "POST", "/api/rules", `{"text":"shell","tool":"shell","effect":"deny","scope":"server"}`, nil, 400, "Send a rule's text or its tool and specifier, not both."},
		{"neither text nor tool", "POST", "/api/rules", `{"effect":"deny","scope":"server"}`, nil, 400, `A rule needs a text ("run_command(git diff:*)") or a tool.`},
		{"an unknown effect", "POST", "/api/rules", `{"text":"shell","effect":"yolo","scope":"server"}`, nil, 400, `effect must be allow, ask or deny, not "yolo"`},
		{"an unknown scope", "POST", "/api/rules", `{"text":"shell","effect":"allow","scope":"galaxy"}`, nil, 400, `scope must be session, workspace or server, not "galaxy"`},
		{"a relative workspace", "POST", "/api/rules", `{"text":"shell","effect":"allow","scope":"workspace","workspace":"../etc"}`, nil, 400, "A workspace rule needs the workspace folder's absolute path."},
		{"a policy-file source cannot be claimed", "POST", "/api/rules", `{"text":"shell","effect":"allow","scope":"server","source":"policy-file"}`, nil, 400, `field "source" is not known here`},
		{"a huge text", "POST", "/api/rules", `{"text":"` + strings.Repeat("a", 5000) + `","effect":"allow","scope":"server"}`, nil, 400, "The rule is too long (text at most 4096 bytes, note 1024)."},
		{"a huge body", "POST", "/api/rules", `{"text":"` + strings.Repeat("a", 2<<20) + `"}`, nil, 413, ""},
		{"broken JSON", "POST", "/api/rules", `{"text":`, nil, 400, ""},
		{"an unknown rule", "DELETE", "/api/rules/nosuch", "", nil, 404, "rule nosuch not found"},
		{"an unknown mode", "PATCH", "/api/sessions/" + sess.ID, `{"mode":"yolo"}`, nil, 400, `mode must be default, plan or accept-edits, not "yolo"`},
		{"a mode for another session", "PATCH", "/api/sessions/nosuch", `{"mode":"plan"}`, nil, 404, "session nosuch not found"},
		{"an empty change", "PATCH", "/api/sessions/" + sess.ID, `{}`, nil, 400, "Send a title, a mode or instructions to change."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := ts.do(t, tc.method, tc.path, "application/json", tc.body, tc.client)
			if st != tc.status {
				t.Fatalf("%s %s = %d, want %d: %.300s", tc.method, tc.path, st, tc.status, body)
			}
			if tc.msg != "" && !strings.Contains(body, jsonQuote(tc.msg)) {
				t.Errorf("body %.400s lacks %q", body, tc.msg)
			}
		})
	}
	var list struct{ Rules []listedRule }
	ts.call(t, "GET", "/api/rules", nil, &list)
	if len(list.Rules) != 1 {
		t.Errorf("rules after the attacks: %+v", list.Rules)
	}
	var got agent.Session
	ts.call(t, "GET", "/api/sessions/"+sess.ID, nil, &got)
	if got.Mode != gate.ModeDefault {
		t.Errorf("mode after the attacks = %q", got.Mode)
	}
}

type errBody struct {
	Error struct{ Code, Message string }
}

func jsonQuote(s string) string {
	r := strings.NewReplacer(`"`, `\"`)
	return r.Replace(s)
}

// TestModeSwitchAppliesToTheNextCall: PATCH {"mode": "plan"} shows in the session JSON and
// denies the next call of a tool not marked read-only without a prompt, with the audit naming
// the mode (acceptance 6).
func TestModeSwitchAppliesToTheNextCall(t *testing.T) {
	ts := rulesServer(t, map[string]string{"one": `{"steps":[
  {"content":[{"type":"toolCall","id":"c1","name":"shell","arguments":{"command":"rm"}}],"stopReason":"toolUse"},
  {"content":[{"type":"text","text":"done"}],"stopReason":"stop"}]}`})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "m", "model": "faux:one"}, &sess)
	if sess.Mode != gate.ModeDefault {
		t.Fatalf("a new session's mode = %q", sess.Mode)
	}
	var patched agent.Session
	if st := ts.call(t, "PATCH", "/api/sessions/"+sess.ID, map[string]string{"mode": "plan"}, &patched); st != 200 || patched.Mode != gate.ModePlan {
		t.Fatalf("PATCH mode = %d %+v", st, patched)
	}
	events := ts.events(t, sess.ID)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	next(t, events, "agent_end")
	if ts.runs.Load() != 0 {
		t.Fatal("plan mode let shell run")
	}
	var as struct{ Approvals []gate.Approval }
	ts.call(t, "GET", "/api/sessions/"+sess.ID+"/approvals", nil, &as)
	if len(as.Approvals) != 1 {
		t.Fatalf("approvals %+v", as.Approvals)
	}
	a := as.Approvals[0]
	if a.Status != gate.Denied || !a.Automatic || a.DecisionSource != gate.FromMode || a.Mode != gate.ModePlan || a.Reason != gate.PlanReason {
		t.Errorf("plan's record = %+v", a)
	}
	_, page := get(t, ts, nil, "/sessions/"+sess.ID+"/audit")
	if !strings.Contains(page, "decided by plan mode") {
		t.Error("the audit page does not name the mode")
	}
}

// TestRememberSavesARuleThatApprovesAndReleases: issue 17 item 4. "remember" on a prompt saves an
// allow rule (checked by the compiler first), approves the call, and the next call the rule
// covers runs without a prompt, audited with the rule; a link without canRemember cannot, one
// with it can (the rule names the link); "Approve for session" is a session rule listed like any
// other.
func TestRememberSavesARuleThatApprovesAndReleases(t *testing.T) {
	ts := rulesServer(t, map[string]string{"grant": grantTwice})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "rem", "model": "faux:grant"}, &sess)
	plain := createLink(t, ts, sess.ID, map[string]any{"role": "approver"})
	remember := createLink(t, ts, sess.ID, map[string]any{"role": "approver", "label": "Ops", "canRemember": true})
	cPlain, cRem := reviewer(t, ts, plain.URL, "Pat"), reviewer(t, ts, remember.URL, "Rita")
	events := ts.events(t, sess.ID)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	id := next(t, events, "approval_requested")["approval"].(map[string]any)["id"].(string)

	form := url.Values{"decision": {"remember"}, "rule": {"shell"}, "scope": {"session"}}
	if st, body := reviewerDecision(t, ts, cPlain, plain.URL, id, form); st != http.StatusForbidden {
		t.Errorf("remember through a link without canRemember = %d: %.200s", st, body)
	}
	var e errBody
	if st := ts.call(t, "POST", "/api/approvals/"+id+"/decision", map[string]any{"decision": "remember",
		"rule": map[string]string{"text": "shell(bad[)", "scope": "session"}}, &e); st != 400 || !strings.Contains(e.Error.Message, "bad specifier") {
		t.Errorf("a rule the compiler refuses = %d %+v", st, e)
	}
	if st := ts.call(t, "POST", "/api/approvals/"+id+"/decision", map[string]any{"decision": "remember",
		"rule": map[string]string{"text": "shell", "scope": "server"}}, &e); st != 400 {
		t.Errorf("a server-scope remember = %d %+v", st, e)
	}
	// A link reaches one session: it cannot make a workspace rule that loosens the owner's other
	// sessions on the folder.
	if st, body := reviewerDecision(t, ts, cRem, remember.URL, id, url.Values{"decision": {"remember"}, "rule": {"shell"}, "scope": {"workspace"}}); st != http.StatusForbidden {
		t.Errorf("a workspace rule through a link = %d: %.200s", st, body)
	}
	// Nor a glob: "*" through a link would let every call of the session run unasked.
	for _, glob := range []string{"*", "sh*", "s?ell"} {
		if st, body := reviewerDecision(t, ts, cRem, remember.URL, id, url.Values{"decision": {"remember"}, "rule": {glob}, "scope": {"session"}}); st != http.StatusForbidden {
			t.Errorf("a %q rule through a link = %d: %.200s", glob, st, body)
		}
	}
	// Saving approves the call in front of it: a rule that does not cover that call is refused
	// (approving shell by saving a rule for another tool).
	if st := ts.call(t, "POST", "/api/approvals/"+id+"/decision", map[string]any{"decision": "remember",
		"rule": map[string]string{"text": "other_tool", "scope": "session"}}, &e); st != 400 || !strings.Contains(e.Error.Message, "does not name shell") {
		t.Errorf("a rule that does not cover the call = %d %+v", st, e)
	}
	if st, body := reviewerDecision(t, ts, cRem, remember.URL, id, form); st != 200 {
		t.Fatalf("remember through a canRemember link = %d: %.300s", st, body)
	}
	next(t, events, "agent_end")
	if ts.runs.Load() != 2 {
		t.Fatalf("shell ran %d times, want 2 (the second by the rule)", ts.runs.Load())
	}
	var list struct{ Rules []listedRule }
	ts.call(t, "GET", "/api/rules", nil, &list)
	if len(list.Rules) != 2 {
		t.Fatalf("rules = %+v", list.Rules)
	}
	r := list.Rules[1]
	if r.Tool != "shell" || r.Scope != "session" || r.SessionID != sess.ID || r.Source != "prompt" || r.CreatedBy != "Rita" ||
		r.CreatedVia == nil || r.CreatedVia.LinkID != remember.ID || r.Hits != 1 {
		t.Errorf("remembered rule %+v", r)
	}
	var as struct{ Approvals []gate.Approval }
	ts.call(t, "GET", "/api/sessions/"+sess.ID+"/approvals", nil, &as)
	last := as.Approvals[len(as.Approvals)-1]
	if last.Status != gate.Approved || !last.Automatic || last.DecisionSource != gate.FromRule || last.RuleID != r.ID ||
		last.RuleText != "shell" || last.RuleSource != gate.SourcePrompt || last.DecidedBy != gate.ByGrant {
		t.Errorf("the rule's record = %+v", last)
	}
	first := as.Approvals[0]
	if first.DecisionSource != gate.FromPerson || first.DecidedBy != "Rita" {
		t.Errorf("the remembered prompt's record = %+v", first)
	}
	// A grant-shaped rule is a grant too (the issue-15 API is a view over rules).
	var grants struct{ Grants []apiGrant }
	ts.call(t, "GET", "/api/sessions/"+sess.ID+"/grants", nil, &grants)
	if len(grants.Grants) != 1 || grants.Grants[0].GrantedBy != "Rita" {
		t.Errorf("grants = %+v", grants)
	}
}

// TestModeComboboxOnTheSessionPage: SPEC §6 — the owner's session page has a combobox "Mode"
// with the three modes, the current one selected; choosing one switches the session's mode; an
// unknown one is refused in a role="alert"; a reviewer sees the mode as text and cannot post.
func TestModeComboboxOnTheSessionPage(t *testing.T) {
	ts := rulesServer(t, map[string]string{"x": `{"steps":[{"content":[{"type":"text","text":"hi"}],"stopReason":"stop"}]}`})
	var sess agent.Session
	ts.call(t, "POST", "/api/sessions", map[string]string{"title": "m", "model": "faux:x"}, &sess)
	_, page := get(t, ts, nil, "/sessions/"+sess.ID)
	for _, want := range []string{`aria-label="Mode"`, `<option value="default" selected>`, `<option value="plan">`, `<option value="accept-edits">`} {
		if !strings.Contains(page, want) {
			t.Errorf("the session page lacks %q", want)
		}
	}
	st, body := ts.do(t, "POST", "/sessions/"+sess.ID+"/mode", "application/x-www-form-urlencoded", "mode=accept-edits", nil)
	if st != 200 || !strings.Contains(body, `<option value="accept-edits" selected>`) {
		t.Fatalf("switch = %d: %.300s", st, body)
	}
	st, body = ts.do(t, "POST", "/sessions/"+sess.ID+"/mode", "application/x-www-form-urlencoded", "mode=yolo", nil)
	if st != 400 || !strings.Contains(body, `role="alert"`) || !strings.Contains(body, `<option value="accept-edits" selected>`) {
		t.Errorf("an unknown mode = %d: %.300s", st, body)
	}
	l := createLink(t, ts, sess.ID, map[string]any{"role": "approver", "canRemember": true})
	c := reviewer(t, ts, l.URL, "Rex")
	if _, page := get(t, ts, c, l.URL); strings.Contains(page, `aria-label="Mode"`) || !strings.Contains(page, "accept-edits") {
		t.Error("a reviewer's page: want the mode as text, no combobox")
	}
	if st, _ := ts.do(t, "POST", "/sessions/"+sess.ID+"/mode", "application/x-www-form-urlencoded", "mode=default", c); st == 200 {
		t.Error("a reviewer switched the mode")
	}
	var got agent.Session
	ts.call(t, "GET", "/api/sessions/"+sess.ID, nil, &got)
	if got.Mode != gate.ModeAcceptEdits {
		t.Errorf("mode = %q", got.Mode)
	}
}
