package web_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"countersign/internal/gate"
)

// Issue 20, acceptance 5 and 6 (SPEC §15 "Several approvers"): a rule that needs two named
// people; links made for a person.

// namedReviewer is an HTTP client that opened a link made for a person: it is never asked for a
// name and is signed in as that person at once.
func namedReviewer(t *testing.T, link, name string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	res, err := c.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || strings.Contains(string(body), "Your name") || !strings.Contains(string(body), "Signed in as "+name) {
		t.Fatalf("a link made for %s = %d, want the session without a name form: %.400s", name, res.StatusCode, body)
	}
	return c
}

// ownerForm posts a decision form as the owner's session page does.
func ownerForm(t *testing.T, ts *testServer, sid, id string, form url.Values) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", ts.URL+"/sessions/"+sid+"/approvals/"+id+"/decision", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, html.UnescapeString(string(body))
}

func TestTwoNamedReviewersMustApproveAndTheOwnerIsNotOne(t *testing.T) {
	ts, sid := shareServer(t)
	var rule struct {
		Approvers int
		Reviewers []string
		Text      string
	}
	if st := ts.call(t, "POST", "/api/rules", map[string]any{"text": "shell approvers=2 reviewers=alice,bob", "effect": "ask", "scope": "server"}, &rule); st != 201 ||
		rule.Approvers != 2 || strings.Join(rule.Reviewers, ",") != "alice,bob" || rule.Text != "shell approvers=2 reviewers=alice,bob" {
		t.Fatalf("the rule = %d %+v", st, rule)
	}
	alice := createLink(t, ts, sid, map[string]any{"role": "approver", "label": "A", "for": "alice"})
	bob := createLink(t, ts, sid, map[string]any{"role": "approver", "label": "B", "for": "bob"})
	ca, cb := namedReviewer(t, alice.URL, "alice"), namedReviewer(t, bob.URL, "bob")

	events := ts.events(t, sid)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sid+"/messages", map[string]string{"text": "go"}, nil)
	ap := next(t, events, "approval_requested")["approval"].(map[string]any)
	id := ap["id"].(string)
	if ap["approvers"] != float64(2) {
		t.Fatalf("the approval does not carry its approvers: %v", ap)
	}
	if _, page := get(t, ts, nil, "/sessions/"+sid); !strings.Contains(html.UnescapeString(approvalGroup(t, page, id)), "0 of 2 approvals") {
		t.Errorf("the owner's prompt lacks the votes line")
	}

	t.Run("the owner's approve is refused as not a listed reviewer (page and API)", func(t *testing.T) {
		st, body := ownerForm(t, ts, sid, id, url.Values{"decision": {"approve"}})
		if st != http.StatusForbidden || !strings.Contains(body, "owner is not a listed reviewer") {
			t.Errorf("the owner's form = %d: %.300s", st, body)
		}
		var e struct {
			Error struct{ Code, Message string }
		}
		if st := ts.call(t, "POST", "/api/approvals/"+id+"/decision", map[string]string{"decision": "approve"}, &e); st != http.StatusForbidden ||
			!strings.Contains(e.Error.Message, "owner is not a listed reviewer") {
			t.Errorf("the owner's API decision = %d %q", st, e.Error.Message)
		}
	})
	t.Run("a link made for alice cannot take another name", func(t *testing.T) {
		u, _ := url.Parse(alice.URL)
		res, err := ca.PostForm(ts.URL+u.Path+"/name", url.Values{"name": {"bob"}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("renaming alice's link = %d, want 403", res.StatusCode)
		}
	})
	for i := range 2 { // alice twice: counted once
		st, body := reviewerDecision(t, ts, ca, alice.URL, id, url.Values{"decision": {"approve"}})
		body = html.UnescapeString(body)
		if st != 200 || !strings.Contains(body, "1 of 2 approvals — approved by alice") || !strings.Contains(body, `hx-swap-oob="true"`) {
			t.Fatalf("alice's approval #%d = %d: %.500s", i+1, st, body)
		}
	}
	upd := next(t, events, "approval_updated")["approval"].(map[string]any)
	if votes := upd["votes"].([]any); len(votes) != 1 || votes[0].(map[string]any)["by"] != "alice" || upd["status"] != "pending" {
		t.Fatalf("approval_updated carries %v", upd)
	}
	if a, _ := ts.db.Approval(context.Background(), id); a.Status != gate.Pending || len(a.Votes) != 1 || ts.runs.Load() != 0 {
		t.Fatalf("after alice: %s with %d votes, %d runs", a.Status, len(a.Votes), ts.runs.Load())
	}
	if _, audit := get(t, ts, nil, "/sessions/"+sid+"/audit"); !strings.Contains(html.UnescapeString(audit), "approved by alice") ||
		strings.Contains(audit, "saved rule") {
		t.Errorf("the pending row's audit: want alice's vote, and no \"saved rule\" for the ask rule it waits on")
	}
	if _, page := get(t, ts, cb, bob.URL); !strings.Contains(html.UnescapeString(page), "1 of 2 approvals — approved by alice") {
		t.Errorf("bob's page does not show alice's approval")
	}
	if st, body := reviewerDecision(t, ts, cb, bob.URL, id, url.Values{"decision": {"approve"}}); st != 200 {
		t.Fatalf("bob's approval = %d: %.300s", st, body)
	}
	next(t, events, "agent_end")
	a, _ := ts.db.Approval(context.Background(), id)
	if a.Status != gate.Approved || a.DecidedBy != "bob" || a.Approvals() != 2 || ts.runs.Load() != 1 {
		t.Fatalf("after bob: %+v, %d runs", a, ts.runs.Load())
	}
	_, audit := get(t, ts, nil, "/sessions/"+sid+"/audit")
	audit = html.UnescapeString(audit)
	for _, want := range []string{"needs 2 approvals", "approved by alice", "approved by bob"} {
		if !strings.Contains(audit, want) {
			t.Errorf("the audit lacks %q", want)
		}
	}
}

func TestLinksMadeForAPerson(t *testing.T) {
	ts, sid := shareServer(t)
	tests := []struct {
		name string
		body map[string]any
		want int
	}{
		{"a reserved name", map[string]any{"role": "approver", "for": "0wner"}, 400},
		{"a viewer link for a person", map[string]any{"role": "viewer", "for": "alice"}, 400},
		{"a name with markup", map[string]any{"role": "approver", "for": "<b>al</b>"}, 400},
		{"a person", map[string]any{"role": "approver", "for": "  alice "}, 201},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var l struct {
				For   string
				Error any
			}
			if st := ts.call(t, "POST", "/api/sessions/"+sid+"/shares", tc.body, &l); st != tc.want {
				t.Fatalf("= %d (%+v), want %d", st, l, tc.want)
			}
			if tc.want == 201 && l.For != "alice" {
				t.Fatalf("for = %q, want alice", l.For)
			}
		})
	}
	t.Run("an unnamed link still asks for a name", func(t *testing.T) {
		l := createLink(t, ts, sid, map[string]any{"role": "approver"})
		reviewer(t, ts, l.URL, "Rita") // fails unless the name form comes first
	})
	t.Run("a forged name cookie on a named link changes nothing", func(t *testing.T) {
		l := createLink(t, ts, sid, map[string]any{"role": "approver", "for": "alice"})
		c := namedReviewer(t, l.URL, "alice")
		u, _ := url.Parse(l.URL)
		c.Jar.SetCookies(u, []*http.Cookie{{Name: "countersign_reviewer", Value: "mallory.00", Path: u.Path}})
		if _, page := get(t, ts, c, l.URL); !strings.Contains(page, "Signed in as alice") {
			t.Errorf("the named link's holder is not alice any more")
		}
	})
}

func TestRulesAPIRefusesApproversOutsideAskRules(t *testing.T) {
	ts, _ := shareServer(t)
	tests := []struct {
		name string
		body map[string]any
		msg  string
	}{
		{"approvers on an allow rule", map[string]any{"tool": "shell", "effect": "allow", "scope": "server", "approvers": 2},
			"approvers and reviewers apply to ask rules only: this allow rule decides without asking anyone"},
		{"reviewers in a deny rule's text", map[string]any{"text": "shell reviewers=alice", "effect": "deny", "scope": "server"},
			"approvers and reviewers apply to ask rules only: this deny rule decides without asking anyone"},
		{"one approver", map[string]any{"tool": "shell", "effect": "ask", "scope": "server", "approvers": 1},
			"approvers must be from 2 to 20"},
		{"people twice", map[string]any{"text": "shell approvers=2", "effect": "ask", "scope": "server", "approvers": 3},
			"not both"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var e struct {
				Error struct{ Code, Message string }
			}
			if st := ts.call(t, "POST", "/api/rules", tc.body, &e); st != 400 || !strings.Contains(e.Error.Message, tc.msg) {
				t.Fatalf("= %d %q, want 400 saying %q", st, e.Error.Message, tc.msg)
			}
		})
	}
}

// TestRulesPageSetsApproversAndReviewers: the add form's Approvers and Reviewers make an ask rule
// that needs them, shown in the rule's text; on an allow rule they are refused in an alert; a
// reviewer name with markup is refused, never shown as markup.
func TestRulesPageSetsApproversAndReviewers(t *testing.T) {
	ts := rulesServer(t, map[string]string{"x": `{"steps":[{"content":[{"type":"text","text":"hi"}],"stopReason":"stop"}]}`})
	for _, tc := range []struct {
		name string
		form url.Values
		st   int
		want string
	}{
		{"an ask rule with two reviewers", url.Values{"rule": {"shell"}, "effect": {"ask"}, "scope": {"server"}, "approvers": {"2"}, "reviewers": {"alice, bob"}},
			200, "shell approvers=2 reviewers=alice,bob"},
		{"in the text form", url.Values{"rule": {"deploy approvers=3"}, "effect": {"ask"}, "scope": {"server"}},
			200, "deploy approvers=3"},
		{"an allow rule with approvers", url.Values{"rule": {"shell"}, "effect": {"allow"}, "scope": {"server"}, "approvers": {"2"}},
			400, "approvers and reviewers apply to ask rules only: this allow rule decides without asking anyone"},
		{"not a number", url.Values{"rule": {"shell"}, "effect": {"ask"}, "scope": {"server"}, "approvers": {"two"}},
			400, "Approvers must be a number such as 2"},
		{"a reviewer with markup", url.Values{"rule": {"shell"}, "effect": {"ask"}, "scope": {"server"}, "reviewers": {"<img src=x>"}},
			400, "A name may hold letters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, body := ts.do(t, "POST", "/rules", formType, tc.form.Encode(), nil)
			if st != tc.st || !strings.Contains(html.UnescapeString(body), tc.want) {
				t.Fatalf("= %d, want %d with %q: %.2000s", st, tc.st, tc.want, body)
			}
			if strings.Contains(body, "<img src=x>") {
				t.Fatal("a reviewer's name is shown as markup")
			}
		})
	}
}

// TestLinksForLookAlikeNamesAreOnePerson (issue 33): links made for "alice" and for "аlice"
// (Cyrillic а) are one person: both approving a call that needs two approvals leave it pending
// with one approval, and nothing runs.
func TestLinksForLookAlikeNamesAreOnePerson(t *testing.T) {
	ts, sid := shareServer(t)
	if st := ts.call(t, "POST", "/api/rules", map[string]any{"text": "shell approvers=2", "effect": "ask", "scope": "server"}, nil); st != 201 {
		t.Fatalf("the rule = %d", st)
	}
	alice := createLink(t, ts, sid, map[string]any{"role": "approver", "label": "A", "for": "alice"})
	fake := createLink(t, ts, sid, map[string]any{"role": "approver", "label": "A2", "for": "\u0430lice"})
	ca, cf := namedReviewer(t, alice.URL, "alice"), namedReviewer(t, fake.URL, "\u0430lice")
	events := ts.events(t, sid)
	next(t, events, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sid+"/messages", map[string]string{"text": "go"}, nil)
	id := next(t, events, "approval_requested")["approval"].(map[string]any)["id"].(string)
	if st, body := reviewerDecision(t, ts, ca, alice.URL, id, url.Values{"decision": {"approve"}}); st != 200 {
		t.Fatalf("alice's approval = %d: %.300s", st, body)
	}
	st, body := reviewerDecision(t, ts, cf, fake.URL, id, url.Values{"decision": {"approve"}})
	if body = html.UnescapeString(body); st != 200 || !strings.Contains(body, "1 of 2 approvals — approved by alice") {
		t.Errorf("аlice's approval = %d, want 200 and still one approval: %.500s", st, body)
	}
	if a, _ := ts.db.Approval(context.Background(), id); a.Status != gate.Pending || a.Approvals() != 1 || ts.runs.Load() != 0 {
		t.Fatalf("after alice and аlice: %s with %d approvals, %d runs; want pending with one, nothing run", a.Status, a.Approvals(), ts.runs.Load())
	}
}
