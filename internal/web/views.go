package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/a-h/templ"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/notify"
	"countersign/internal/render"
	"countersign/internal/share"
	"countersign/internal/tool"
	"countersign/web/templates"
)

// viewer is who looks at a page and what they may do there.
type viewer struct {
	owner bool
	// decidePrefix, when set, is where this viewer's decision forms post: the prefix of
	// <prefix><approval id>/decision. Empty for read-only viewers.
	decidePrefix string
	// decider is who decides and with what rights: the owner, or a reviewer (their display name,
	// "" before they gave one) through a share link. The prompt shows only the buttons its
	// rights allow; the runner refuses the rest.
	decider gate.Decider
}

// ownerViewer is the owner looking at session id.
func ownerViewer(id string) viewer {
	return viewer{owner: true, decidePrefix: "/sessions/" + id + "/approvals/", decider: gate.Owner()}
}

// sessionView builds the session page's view model from the store and the run's live state.
// The owner gets the composer, the Tools and share panels and the audit link; a reviewer gets
// the transcript, live, and — with the approver role — the decision buttons.
func (s *Server) sessionView(ctx context.Context, r *http.Request, id string, who viewer) (templates.SessionView, error) {
	sess, err := s.cfg.Store.Session(ctx, id)
	if err != nil {
		return templates.SessionView{}, err
	}
	items, err := s.transcriptItems(ctx, sess, who)
	if err != nil {
		return templates.SessionView{}, err
	}
	v := templates.SessionView{
		ID: sess.ID, Title: sess.Title, Model: sess.Model, Workspace: sess.Workspace,
		State: string(sess.State), Running: sess.State.Active(), Items: items,
		LiveURL: "/sessions/" + sess.ID + "/live", Mode: string(sess.Mode),
		Usage: usageText(sess.Usage), Instructions: instructionsView(sess, who, len(items) == 0),
	}
	v.AllowAll = s.allowAllRules(sess)
	v.Context = s.contextView(sess.Model, items)
	v.Agent = agentView(sess)
	if who.owner {
		v.ModeURL = "/sessions/" + sess.ID + "/mode"
		// An agent session has no message box (SPEC §18): its prompts come from the agent.
		v.CanSend, v.AuditURL = sess.Agent == nil, "/sessions/"+sess.ID+"/audit"
		v.SendURL, v.StopURL = "/sessions/"+sess.ID+"/messages", "/sessions/"+sess.ID+"/stop"
		v.RenameURL, v.DeleteURL = "/sessions/"+sess.ID+"/title", "/sessions/"+sess.ID+"/delete"
		if sess.Agent == nil {
			// An agent session's tools are the agent's own (SPEC §18): no Tools panel.
			tv := s.toolsView(sess, nil)
			v.Tools = &tv
		}
		sv, err := s.sharesView(ctx, r, sess.ID, "")
		if err != nil {
			return templates.SessionView{}, err
		}
		v.Shares = &sv
		gv, err := s.grantsView(ctx, sess.ID)
		if err != nil {
			return templates.SessionView{}, err
		}
		v.Grants = &gv
	}
	return v, nil
}

// agentView is an agent session's provenance as its page shows it; nil for Countersign's own
// sessions.
func agentView(sess agent.Session) *templates.AgentView {
	a := sess.Agent
	if a == nil {
		return nil
	}
	return &templates.AgentView{Kind: a.Kind, ConnectionID: a.ConnectionID, SessionID: a.SessionID, Cwd: sess.Workspace,
		PermissionMode: a.PermissionMode, PromptID: a.PromptID, TranscriptPath: a.TranscriptPath, Model: a.Model, State: a.State}
}

// instructionsView is sess's instructions as who sees them: editable by the owner while the
// session has no message (empty).
func instructionsView(sess agent.Session, who viewer, empty bool) templates.InstructionsView {
	v := templates.InstructionsView{Text: sess.Instructions}
	if !sess.IsAgent() {
		v.Environment = agent.Environment(sess.Workspace) // what every request adds (SPEC §17)
	}
	if who.owner && empty {
		v.EditURL = "/sessions/" + sess.ID + "/instructions"
		v.Rows = min(max(strings.Count(sess.Instructions, "\n")+2, 4), 16)
	}
	return v
}

// transcriptItems renders the transcript: each stored message, tool results folded into their
// calls' cards, approvals from the store, and what the run in progress holds only in memory.
func (s *Server) transcriptItems(ctx context.Context, sess agent.Session, who viewer) ([]templates.MessageView, error) {
	entries, err := s.cfg.Store.Entries(ctx, sess.ID)
	if err != nil {
		return nil, err
	}
	approvals, err := s.cfg.Store.Approvals(ctx, sess.ID, "")
	if err != nil {
		return nil, err
	}
	live := s.cfg.Runner.Live(sess.ID)
	b := s.newBuilder(sess.ID, sess.Workspace, who)
	b.live = live
	for _, a := range approvals {
		if a.Grouped() {
			b.grouped[a.ID] = a
		}
		k := callKey{a.MessageID, a.ToolCallID}
		// A person's decision (or a pending prompt) says more than a rule's record.
		if prev, ok := b.approvals[k]; ok && !prev.Automatic && a.Automatic {
			continue
		}
		b.approvals[k] = a
	}
	b.results = resultsByCall(entries)
	var items []templates.MessageView
	for _, e := range entries {
		if e.Message.Role == agent.ToolResult {
			continue
		}
		items = append(items, b.message(e.Message, false))
	}
	if live.Streaming != nil {
		items = append(items, b.message(*live.Streaming, true))
	}
	return items, nil
}

type callKey struct{ messageID, toolCallID string }

// builder turns stored and live state into view models.
type builder struct {
	s         *Server
	sessionID string
	workspace string
	who       viewer
	live      agent.Live
	approvals map[callKey]gate.Approval
	// grouped holds the grouped audit records (issue 19) by id: one decides many nested calls
	// but names only the first, so the others find it by their record entry's approvalId.
	grouped map[string]gate.Approval
	results map[callKey]*tool.Result
}

func (s *Server) newBuilder(sessionID, workspace string, who viewer) *builder {
	return &builder{s: s, sessionID: sessionID, workspace: workspace, who: who,
		approvals: map[callKey]gate.Approval{}, grouped: map[string]gate.Approval{}, results: map[callKey]*tool.Result{}}
}

// message is m as the transcript shows it. A streaming message also shows what b.live holds of
// it: its tool calls whose arguments are still streaming, and a retry's wait.
func (b *builder) message(m agent.Message, streaming bool) templates.MessageView {
	v := templates.MessageView{ID: m.ID, Role: string(m.Role), Text: m.Text(), Streaming: streaming}
	if m.Role == agent.Assistant {
		v.HTML = render.Markdown(v.Text)
		v.Thinking = thinkingText(m)
		v.Shortened = m.ShortenedResults
		if m.Usage != nil {
			v.Usage = usageText(*m.Usage)
			v.ContextUsed = m.Usage.Prompt() + m.Usage.Output
		}
	}
	if m.StopReason == agent.Error || m.StopReason == agent.Aborted {
		v.Error = m.ErrorMessage
		if m.StopReason == agent.Error && !strings.HasPrefix(m.ErrorMessage, agent.NotSentPrefix) {
			v.Error = "The model failed: " + m.ErrorMessage
		}
	}
	for _, c := range m.ToolCalls() {
		v.Cards = append(v.Cards, b.card(m.ID, c.ID, "", c.Name, c.Arguments, streaming))
	}
	if streaming && b.live.Streaming != nil && b.live.Streaming.ID == m.ID {
		for _, p := range b.live.Partial {
			v.Cards = append(v.Cards, b.partialCard(m.ID, p))
		}
		if b.live.Retry != nil {
			v.Retry = retryText(*b.live.Retry)
		}
	}
	if streaming && len(m.Content) == 0 && len(v.Cards) == 0 && !m.Timestamp.IsZero() {
		// Nothing of the answer yet: the page says how long the model turn has run (its
		// message's Timestamp is when the request started), until the first delta or the
		// idle timeout (-model-idle-timeout) ends the wait.
		v.Waiting, v.WaitingMS = true, max(time.Since(m.Timestamp).Milliseconds(), 0)
	}
	return v
}

// partialCard is the card of a tool call whose arguments are still streaming (SPEC §17): its
// name and arguments as far as they came, state streaming; never a prompt. Its id is the one
// the complete call's card takes over (the call's id; its position while the id is unknown).
func (b *builder) partialCard(messageID string, p agent.PartialCall) templates.CardView {
	id := p.ID
	if id == "" {
		id = fmt.Sprintf("#%d", p.Index)
	}
	name := p.Name
	if name == "" {
		name = "…"
	}
	c := b.baseCard(messageID, id, "", name, nil)
	c.ArgumentsJSON = render.EscapeHiddenJSON(p.Arguments)
	c.State = "streaming"
	return c
}

// thinkingText is what an assistant message's Thinking fold shows: the readable text of its
// thinking blocks, or a note when the provider sent its reasoning only encrypted or redacted;
// "" when it has none.
func thinkingText(m agent.Message) string {
	if t := m.Thinking(); strings.TrimSpace(t) != "" {
		return t
	}
	for _, b := range m.Content {
		if b.Type == "thinking" {
			return "The model reasoned before answering; its provider keeps the reasoning encrypted (it is sent back to the model, not shown)."
		}
	}
	return ""
}

// usageText is token usage as the page says it (SPEC §17): "1,234 in · 56 out", then
// "· 800 cache read" and "· 100 cache write" when not zero; "" when it is all zero.
func usageText(u agent.Usage) string {
	if u.IsZero() {
		return ""
	}
	n := func(v int64) string { return templates.Thousands(int(v)) }
	s := n(u.Input) + " in · " + n(u.Output) + " out"
	if u.CacheRead > 0 {
		s += " · " + n(u.CacheRead) + " cache read"
	}
	if u.CacheWrite > 0 {
		s += " · " + n(u.CacheWrite) + " cache write"
	}
	return s
}

// retryText is a retry's wait as the streaming message says it (SPEC §17): "retrying (429) in
// 2 s", "retrying (connection error) in 0.5 s".
func retryText(r agent.Retry) string {
	why := "connection error"
	if r.Status != 0 {
		why = strconv.Itoa(r.Status)
	}
	return "retrying (" + why + ") in " + waitText(r.Wait)
}

// waitText is a wait in seconds: whole seconds from 1 s on ("2 s"), tenths below ("0.5 s").
func waitText(d time.Duration) string {
	if d >= time.Second {
		return strconv.FormatInt(int64((d+time.Second/2)/time.Second), 10) + " s"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
}

// card builds a call's card from its stored result, its approval and the live state.
func (b *builder) card(messageID, toolCallID, parentID, name string, args json.RawMessage, streaming bool) templates.CardView {
	k := callKey{messageID, toolCallID}
	lc := b.live.Call(messageID, toolCallID)
	if parentID != "" && lc != nil && lc.NestedCall != nil {
		// Finished: drawn from its record entry, also when an earlier event's fragment is
		// rendered after the call ended.
		return b.nestedCard(messageID, parentID, *lc.NestedCall)
	}
	if lc != nil && len(lc.Arguments) > 0 {
		args = lc.Arguments
	}
	c := b.baseCard(messageID, toolCallID, parentID, name, args)
	var appr *gate.Approval
	if a, ok := b.approvals[k]; ok {
		appr = &a
		av := b.approvalView(a)
		c.Approval = &av
	}
	if appr == nil && lc != nil && lc.Approval != nil {
		appr = lc.Approval
		av := b.approvalView(*appr)
		c.Approval = &av
	}
	res := b.results[k]
	running := false
	if lc != nil {
		if res == nil {
			res = lc.Result
		}
		running = lc.Running
		c.Update = lc.Update
	}
	c.State = cardState(res, appr, running, b.live.Running)
	if appr != nil && appr.RequestedBy == gate.RequestedByAgent && res == nil && b.s.agents != nil {
		// A pending one keeps its prompt (its note says the agent stopped waiting); one a
		// person decided after that says the decision was not applied.
		if oc, err := b.s.agents.OutsideCall(context.Background(), appr.ID); err == nil && oc.TooLate(*appr) {
			c.State = "late"
		}
	}
	if streaming && res == nil && appr == nil {
		c.State = "waiting"
	}
	c.Hint = waitingHint(c.State, appr)
	if res != nil {
		c.Result = b.resultView(name, *res)
		if b.who.owner && c.Result.Head != "" && b.results[k] != nil {
			// A long stored output: the fold offers it whole (issue 34).
			c.Result.DownloadURL = outputURL(b.sessionID, messageID, toolCallID)
		}
		c.DurationMs = res.DurationMs
		c.Interrupted = res.Interrupted != nil
	}
	// The call as it runs: an approved edit replaces the arguments asked for.
	if appr != nil && len(appr.EditedArguments) > 0 {
		args = appr.EditedArguments
		c.ArgumentsJSON = prettyJSON(args)
	}
	// Past its prompt, a call is not previewed against the workspace any more: it may be
	// changing it right now. Its result, once there, carries what the renderer needs.
	decided := appr != nil && appr.Status != gate.Pending
	var preview *tool.Preview
	if appr != nil {
		preview = appr.Preview
	}
	var cwd string
	if c.Approval != nil {
		cwd = c.Approval.AgentCwd
	}
	c.CallView = b.callView(name, CallInfo{Arguments: args, Result: res, Finished: res != nil || decided, Preview: preview, Cwd: cwd})
	// Nested calls: the stored record once the parent has a result, else the live ones. A
	// finished nested call is drawn from its record entry either way (live, the entry its
	// tool_execution_end carried), so a reloaded page shows what a live one showed.
	if res != nil && res.NestedCalls != nil {
		truncated := false
		for _, n := range res.NestedCalls.Calls {
			nc := b.nestedCard(messageID, toolCallID, n)
			if c.Interrupted && n.Status == tool.NestedUnfinished {
				// Rebuilt from the audit after a restart: it may have finished or been cut short,
				// and how long it ran is not known.
				nc.State = "unknown"
			}
			c.Nested = append(c.Nested, nc)
			truncated = truncated || n.Truncated
		}
		// Calls left out, not only cut short (those say so in their own cards).
		c.NestedIncomplete = !res.NestedCalls.Complete && (!truncated || len(res.NestedCalls.Calls) >= maxNestedCalls)
	} else {
		for _, n := range b.live.Children(messageID, toolCallID) {
			if n.NestedCall != nil {
				c.Nested = append(c.Nested, b.nestedCard(messageID, toolCallID, *n.NestedCall))
				continue
			}
			c.Nested = append(c.Nested, b.card(messageID, n.ToolCallID, toolCallID, n.ToolName, n.Arguments, false))
		}
		// A nested call parked on a pending approval (from the store) that the live state lacks.
		for k, a := range b.approvals {
			if k.messageID == messageID && a.ParentToolCallID == toolCallID && a.Status == gate.Pending &&
				b.live.Call(messageID, a.ToolCallID) == nil {
				c.Nested = append(c.Nested, b.card(messageID, a.ToolCallID, toolCallID, a.ToolName, a.Arguments, false))
			}
		}
	}
	return c
}

// maxNestedCalls is how many calls a nestedCalls record keeps at most (SPEC §4).
const maxNestedCalls = 256

// nestedCard is a finished nested call drawn from its entry in the parent's nestedCalls record
// (SPEC §4): arguments, state, duration, the result or error text as kept (bounded, marked when
// cut) and its decision from the audit — the stored approval (a grouped one found by the
// entry's approvalId), or live the decision its tool_execution_end carried.
func (b *builder) nestedCard(messageID, parentID string, n tool.NestedCall) templates.CardView {
	c := b.baseCard(messageID, n.ID, parentID, n.Name, n.Arguments)
	var appr *gate.Approval
	if a, ok := b.approvals[callKey{messageID, n.ID}]; ok {
		appr = &a
	} else if lc := b.live.Call(messageID, n.ID); lc != nil && lc.Approval != nil {
		appr = lc.Approval
	} else if a, ok := b.grouped[n.ApprovalID]; ok && n.ApprovalID != "" {
		appr = &a
	}
	if appr != nil {
		av := b.approvalView(*appr)
		c.Approval = &av
	}
	c.State, c.DurationMs, c.Truncated = nestedState(n, appr), n.DurationMs, n.Truncated
	c.CallView = b.callView(n.Name, CallInfo{Arguments: n.Arguments, Finished: true})
	r := &templates.ResultView{IsError: n.Status != tool.NestedOK, Text: n.Result}
	if n.Error != "" {
		r.IsError, r.Text = true, n.Error
	}
	r.Head, r.Lines = templates.FoldHead(r.Text)
	r.Diff = n.Name == "git_diff" && n.Status == tool.NestedOK
	c.Result = r
	return c
}

// approvalView is a as this builder's viewer sees it: with the decision form's address and the
// buttons their rights allow while it is pending.
func (b *builder) approvalView(a gate.Approval) templates.ApprovalView {
	var oc *gate.OutsideCall
	if a.RequestedBy == gate.RequestedByAgent && b.s.agents != nil {
		if c, err := b.s.agents.OutsideCall(context.Background(), a.ID); err == nil {
			oc = &c
		} else if c, ok := b.s.cfg.Gate.HeldOutsideCall(a.ID); ok {
			oc = &c // its row is being stored: drawn in that moment
		}
	}
	if a.Status != gate.Pending {
		av := approvalView(a, "")
		if oc != nil {
			av.AgentCwd = oc.Cwd
		}
		if oc != nil && oc.TooLate(a) {
			// SPEC §18: stored and shown, never sent.
			av.Outcome += " — too late — not applied (the agent had stopped waiting)"
			av.Quiet = false
		}
		return av
	}
	av := approvalView(a, "")
	if oc != nil && oc.Event == gate.EventAAP {
		b.s.aapPrompt(&av, a.ID)
	}
	av.ViaMCP = oc != nil && oc.Event == gate.EventToolsCall
	if oc != nil && oc.StoppedWaitingAt != nil {
		av.AgentNote = "The agent stopped waiting for this decision: it went on its own way. A decision now is recorded as too late and not applied."
	}
	b.promptContext(&av, a)
	if oc != nil && oc.Cwd != "" {
		av.AgentCwd = oc.Cwd
		if oc.Cwd != b.workspace {
			// The agent changed directory: its command runs, and its relative paths open, there.
			av.Where = "working directory " + oc.Cwd
			if b.workspace != "" {
				av.Where += " (workspace " + b.workspace + ")"
			}
		}
	}
	av.Deadline = b.s.cfg.Gate.Deadline(a)
	switch {
	case oc != nil && oc.Event == gate.EventAAP && oc.Deadline != nil:
		// Door 3: the request expires at its own deadline (its timeout, up to 24 h); nothing
		// in the gate waits on it, so the approval's own timeout does not apply.
		av.Deadline = *oc.Deadline
	case oc != nil && oc.StoppedWaitingAt == nil && oc.Deadline != nil && (av.Deadline.IsZero() || oc.Deadline.Before(av.Deadline)):
		// SPEC §18: while the agent waits, what counts is when it stops waiting (its hook's
		// timeout), not the approval's own timeout.
		av.Deadline, av.AgentDeadline = *oc.Deadline, true
	}
	if b.who.decidePrefix == "" {
		return av
	}
	av.DecideURL = b.who.decidePrefix + a.ID + "/decision"
	av.CanEdit, av.CanRemember = b.who.decider.Rights.Edit, b.who.decider.Rights.Remember
	if a.RequestedBy == gate.RequestedByAgent && (oc == nil || !oc.Editable) {
		av.CanEdit = false // the agent would ignore an edited input here (hooks.CanEdit)
	}
	if a.Quorum() || a.DecisionSource == gate.FromAction {
		// Several approvers each answer the call as asked (SPEC §15), and an action no rule
		// may cover is approved as it is (gate.Service.Decide): no edit, no "for session", no rule.
		av.CanEdit, av.CanRemember = false, false
	}
	if av.CanRemember {
		for _, rl := range b.s.cfg.Gate.SuggestRules(a) {
			av.SuggestedRules = append(av.SuggestedRules, rl.Pattern())
		}
		av.SessionGrantRules, av.SessionGrantWholeTool = b.s.cfg.Gate.SessionGrant(a)
		av.SessionScopeOnly = b.who.decider.Via != nil
	}
	if av.CanEdit {
		if r, ok := b.s.renderers[a.ToolName]; ok && r.Call != nil {
			av.PreviewURL = b.who.decidePrefix + a.ID + "/preview"
			if r.FileEdit {
				av.EditRows, av.FileEdit = fileEditRows(a.Arguments)
			}
		}
	}
	return av
}

// promptContext fills in what a pending prompt says around the call (issue 34): where it acts,
// the rule that made it ask and that rule's note, who must decide and which approver links the
// session has, and, on a call several people approve, the viewer's own vote.
func (b *builder) promptContext(av *templates.ApprovalView, a gate.Approval) {
	if b.workspace != "" {
		av.Where = "workspace " + b.workspace
	}
	if a.RuleID != "" || a.RuleText != "" {
		av.RuleText = a.RuleText
		for _, rl := range b.s.cfg.Gate.Rules() {
			if rl.ID == a.RuleID {
				av.RuleText, av.RuleNote = rl.Text(), rl.Note
				break
			}
		}
	}
	if len(a.Reviewers) > 0 {
		av.Reviewers = strings.Join(a.Reviewers, ", ")
	}
	if a.Quorum() && b.s.cfg.Shares != nil {
		if links, err := b.s.cfg.Shares.Links(context.Background(), a.SessionID); err == nil {
			now := b.s.cfg.Shares.Now()
			for _, l := range links {
				if l.Role != share.Approver || !l.Active(now) {
					continue
				}
				name := "approver link " + l.Label
				if l.For != "" {
					name = l.For + " (" + l.Label + ")"
				}
				av.LinksSent = append(av.LinksSent, name)
			}
			slices.Sort(av.LinksSent)
		}
	}
	if b.s.cfg.Notify != nil {
		// Decision links sent with approval.requested (SPEC §15), by recipient and how the
		// delivery stands.
		if ds, err := b.s.cfg.Notify.Deliveries(context.Background(), a.SessionID); err == nil {
			for _, d := range ds {
				if d.Event != notify.Requested || d.Approval.ID != a.ID || d.LinkID == "" {
					continue
				}
				name := d.ReceiverID
				if rc, ok := b.s.receivers[d.ReceiverID]; ok {
					name = rc.Name
				}
				state := "sending"
				switch {
				case d.DeliveredAt != nil:
					state = "sent"
				case d.Failed:
					state = "not delivered"
				}
				av.LinksSent = append(av.LinksSent, "decision link to "+name+" ("+state+")")
			}
		}
	}
	if b.who.decidePrefix != "" { // a viewer who may decide
		av.MyVote = myVote(a, b.who.decider.Name)
	}
}

// myVote is, on a pending call several people approve, what the person name's own approval
// says in place of their buttons ("Your approval is counted once: 1 of 2 approvals — approved by
// alice. The call waits for the others."); "" before they approved.
func myVote(a gate.Approval, name string) string {
	if !a.Quorum() || a.Status != gate.Pending || name == "" {
		return ""
	}
	for _, v := range a.Votes {
		if v.By == name && v.Decision == gate.Approved {
			return "Your approval is counted once: " + a.VotesText() + ". The call waits for the others."
		}
	}
	return ""
}

// fileEditRows reports whether file-write arguments {path, content} can be edited as plain
// text, and how many lines the content box shows (4 to 20). Not when either is missing or not
// a string, nor when either holds a character a text box would hide or change (render.Reveal:
// invisible, bidirectional, a carriage return that a textarea turns into a newline): those are
// edited as JSON, where they show as escapes.
func fileEditRows(args json.RawMessage) (int, bool) {
	var in struct {
		Path    *string `json:"path"`
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(args, &in); err != nil || in.Path == nil || in.Content == nil {
		return 0, false
	}
	if _, hidden := render.Reveal(*in.Path); hidden {
		return 0, false
	}
	if _, hidden := render.Reveal(*in.Content); hidden {
		return 0, false
	}
	return min(max(strings.Count(*in.Content, "\n")+2, 4), 20), true
}

// baseCard is a card with its identity and arguments (through the tool's renderer, if any).
func (b *builder) baseCard(messageID, toolCallID, parentID, name string, args json.RawMessage) templates.CardView {
	c := templates.CardView{DOMID: cardID(messageID, toolCallID), ToolCallID: toolCallID, ParentToolCallID: parentID,
		Name: name, ArgumentsJSON: prettyJSON(args)}
	if t, ok := b.s.cfg.Runner.Tools().Lookup(name); ok {
		c.Title = t.Title
	}
	return c
}

// callView renders a call through its tool's renderer, if it has one.
func (b *builder) callView(name string, info CallInfo) templ.Component {
	r, ok := b.s.renderers[name]
	if !ok || r.Call == nil {
		return nil
	}
	info.Workspace = b.workspace
	return b.s.safeRender(name, func() (templ.Component, error) { return r.Call(info) })
}

// cardID is a call's element id: tool call ids repeat across messages (scripts reuse them), the
// pair (message, call) does not.
func cardID(messageID, toolCallID string) string {
	h := sha256.Sum256([]byte(messageID + "\x00" + toolCallID))
	return "tc-" + hex.EncodeToString(h[:8])
}

// cardState is the one word a card's state badge shows.
func cardState(res *tool.Result, a *gate.Approval, running, runActive bool) string {
	if res != nil {
		switch {
		case res.Interrupted != nil:
			return "interrupted"
		case res.ContractViolation != nil:
			return "violation"
		case !res.IsError:
			return "ok"
		case a != nil && a.Status == gate.Denied && !a.Automatic:
			return "denied"
		case a != nil && a.Status == gate.Denied && a.Automatic:
			return "blocked"
		case a != nil && (a.Status == gate.TimedOut || a.Status == gate.Cancelled):
			return string(a.Status)
		case res.Stopped:
			return "cancelled"
		}
		return "error"
	}
	switch {
	case a != nil && a.Status == gate.Pending:
		return "approval"
	case a != nil && a.RequestedBy == gate.RequestedByAgent:
		// An outside agent's call (SPEC §18) runs on the agent's machine: until the agent
		// reports its outcome, its card says what was decided, never "interrupted".
		switch {
		case a.Status == gate.Approved:
			return "allowed"
		case a.Status == gate.Denied && a.Automatic:
			return "blocked"
		case a.Status == gate.Denied:
			return "denied"
		}
		return string(a.Status)
	case running:
		return "running"
	case runActive:
		return "waiting"
	}
	return "interrupted"
}

// nestedState is the state word of a finished nested call, from its record entry and its
// decision (nil when the gate kept none).
func nestedState(n tool.NestedCall, a *gate.Approval) string {
	switch {
	case n.Violation:
		return "violation"
	case n.Status == tool.NestedUnfinished:
		return "cancelled"
	case n.Status == tool.NestedDenied && a != nil && a.Status == gate.TimedOut:
		return "timed_out"
	case n.Status == "":
		return "interrupted"
	}
	return string(n.Status)
}

func approvalView(a gate.Approval, decideURL string) templates.ApprovalView {
	return templates.ApprovalView{Outcome: outcomeText(a),
		ID: a.ID, Status: string(a.Status), StatusWord: a.Status.Word(), DecidedBy: a.DecidedBy,
		Reason: a.Reason, Scope: string(a.Scope), Automatic: a.Automatic, Edited: len(a.EditedArguments) > 0,
		RequestedBy: a.RequestedBy, ParentToolCallID: a.ParentToolCallID, ToolName: a.ToolName,
		ToolTitle: a.ToolTitle, Hints: a.Annotations.Effective(), ArgumentsJSON: prettyJSON(a.Arguments),
		DecideURL: decideURL, AskReason: a.AskReason, VotesText: a.VotesText(),
		Quiet: a.Automatic && a.Status == gate.Approved && (a.DecisionSource == gate.FromAnnotations ||
			a.DecisionSource == "" && a.DecidedBy == gate.ByPolicy), // "": recorded before rules existed
	}
}

// resultView is a result as a card shows it, through the tool's renderer when it has one.
func (b *builder) resultView(name string, r tool.Result) *templates.ResultView {
	v := &templates.ResultView{IsError: r.IsError, Text: r.TextOf(), StructuredJSON: prettyJSON(r.StructuredContent)}
	v.Head, v.Lines = templates.FoldHead(v.Text)
	v.Diff = name == "git_diff" && !r.IsError
	if r.Interrupted != nil {
		v.Interrupted = interruptedText(name, *r.Interrupted)
		return v
	}
	if cv := r.ContractViolation; cv != nil {
		orig := tool.Result{Content: cv.Content}
		images := 0
		for _, c := range cv.Content {
			if c.Type == "image" {
				images++
			}
		}
		v.Violation = &templates.ViolationView{Violations: cv.Violations, OriginalText: orig.TextOf(),
			OriginalJSON: prettyJSON(cv.StructuredContent), OriginalImages: images}
		return v
	}
	if rd, ok := b.s.renderers[name]; ok && rd.Result != nil && !r.IsError {
		v.Custom = b.s.safeRender(name, func() (templ.Component, error) { return rd.Result(r) })
	}
	return v
}

// prettyJSON indents JSON for display; "" for none. Invisible and bidirectional characters are
// written as JSON escapes (render.EscapeHiddenJSON), so a view or an arguments editor shows them
// and an edit submitted from it means the same.
func prettyJSON(raw json.RawMessage) string {
	if len(bytes.TrimSpace(raw)) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return render.EscapeHiddenJSON(string(raw))
	}
	return render.EscapeHiddenJSON(buf.String())
}

// toolsView is the Tools panel: every registered tool that is not hidden, checked when active,
// grouped by source.
func (s *Server) toolsView(sess agent.Session, ignored []string) templates.ToolsView {
	active := s.cfg.Runner.ActiveTools(sess)
	v := templates.ToolsView{URL: "/sessions/" + sess.ID + "/tools", Ignored: ignored}
	groups := []templates.ToolGroup{{Name: "Built-in"}}
	owner := map[string]int{} // tool name prefix "<server>__" → group index
	if s.cfg.Sources != nil {
		for _, src := range s.cfg.Sources() {
			owner[src.Name+"__"] = len(groups)
			groups = append(groups, templates.ToolGroup{Name: src.Name, Kind: src.Kind, State: src.State,
				Error: src.Error, Trusted: src.Trusted, Warnings: src.Warnings})
		}
	}
	for _, t := range s.cfg.Runner.Tools().All() {
		if t.Exposure == tool.Hidden {
			continue
		}
		g := 0
		if i := strings.Index(t.Name, "__"); i > 0 {
			if idx, ok := owner[t.Name[:i+2]]; ok {
				g = idx
			}
		}
		groups[g].Tools = append(groups[g].Tools, templates.ToolRow{Name: t.Name, Title: t.Title, Description: t.Description,
			Exposure: string(t.Exposure), Active: slices.Contains(active, t.Name), Hints: t.Annotations.Effective(),
			Asks: gate.AskReason(t) != ""})
	}
	v.Groups = groups
	return v
}

// outcomeText is a resolved approval in one line: "denied by Ada: not now",
// "approved automatically (session grant) for this session".
func outcomeText(a gate.Approval) string {
	var b strings.Builder
	b.WriteString(a.Status.Word())
	switch {
	case a.Automatic:
		b.WriteString(" automatically (" + a.DecidedBy + ")")
	case a.Status == gate.Approved && a.Approvals() > 1:
		// Several approvers (SPEC §15): every person who approved, "approved by alice and bob".
		b.Reset()
		b.WriteString(a.Outcome())
	case a.DecidedBy != "":
		b.WriteString(" by " + a.DecidedBy)
	}
	switch {
	case a.RuleScope == gate.ScopeWorkspace:
		// "Always allow…" with scope workspace reaches every session on the folder.
		b.WriteString(" and always allowed " + a.RuleText + " on this workspace")
	case a.Scope == gate.Session && a.RuleText != "" && a.RuleText != a.ToolName:
		b.WriteString(" and always allowed " + a.RuleText + " for this session")
	case a.Scope == gate.Session:
		b.WriteString(" for this session")
	}
	if len(a.EditedArguments) > 0 {
		b.WriteString(" with edited arguments")
	}
	if a.Reason != "" {
		b.WriteString(": " + a.Reason)
	}
	return b.String()
}

// interruptedText says what happened to a call a server restart interrupted (SPEC §8), and how
// long it ran: from its start to the restart, as the store can tell.
func interruptedText(name string, in tool.Interruption) string {
	if in.StartedAt == nil {
		return "The server restarted before " + name + "'s result was recorded; it was not run after the restart."
	}
	return fmt.Sprintf("The server restarted while %s was running; it was not re-run. It ran for %s (from its start to the restart).",
		name, humanDuration(in.At.Sub(*in.StartedAt)))
}

// humanDuration is d as people read it: "850 ms", "4.2 s", "3 min 20 s", "2 h 5 min".
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0 ms"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
}

// allowAllRules are the texts of the allow rules for every tool ("*", no specifier, no `when`)
// that reach sess: its own session rules, its workspace's and the server's (SPEC §14: such a
// rule lets every call run without a prompt on purpose, and the page says so).
func (s *Server) allowAllRules(sess agent.Session) []string {
	var out []string
	for _, rl := range s.cfg.Gate.Rules() {
		if rl.Effect != gate.Allow || rl.Tool != "*" || rl.Specifier != "" || rl.When != "" {
			continue
		}
		if rl.Scope == gate.ScopeServer || rl.Scope == gate.ScopeSession && rl.SessionID == sess.ID ||
			rl.Scope == gate.ScopeWorkspace && filepath.Clean(rl.Workspace) == filepath.Clean(sess.Workspace) {
			out = append(out, rl.Text()+" ("+string(rl.Scope)+")")
		}
	}
	return out
}

// contextView is the context gauge of a session on model whose transcript is items: the last
// usage a provider reported (issue 34), against the window the runner fits requests into.
func (s *Server) contextView(model string, items []templates.MessageView) templates.ContextView {
	c := templates.ContextView{Window: int64(s.cfg.Runner.ContextWindow(model))}
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].ContextUsed > 0 {
			c.Used = items[i].ContextUsed
			break
		}
	}
	return c
}

// waitingHint says why a decided call has not started (issue 34): approved, it waits for the
// run to go on — on the replica that drives it or, when that one stopped, on the one that takes
// its session over once its lease runs out (SPEC §16), which can take seconds. "" otherwise.
func waitingHint(state string, a *gate.Approval) string {
	if state != "waiting" || a == nil || a.Status != gate.Approved {
		return ""
	}
	return "approved; waiting for the run to go on (if the replica driving it stopped, waiting for a replica to take over)"
}
