package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"countersign/internal/testkit"
)

// nestedRulesScript: a real codemode script writing a denied file and an allowed one, beside
// two top-level write_file calls of the same kinds; then, after the test switches to plan mode,
// the same again with a read.
const nestedRulesScript = `{"steps":[
 {"content":[
   {"type":"toolCall","id":"cm","name":"codemode","arguments":{"code":"let denied; try { await tools.write_file({path: 'secrets/a', content: 'x'}); denied = 'wrote' } catch (e) { denied = e.message }\nawait tools.write_file({path: 'docs/a', content: 'x'});\nreturn denied;"}},
   {"type":"toolCall","id":"top-secret","name":"write_file","arguments":{"path":"secrets/top","content":"x"}},
   {"type":"toolCall","id":"top-docs","name":"write_file","arguments":{"path":"docs/top","content":"x"}}],
  "stopReason":"toolUse"},
 {"content":[{"type":"text","text":"first done"}],"stopReason":"stop"},
 {"content":[
   {"type":"toolCall","id":"cm2","name":"codemode","arguments":{"code":"const out = []; for (const p of ['docs/b', 'secrets/b']) { try { await tools.write_file({path: p, content: 'x'}); out.push('wrote ' + p) } catch (e) { out.push(e.message) } }\nconst l = await tools.list_files({});\nout.push('listed ' + l.files.length);\nreturn out.join(' | ');"}},
   {"type":"toolCall","id":"top-plan","name":"write_file","arguments":{"path":"docs/plan","content":"x"}}],
  "stopReason":"toolUse"},
 {"content":[{"type":"text","text":"second done"}],"stopReason":"stop"}
]}`

type auditRow struct {
	ID               string `json:"id"`
	ToolCallID       string `json:"toolCallId"`
	ParentToolCallID string `json:"parentToolCallId"`
	RequestedBy      string `json:"requestedBy"`
	Status           string `json:"status"`
	Reason           string `json:"reason"`
	DecisionSource   string `json:"decisionSource"`
	RuleText         string `json:"ruleText"`
	Mode             string `json:"mode"`
}

// TestNestedCallsFollowRulesAndModeInTheRealServer (issue 17, acceptance 4, end to end): with a
// `deny write_file(secrets/**)` rule, a real codemode script's nested write is denied exactly as
// a top-level one is (same source, same rule), its allowed write prompts inside the codemode call
// naming it, and top-level calls decided while that nested prompt is pending follow the rules
// unchanged; then in plan mode every write, nested or not, is denied without a prompt while a
// nested read runs.
func TestNestedCallsFollowRulesAndModeInTheRealServer(t *testing.T) {
	f := newServerFiles(t)
	if err := os.WriteFile(filepath.Join(f.scripts, "nestedrules.json"), []byte(nestedRulesScript), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServing(t, f.args("127.0.0.1:0")...)
	p.mustAPI(t, http.StatusCreated, "POST", "/api/rules", map[string]string{"text": "write_file(secrets/**)", "effect": "deny", "scope": "server"}, nil)
	var sess struct{ ID string }
	p.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "nested rules", "model": "faux:nestedrules"}, &sess)
	p.mustAPI(t, http.StatusOK, "PUT", "/api/sessions/"+sess.ID+"/tools", map[string]any{"active": []string{"read_file", "write_file", "list_files", "run_command", "codemode"}}, nil)
	approvals := func(status string) []auditRow {
		var out struct{ Approvals []auditRow }
		p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID+"/approvals"+status, nil, &out)
		return out.Approvals
	}
	byCall := func() map[string]auditRow {
		m := map[string]auditRow{}
		for _, a := range approvals("") {
			m[a.ToolCallID] = a
		}
		return m
	}

	p.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "first"}, nil)
	// Two prompts: the top-level docs write and, inside codemode, the nested docs write.
	var pending []auditRow
	testkit.Eventually(t, "the two write_file prompts", func() bool {
		pending = approvals("?status=pending")
		return len(pending) == 2
	})
	seen := byCall()
	for _, id := range []string{"cm/1", "top-secret"} {
		a := seen[id]
		if a.Status != "denied" || a.DecisionSource != "rule" || a.RuleText != "write_file(secrets/**)" {
			t.Errorf("%s: %+v, want denied by the rule write_file(secrets/**)", id, a)
		}
	}
	for _, a := range pending {
		switch a.ToolCallID {
		case "cm/2":
			if a.ParentToolCallID != "cm" || a.RequestedBy != "codemode" {
				t.Errorf("the nested prompt names %q / %q, want the parent cm / codemode", a.ParentToolCallID, a.RequestedBy)
			}
		case "top-docs":
			if a.ParentToolCallID != "" || a.RequestedBy != "model" {
				t.Errorf("the top-level prompt = %+v", a)
			}
		default:
			t.Errorf("unexpected prompt %+v", a)
		}
		p.mustAPI(t, http.StatusOK, "POST", "/api/approvals/"+a.ID+"/decision", map[string]string{"decision": "approve"}, nil)
	}
	var body []byte
	testkit.Eventually(t, "the first run to end", func() bool {
		body = p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID, nil, nil)
		return bytes.Contains(body, []byte("first done")) && bytes.Contains(body, []byte(`"state": "idle"`))
	})
	for _, name := range []string{"docs/a", "docs/top"} {
		if _, err := os.Stat(filepath.Join(f.workspace, name)); err != nil {
			t.Errorf("%s was not written: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(f.workspace, "secrets")); err == nil {
		t.Errorf("a denied write reached the workspace")
	}
	if !bytes.Contains(body, []byte("write_file(secrets/**)")) {
		t.Errorf("the codemode result does not carry the rule's denial:\n%s", body)
	}

	// Plan mode: every write is denied without a prompt, nested or not; the nested read runs.
	p.mustAPI(t, http.StatusOK, "PATCH", "/api/sessions/"+sess.ID, map[string]string{"mode": "plan"}, nil)
	p.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "second"}, nil)
	testkit.Eventually(t, "the second run to end", func() bool {
		body = p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID, nil, nil)
		return bytes.Contains(body, []byte("second done")) && bytes.Contains(body, []byte(`"state": "idle"`))
	})
	if n := len(approvals("?status=pending")); n != 0 {
		t.Errorf("%d prompts in plan mode, want none", n)
	}
	seen = byCall()
	for id, src := range map[string]string{"cm2/1": "mode", "cm2/2": "rule", "top-plan": "mode"} {
		a := seen[id]
		if a.Status != "denied" || a.DecisionSource != src || a.Mode != "plan" {
			t.Errorf("%s: %+v, want denied by the %s in plan mode", id, a, src)
		}
		if src == "mode" && a.Reason != "Plan mode: read-only" {
			t.Errorf("%s: reason %q", id, a.Reason)
		}
	}
	if a := seen["cm2/3"]; a.Status != "approved" || a.DecisionSource != "annotation default" {
		t.Errorf("the nested list_files: %+v, want approved by the annotation default", a)
	}
	// The script saw each denial as the error of its call, and its read ran.
	if !bytes.Contains(body, []byte(`Plan mode: read-only | rule write_file(secrets/**) denies write_file secrets/b | listed `)) {
		t.Errorf("the second codemode result does not show the plan denial, the rule's and the read:\n%s", body)
	}
	for _, name := range []string{"docs/b", "docs/plan"} {
		if _, err := os.Stat(filepath.Join(f.workspace, name)); err == nil {
			t.Errorf("%s was written in plan mode", name)
		}
	}
}

// redirectScript: an allowed command redirected inside the workspace, then the same program
// redirected onto the database, the policy file and through a symlink out of the workspace.
const redirectScript = `{"steps":[
 {"content":[
   {"type":"toolCall","id":"inside","name":"run_command","arguments":{"command":"ls > list.txt"}},
   {"type":"toolCall","id":"db","name":"run_command","arguments":{"command":"ls > cs.db"}},
   {"type":"toolCall","id":"policy","name":"run_command","arguments":{"command":"ls >> policy.json"}},
   {"type":"toolCall","id":"link","name":"run_command","arguments":{"command":"ls > out/x"}}],
  "stopReason":"toolUse"},
 {"content":[{"type":"text","text":"done"}],"stopReason":"stop"}
]}`

// TestAllowedCommandsCannotRedirectToTheServersOwnFiles: the server gives the rules its own
// files (SPEC §14: the agent can never write its own rules), so with `run_command(ls:*)` allowed
// by the policy file and the database and the policy file in the workspace (as `make run` keeps
// them), `ls > list.txt` runs without a prompt while `ls > cs.db`, `ls >> policy.json` and
// `ls > out/x` (out a symlink leaving the workspace) ask; denied, nothing is written.
func TestAllowedCommandsCannotRedirectToTheServersOwnFiles(t *testing.T) {
	f := newServerFiles(t)
	f.db = filepath.Join(f.workspace, "cs.db")
	if err := os.WriteFile(filepath.Join(f.scripts, "redirect.json"), []byte(redirectScript), 0o644); err != nil {
		t.Fatal(err)
	}
	const policyText = `{"permissions": {"allow": ["run_command(ls:*)"]}}`
	policy := filepath.Join(f.workspace, "policy.json")
	if err := os.WriteFile(policy, []byte(policyText), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(f.workspace, "out")); err != nil {
		t.Fatal(err)
	}
	p := startServing(t, append(f.args("127.0.0.1:0"), "-policy", policy)...)
	var sess struct{ ID string }
	p.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "redirect", "model": "faux:redirect"}, &sess)
	p.mustAPI(t, http.StatusOK, "PUT", "/api/sessions/"+sess.ID+"/tools", map[string]any{"active": []string{"run_command"}}, nil)
	p.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	asked := map[string]bool{}
	var body []byte
	testkit.Eventually(t, "the run to end", func() bool {
		var out struct{ Approvals []auditRow }
		p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID+"/approvals?status=pending", nil, &out)
		for _, a := range out.Approvals {
			asked[a.ToolCallID] = true
			p.mustAPI(t, http.StatusOK, "POST", "/api/approvals/"+a.ID+"/decision", map[string]string{"decision": "deny"}, nil)
		}
		body = p.mustAPI(t, http.StatusOK, "GET", "/api/sessions/"+sess.ID, nil, nil)
		return bytes.Contains(body, []byte(`"done"`)) && bytes.Contains(body, []byte(`"state": "idle"`))
	})
	if want := map[string]bool{"db": true, "policy": true, "link": true}; len(asked) != len(want) || !asked["db"] || !asked["policy"] || !asked["link"] {
		t.Errorf("asked for %v, want exactly %v", asked, want)
	}
	if _, err := os.Stat(filepath.Join(f.workspace, "list.txt")); err != nil {
		t.Errorf("the allowed command did not run: %v", err)
	}
	if got, _ := os.ReadFile(policy); string(got) != policyText {
		t.Errorf("the policy file changed: %s", got)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Errorf("a command wrote outside the workspace through the symlink")
	}
}
