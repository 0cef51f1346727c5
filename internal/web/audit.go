package web

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/tool"
	"countersign/web/templates"
)

// The outcome of a gated call, as the audit's Outcome column says it (issue 16, item 6): what its
// stored tool result says happened.
const (
	outcomeOK        = "ok"        // it ran and succeeded
	outcomeError     = "error"     // it ran (or was stopped while running) and failed: isError
	outcomeNotRun    = "not run"   // never executed: denied, timed out, cancelled or blocked
	outcomeViolation = "violation" // it ran; its result broke the tool's outputSchema (SPEC §1 rule 3)
	outcomePending   = "pending"   // waiting for a person
	outcomeRunning   = "running"   // approved, no result yet, the session's run goes on
	outcomeUnknown   = "unknown"   // approved, no result kept (deeper nesting, a full nestedCalls record)
)

// auditOutcomes are the outcome filter's values, in the form's order: the query value (no
// spaces, so a URL stays readable) and the outcome.
var auditOutcomes = []templates.Option{
	{Value: "ok", Label: outcomeOK}, {Value: "error", Label: outcomeError},
	{Value: "not-run", Label: outcomeNotRun}, {Value: "violation", Label: outcomeViolation},
	{Value: "pending", Label: outcomePending}, {Value: "running", Label: outcomeRunning},
	{Value: "unknown", Label: outcomeUnknown},
}

// auditDecisions are the decision filter's values: the approval statuses (SPEC §3).
var auditDecisions = []templates.Option{
	{Value: string(gate.Pending), Label: gate.Pending.Word()}, {Value: string(gate.Approved), Label: gate.Approved.Word()},
	{Value: string(gate.Denied), Label: gate.Denied.Word()}, {Value: string(gate.TimedOut), Label: gate.TimedOut.Word()},
	{Value: string(gate.Cancelled), Label: gate.Cancelled.Word()},
}

// auditDeciders are the "decided by" filter's values: a rule (automatic) or a person.
var auditDeciders = []templates.Option{{Value: "automatic", Label: "automatic"}, {Value: "person", Label: "a person"}}

// decidedFrom says in words what made an automatic decision (SPEC §14: the rule with its text,
// source and id, the mode, or the annotation default); "" for a person's and for older records.
func decidedFrom(a gate.Approval) string {
	if !a.Automatic {
		return ""
	}
	switch a.DecisionSource {
	case gate.FromRule:
		return fmt.Sprintf("rule %s (%s, id %s)", a.RuleText, a.RuleSource, a.RuleID)
	case gate.FromMode:
		return string(a.Mode) + " mode"
	case gate.FromAnnotations, gate.FromHandler:
		return a.DecisionSource.Words()
	}
	return ""
}

// auditPage lists every gated call of a session with its decision (SPEC §3, §6) and its
// outcome, narrowed by the filters of its GET form (query decision, by, tool, outcome), so a
// filtered view is a link one can share. A grouped record (issue 19: nested calls of one parent
// that rules allowed the same way) is one row saying how many calls it stands for ("×1,000"),
// its first and last decision times, and the calls' outcome together; the counts of calls above
// the table add up the calls, not the rows. A filter value it does not know is refused (400) with
// the values it takes; the page still lists the calls the other filters select.
func (s *Server) auditPage(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	sess, err := s.cfg.Store.Session(r.Context(), id)
	if err != nil {
		return err
	}
	approvals, err := s.cfg.Store.Approvals(r.Context(), id, "")
	if err != nil {
		return err
	}
	entries, err := s.cfg.Store.Entries(r.Context(), id)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := templates.AuditFilter{Decision: q.Get("decision"), By: q.Get("by"), Tool: q.Get("tool"), Outcome: q.Get("outcome")}
	var bad []string
	check := func(name string, value *string, opts []templates.Option) {
		if *value == "" || slices.ContainsFunc(opts, func(o templates.Option) bool { return o.Value == *value }) {
			return
		}
		values := make([]string, len(opts))
		for i, o := range opts {
			values[i] = o.Value
		}
		bad = append(bad, fmt.Sprintf("%s %q is not one of %s", name, *value, strings.Join(values, ", ")))
		*value = ""
	}
	check("decision", &f.Decision, auditDecisions)
	check("by", &f.By, auditDeciders)
	check("outcome", &f.Outcome, auditOutcomes)

	v := templates.AuditView{Title: sess.Title, BackURL: "/sessions/" + id, URL: "/sessions/" + id + "/audit",
		Filter: f, Decisions: auditDecisions, Deciders: auditDeciders, Outcomes: auditOutcomes}
	for _, a := range approvals {
		v.Total += a.Calls()
	}
	if len(bad) > 0 {
		v.Error = "Unknown filter: " + strings.Join(bad, "; ") + "."
	}
	results := resultsByCall(entries)
	running := s.cfg.Runner.Busy(id)
	ruleScopes := map[string]gate.RuleScope{}
	for _, rl := range s.cfg.Gate.Rules() {
		ruleScopes[rl.ID] = rl.Scope
	}
	for _, a := range approvals {
		if !slices.Contains(v.Tools, a.ToolName) {
			v.Tools = append(v.Tools, a.ToolName)
		}
		outcome, detail := callOutcome(a, results, running)
		if !auditMatches(f, a, outcome) {
			continue
		}
		row := templates.AuditRow{AskedAt: a.CreatedAt, DecidedAt: a.DecidedAt, ToolName: a.ToolName, ToolCallID: a.ToolCallID,
			RequestedBy: a.RequestedBy, Status: string(a.Status), StatusWord: a.Status.Word(), DecidedBy: a.DecidedBy,
			Automatic: a.Automatic, Edited: len(a.EditedArguments) > 0, Scope: string(a.Scope), Reason: a.Reason,
			AskReason: a.AskReason, Arguments: prettyJSON(a.Arguments), EditedArguments: prettyJSON(a.EditedArguments),
			Outcome: outcome, OutcomeDetail: detail, DecidedFrom: decidedFrom(a)}
		if a.Grouped() {
			row.Count, row.LastAt = a.Count, a.LastAt
		}
		v.Shown += a.Calls()
		if row.RequestedBy != gate.RequestedByModel && a.ParentToolCallID != "" {
			row.RequestedBy += " · call " + a.ParentToolCallID
		}
		// A rule that decided, or that a person's decision saved; not the ask rule a pending
		// call waits on (its reason already says "asks because rule …").
		if a.RuleText != "" && (a.DecisionSource == gate.FromRule && a.Status != gate.Pending || !a.Automatic && a.RuleScope != "") {
			row.RuleText, row.RuleID, row.RuleSource = a.RuleText, a.RuleID, string(a.RuleSource)
			row.RuleURL = "/rules#rule-" + a.RuleID
		}
		if a.RuleScope != "" {
			// A person's decision that saved a rule reaches as far as the rule: say its scope.
			row.Scope = string(a.RuleScope)
		} else if a.Automatic && a.DecisionSource == gate.FromRule && row.Scope == "" {
			// A rule's own decision: the rule's scope, while the rule exists.
			row.Scope = string(ruleScopes[a.RuleID])
		}
		if via := a.DecidedVia; via != nil {
			row.LinkID, row.LinkLabel = via.LinkID, via.Label
		}
		if a.Quorum() {
			row.Approvers = a.Approvers
		}
		for _, vt := range a.Votes {
			av := templates.AuditVote{Decision: string(vt.Decision), By: vt.By, Reason: vt.Reason, At: vt.At}
			if vt.Via != nil {
				av.LinkID, av.LinkLabel = vt.Via.LinkID, vt.Via.Label
			}
			row.Votes = append(row.Votes, av)
		}
		v.Rows = append(v.Rows, row)
	}
	slices.Sort(v.Tools)
	st := http.StatusOK
	if v.Error != "" {
		st = http.StatusBadRequest
	}
	if v.Deliveries, err = s.deliveryRows(r.Context(), id); err != nil {
		return err
	}
	s.render(w, r, st, templates.Layout(s.ownerPage(r.Context(), "Audit: "+sess.Title, false), templates.AuditPage(v)))
	return nil
}

// auditMatches reports whether a gated call passes the audit's filters.
func auditMatches(f templates.AuditFilter, a gate.Approval, outcome string) bool {
	switch {
	case f.Decision != "" && string(a.Status) != f.Decision:
		return false
	case f.By == "automatic" && !a.Automatic:
		return false
	case f.By == "person" && (a.Automatic || a.Status == gate.Pending):
		return false
	case f.Tool != "" && a.ToolName != f.Tool:
		return false
	case f.Outcome != "" && strings.ReplaceAll(outcome, " ", "-") != f.Outcome:
		return false
	}
	return true
}

// callOutcome says what became of a gated call, from its decision and its stored tool result: a
// model-issued call's transcript entry, a nested call's entry in its parent's nestedCalls record
// (SPEC §4). detail is the error text, first line, for the cell's tooltip ("" for none). A
// grouped record's outcome is its calls' together (groupOutcome).
func callOutcome(a gate.Approval, results map[callKey]*tool.Result, running bool) (outcome, detail string) {
	if a.Grouped() {
		if outcome, detail, ok := groupOutcome(a, results); ok {
			return outcome, detail
		}
		if running {
			return outcomeRunning, ""
		}
		return outcomeUnknown, "no result was kept for these calls"
	}
	switch a.Status {
	case gate.Pending:
		return outcomePending, ""
	case gate.Denied, gate.TimedOut, gate.Cancelled:
		// Never executed: the gate stopped it (a tool_call handler's block is a denial too).
		return outcomeNotRun, ""
	}
	if a.ParentToolCallID == "" {
		if res := results[callKey{a.MessageID, a.ToolCallID}]; res != nil {
			switch {
			case res.ContractViolation != nil:
				return outcomeViolation, firstLine(res.TextOf())
			case res.IsError:
				return outcomeError, firstLine(res.TextOf())
			}
			return outcomeOK, ""
		}
	} else if parent := results[callKey{a.MessageID, a.ParentToolCallID}]; parent != nil && parent.NestedCalls != nil {
		for _, n := range parent.NestedCalls.Calls {
			if n.ID != a.ToolCallID {
				continue
			}
			switch {
			case n.Violation:
				return outcomeViolation, firstLine(n.Error)
			case n.Status == tool.NestedOK:
				return outcomeOK, ""
			case n.Status == tool.NestedBlocked || n.Status == tool.NestedDenied:
				return outcomeNotRun, ""
			}
			return outcomeError, firstLine(n.Error)
		}
	}
	if running {
		return outcomeRunning, ""
	}
	return outcomeUnknown, "no result was kept for this call"
}

// groupOutcome is what became of the calls a grouped record stands for, from the entries of its
// parent's nestedCalls record that name it (approvalId): violation when any call's result broke
// its outputSchema, error when any failed, else ok; detail says how many of the calls, and the
// first one's error text. ok is false when the record keeps none of them (no result yet, or
// the record was full). When the record keeps fewer calls than the group counts, detail says so;
// a group of one call reads as that call's row would.
func groupOutcome(a gate.Approval, results map[callKey]*tool.Result) (outcome, detail string, ok bool) {
	parent := results[callKey{a.MessageID, a.ParentToolCallID}]
	if parent == nil || parent.NestedCalls == nil {
		return "", "", false
	}
	kept, failed, violations := 0, 0, 0
	first := ""
	for _, n := range parent.NestedCalls.Calls {
		if n.ApprovalID != a.ID {
			continue
		}
		kept++
		switch {
		case n.Violation:
			violations++
		case n.Status == tool.NestedOK:
			continue
		default:
			failed++
		}
		if first == "" {
			first = firstLine(n.Error)
		}
	}
	switch {
	case kept == 0:
		return "", "", false
	case a.Count == 1 && violations > 0:
		return outcomeViolation, first, true // a group of one reads as its call
	case a.Count == 1 && failed > 0:
		return outcomeError, first, true
	}
	of := templates.Thousands(a.Count)
	if kept < a.Count {
		of = fmt.Sprintf("the %s kept of %s", templates.Thousands(kept), templates.Thousands(a.Count))
	}
	switch {
	case violations > 0:
		return outcomeViolation, fmt.Sprintf("%s of %s calls broke the outputSchema: %s", templates.Thousands(violations), of, first), true
	case failed > 0:
		return outcomeError, fmt.Sprintf("%s of %s calls failed: %s", templates.Thousands(failed), of, first), true
	case kept < a.Count:
		return outcomeOK, fmt.Sprintf("the %s calls its parent's record keeps are ok; it does not keep the other %s",
			templates.Thousands(kept), templates.Thousands(a.Count-kept)), true
	}
	return outcomeOK, "", true
}

// resultsByCall maps each tool result of a transcript to its call: a result belongs to the
// latest assistant message before it (tool call ids repeat across messages).
func resultsByCall(entries []agent.Entry) map[callKey]*tool.Result {
	out := map[callKey]*tool.Result{}
	lastAssistant := ""
	for _, e := range entries {
		switch e.Message.Role {
		case agent.Assistant:
			lastAssistant = e.Message.ID
		case agent.ToolResult:
			out[callKey{lastAssistant, e.Message.ToolCallID}] = e.Message.Result
		}
	}
	return out
}

// firstLine is the first line of s, cut to 200 bytes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return tool.CutUTF8(s, 200)
}
