package notify

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"countersign/internal/gate"
)

// MaxSummaryBytes bounds the command, the diff and the formatted arguments in a payload
// (SPEC §15: cut at 8 KiB and marked as cut).
const MaxSummaryBytes = 8 << 10

// Payload is the JSON body of an event in the Standard Webhooks envelope: type, timestamp, data.
type Payload struct {
	Type      Event     `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      Data      `json:"data"`
}

// Data is what an event says.
type Data struct {
	Session  SessionRef   `json:"session"`
	Approval ApprovalData `json:"approval"`
	Summary  Summary      `json:"summary"`
	// Recipient is the receiver's name: who a decision through Links.Decision is recorded as.
	Recipient string `json:"recipient"`
	Links     Links  `json:"links"`
}

// SessionRef names the approval's session.
type SessionRef struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// ApprovalData is the approval: which call, who asked, how it stands.
type ApprovalData struct {
	ID               string     `json:"id"`
	ToolCallID       string     `json:"toolCallId"`
	ToolName         string     `json:"toolName"`
	ToolTitle        string     `json:"toolTitle,omitempty"`
	RequestedBy      string     `json:"requestedBy"` // "model", or the parent tool's name
	ParentToolCallID string     `json:"parentToolCallId,omitempty"`
	AskReason        string     `json:"askReason,omitempty"`
	Status           string     `json:"status"` // pending | approved | denied | timed_out | cancelled
	DecidedBy        string     `json:"decidedBy,omitempty"`
	Reason           string     `json:"reason,omitempty"`
	CreatedAt        time.Time  `json:"createdAt"`
	DecidedAt        *time.Time `json:"decidedAt,omitempty"`
	// Approvers is how many distinct people must approve (SPEC §15: a rule's approvers, ≥ 2);
	// absent when one person decides.
	Approvers int `json:"approvers,omitempty"`
	// Votes are the people's answers to a call that needs several approvers, in the order they
	// came: every vote on approval.resolved and approval.timed_out, none on approval.requested
	// (nobody has voted yet when it is written); absent when one person decides.
	Votes []VoteData `json:"votes,omitempty"`
}

// VoteData is one person's vote (gate.Vote): who, approved or denied, their reason, and when
// (RFC 3339, UTC).
type VoteData struct {
	By       string    `json:"by"`
	Decision string    `json:"decision"` // approved | denied
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}

// Summary is what the prompt shows of the call: the command of run_command (or of any tool
// whose arguments hold a string "command"), the diff of write_file (against the file as it was when the approval opened: the stored preview), and the
// arguments as indented JSON; each cut at MaxSummaryBytes with its *Cut flag set.
type Summary struct {
	Command      string `json:"command,omitempty"`
	CommandCut   bool   `json:"commandCut,omitempty"`
	Diff         string `json:"diff,omitempty"`
	DiffCut      bool   `json:"diffCut,omitempty"`
	Arguments    string `json:"arguments"`
	ArgumentsCut bool   `json:"argumentsCut,omitempty"`
}

// Links are absolute URLs on the server's public base URL.
type Links struct {
	Session string `json:"session"`
	Audit   string `json:"audit"`
	// Decision is the decision link /d/<token>, on approval.requested only.
	Decision string `json:"decision,omitempty"`
}

// DiffFunc writes the change a file write makes as unified-diff text: the file at path held
// oldContent (exists false: there was no file) and will hold newContent. render.UnifiedDiff is
// the one the program uses; it is injected (WorkerConfig.Diff) so that this package, which the
// store imports for its outbox types, does not import the renderer.
type DiffFunc func(path, oldContent, newContent string, exists bool) string

// BuildPayload is the payload of d for receiver r at time now; decisionURL is the link's URL
// ("" for events without one). diff writes a file write's diff for the summary; nil leaves the
// summary without one.
func BuildPayload(d Delivery, r Receiver, publicURL, decisionURL string, now time.Time, diff DiffFunc) Payload {
	a := d.Approval
	status := string(a.Status)
	if d.Event == Requested {
		status = string(gate.Pending) // what it was when the event happened
	}
	ad := ApprovalData{ID: a.ID, ToolCallID: a.ToolCallID, ToolName: a.ToolName, ToolTitle: a.ToolTitle,
		RequestedBy: a.RequestedBy, ParentToolCallID: a.ParentToolCallID, AskReason: a.AskReason,
		Status: status, CreatedAt: a.CreatedAt}
	if a.Quorum() {
		ad.Approvers = a.Approvers
	}
	if d.Event != Requested {
		ad.DecidedBy, ad.Reason, ad.DecidedAt = a.DecidedBy, a.Reason, a.DecidedAt
		for _, v := range a.Votes {
			ad.Votes = append(ad.Votes, VoteData{By: v.By, Decision: string(v.Decision), Reason: v.Reason, At: v.At.UTC()})
		}
	}
	base := strings.TrimRight(publicURL, "/")
	return Payload{Type: d.Event, Timestamp: now.UTC(), Data: Data{
		Session: SessionRef{ID: a.SessionID, Title: d.SessionTitle}, Approval: ad, Summary: summarize(a, diff),
		Recipient: r.Name,
		Links: Links{Session: base + "/sessions/" + a.SessionID, Audit: base + "/sessions/" + a.SessionID + "/audit",
			Decision: decisionURL}}}
}

// summarize is the prompt's summary of a.
func summarize(a gate.Approval, diff DiffFunc) Summary {
	var s Summary
	var args map[string]any
	_ = json.Unmarshal(a.Arguments, &args)
	// run_command's command (and any tool's string "command": MCP shell tools); write_file's
	// diff (any tool with a stored preview of the file it writes).
	if c, ok := args["command"].(string); ok {
		s.Command, s.CommandCut = cut(c)
	} else if a.Preview != nil && len(a.Preview.Commands) > 0 {
		// The commands the call runs that its arguments do not say (run_checks, failing_tests).
		lines := make([]string, len(a.Preview.Commands))
		for i, c := range a.Preview.Commands {
			lines[i] = c.Command
		}
		s.Command, s.CommandCut = cut(strings.Join(lines, "\n"))
	}
	if content, ok := args["content"].(string); ok && a.Preview != nil && a.Preview.Error == "" && diff != nil {
		path, _ := args["path"].(string)
		s.Diff, s.DiffCut = cut(diff(path, a.Preview.Content, content, a.Preview.Exists))
	}
	pretty := string(a.Arguments)
	if args != nil {
		// As the person would type them: `<`, `>` and `&` stay themselves (json.MarshalIndent
		// would write \u003c); a receiver shows text, and escapes it for its own format.
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(args); err == nil {
			pretty = strings.TrimSuffix(b.String(), "\n")
		}
	}
	s.Arguments, s.ArgumentsCut = cut(pretty)
	return s
}

// cut returns s cut to MaxSummaryBytes at a character boundary, and whether it was cut.
func cut(s string) (string, bool) {
	if len(s) <= MaxSummaryBytes {
		return s, false
	}
	i := MaxSummaryBytes
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "\n… (cut at 8 KiB)", true
}

// slackMessage is Slack's incoming-webhook body: text (the notification's fallback) and blocks.
type slackMessage struct {
	Text   string `json:"text"`
	Blocks []any  `json:"blocks"`
}

// SlackBody is p as a Slack incoming-webhook message: a text line (tool, session, status) and
// blocks with the command or diff (cut to fit Slack's 3,000-character text blocks), the votes of
// a call that needed several approvers (votesLine, when there are any) and buttons linking to
// the decision page and the session. Every text is escaped for Slack's mrkdwn.
func SlackBody(p Payload) ([]byte, error) {
	d := p.Data
	var head string
	switch p.Type {
	case Requested:
		head = fmt.Sprintf("Approval required: %s in %q", d.Approval.ToolName, d.Session.Title)
	case TimedOut:
		head = fmt.Sprintf("Timed out: %s in %q", d.Approval.ToolName, d.Session.Title)
	default:
		head = fmt.Sprintf("%s: %s in %q", strings.ReplaceAll(d.Approval.Status, "_", " "), d.Approval.ToolName, d.Session.Title)
		if d.Approval.DecidedBy != "" {
			head += " by " + d.Approval.DecidedBy
		}
	}
	body := d.Summary.Command
	if body == "" {
		body = d.Summary.Diff
	}
	if body == "" {
		body = d.Summary.Arguments
	}
	if r := []rune(body); len(r) > 2900 {
		body = string(r[:2900]) + "\n… (cut)"
	}
	blocks := []any{
		map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "*" + slackEscape(head) + "*"}},
		map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "```" + slackEscape(strings.ReplaceAll(body, "```", "'''")) + "```"}},
	}
	if votes := votesLine(d.Approval); votes != "" {
		blocks = append(blocks, map[string]any{"type": "context", "elements": []any{
			map[string]any{"type": "mrkdwn", "text": slackEscape(votes)}}})
	}
	buttons := []any{}
	if d.Links.Decision != "" {
		buttons = append(buttons, map[string]any{"type": "button", "style": "primary", "url": d.Links.Decision,
			"text": map[string]any{"type": "plain_text", "text": "Approve or deny"}})
	}
	buttons = append(buttons, map[string]any{"type": "button", "url": d.Links.Session,
		"text": map[string]any{"type": "plain_text", "text": "Open session"}})
	blocks = append(blocks, map[string]any{"type": "actions", "elements": buttons})
	text := head
	if d.Links.Decision != "" {
		text += " — decide: " + d.Links.Decision
	}
	return json.Marshal(slackMessage{Text: slackEscape(text), Blocks: blocks})
}

// votesLine is the votes of a call that needs several approvers, as a line: "2 of 2 approvals —
// alice approved at 01:00:00 UTC; bob approved at 01:00:05 UTC"; a denial with its reason
// ("bob denied at … UTC: not on a Friday"). "" when there are no votes.
func votesLine(a ApprovalData) string {
	if len(a.Votes) == 0 {
		return ""
	}
	n := 0
	parts := make([]string, len(a.Votes))
	for i, v := range a.Votes {
		if v.Decision == string(gate.Approved) {
			n++
		}
		parts[i] = fmt.Sprintf("%s %s at %s UTC", v.By, v.Decision, v.At.UTC().Format("15:04:05"))
		if v.Reason != "" {
			parts[i] += ": " + v.Reason
		}
	}
	return fmt.Sprintf("%d of %d approvals — %s", n, a.Approvers, strings.Join(parts, "; "))
}

// slackEscape escapes &, < and > as Slack's message formatting asks.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
