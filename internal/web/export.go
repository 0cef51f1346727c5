package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// Export (SPEC §16): a session whole, as JSON for machines and as Markdown for people.

// ExportFormat names the JSON export's shape; a change that breaks a reader gets a new one.
const ExportFormat = "countersign.session-export.v1"

// SessionExport is GET /api/sessions/{id}/export: the session, every transcript entry in order
// and every approval record — prompts with their decisions, and the automatic records of rules,
// the mode and the annotation default (the audit; a grouped row stands for Count calls).
type SessionExport struct {
	Format     string          `json:"format"`
	ExportedAt time.Time       `json:"exportedAt"`
	Session    agent.Session   `json:"session"`
	Entries    []agent.Entry   `json:"entries"`
	Approvals  []gate.Approval `json:"approvals"`
}

// export reads session id's export. Errors: the store's (apperr.NotFound for an unknown id).
func (s *Server) export(r *http.Request, id string) (SessionExport, error) {
	ctx := r.Context()
	sess, err := s.cfg.Store.Session(ctx, id)
	if err != nil {
		return SessionExport{}, err
	}
	entries, err := s.cfg.Store.Entries(ctx, id)
	if err != nil {
		return SessionExport{}, err
	}
	approvals, err := s.cfg.Store.Approvals(ctx, id, "")
	if err != nil {
		return SessionExport{}, err
	}
	if entries == nil {
		entries = []agent.Entry{}
	}
	if approvals == nil {
		approvals = []gate.Approval{}
	}
	return SessionExport{Format: ExportFormat, ExportedAt: s.cfg.Now().UTC(), Session: sess, Entries: entries, Approvals: approvals}, nil
}

func (s *Server) apiExport(w http.ResponseWriter, r *http.Request) error {
	e, err := s.export(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Disposition", `attachment; filename="`+exportName(e.Session)+`.json"`)
	writeJSON(w, http.StatusOK, e)
	return nil
}

// exportMarkdown answers GET /sessions/{id}/export.md: the export as a Markdown download.
func (s *Server) exportMarkdown(w http.ResponseWriter, r *http.Request) error {
	e, err := s.export(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/markdown; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+exportName(e.Session)+`.md"`)
	_, err = w.Write([]byte(exportMarkdown(e)))
	return err
}

// exportName is a download's file name: "countersign-<session id>" (ids are base32, safe in a
// header and on every file system).
func exportName(sess agent.Session) string { return "countersign-" + sess.ID }

// exportMarkdown is e as Markdown: the session's facts, the transcript (text, tool calls with
// their arguments, results), then the audit as a table. Text the model or a tool wrote goes in
// code fences longer than any backtick run in it, so it cannot close them.
func exportMarkdown(e SessionExport) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	s := e.Session
	w("# %s\n\n", oneLine(s.Title))
	w("- Session: `%s`\n- Model: `%s`\n- Workspace: `%s`\n- Mode: %s\n- Created: %s\n- Exported: %s\n",
		s.ID, s.Model, s.Workspace, s.Mode, s.CreatedAt.UTC().Format(time.RFC3339), e.ExportedAt.Format(time.RFC3339))
	if u := s.Usage; u.Input+u.Output > 0 {
		w("- Usage: %d input, %d output tokens\n", u.Input, u.Output)
	}
	if s.Instructions != "" {
		w("\n## Instructions\n\n%s", fenced("", s.Instructions))
	}
	w("\n## Transcript\n")
	for _, en := range e.Entries {
		m := en.Message
		w("\n### %d. %s", en.Seq, m.Role)
		if m.Role == agent.ToolResult {
			w(" — `%s` (%s)", m.ToolName, m.ToolCallID)
			if m.Result != nil && m.Result.IsError {
				w(", error")
			}
		}
		if !m.Timestamp.IsZero() {
			w(" · %s", m.Timestamp.UTC().Format(time.RFC3339))
		}
		w("\n\n")
		for _, bl := range m.Content {
			switch bl.Type {
			case "text":
				w("%s\n\n", bl.Text)
			case "thinking":
				w("Thinking:\n\n%s", fenced("", bl.Thinking))
			case "toolCall":
				w("Tool call `%s` (%s):\n\n%s", bl.Name, bl.ID, fenced("json", string(bl.Arguments)))
			}
		}
		if m.Result != nil {
			w("%s", fenced("", m.Result.TextOf()))
		}
		if m.ErrorMessage != "" {
			w("Error: %s\n\n", oneLine(m.ErrorMessage))
		}
	}
	w("\n## Audit\n\n| time | tool | call | status | decided by | how | reason |\n|---|---|---|---|---|---|---|\n")
	for _, a := range e.Approvals {
		how := string(a.DecisionSource)
		if a.RuleText != "" {
			how += ": " + a.RuleText
		}
		tool := a.ToolName
		if a.Count > 1 {
			tool += fmt.Sprintf(" ×%d", a.Count)
		}
		w("| %s | %s | %s | %s | %s | %s | %s |\n", a.CreatedAt.UTC().Format(time.RFC3339), cell(tool), cell(a.ToolCallID),
			a.Status, cell(a.DecidedBy), cell(how), cell(a.Reason))
	}
	return b.String()
}

// fenced is text in a code fence of info string info, the fence one backtick longer than the
// longest run of backticks in text (at least three).
func fenced(info, text string) string {
	longest, run := 0, 0
	for _, c := range text {
		if c == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", max(3, longest+1))
	return fence + info + "\n" + strings.TrimSuffix(text, "\n") + "\n" + fence + "\n\n"
}

// oneLine is s with line breaks as spaces (a heading or a list item).
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// cell is s fit for a Markdown table cell: one line, pipes escaped.
func cell(s string) string { return strings.ReplaceAll(oneLine(s), "|", `\|`) }

// outputURL is where the owner downloads the stored output of the call toolCallID of the
// assistant message messageID (outputDownload).
func outputURL(sessionID, messageID, toolCallID string) string {
	return "/sessions/" + sessionID + "/output/" + url.PathEscape(messageID) + "/" + url.PathEscape(toolCallID)
}

// outputDownload answers GET /sessions/{id}/output/{mid}/{cid}: a call's stored result text, as
// the model read it, whole, as a plain-text download (issue 34: a folded output's "download").
// 404 when the session has no stored result for that call.
func (s *Server) outputDownload(w http.ResponseWriter, r *http.Request) error {
	entries, err := s.cfg.Store.Entries(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	res := resultsByCall(entries)[callKey{r.PathValue("mid"), r.PathValue("cid")}]
	if res == nil {
		return apperr.Errorf(apperr.NotFound, "No stored output for that call.")
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="output-`+safeFileName(r.PathValue("cid"))+`.txt"`)
	_, err = w.Write([]byte(res.TextOf()))
	return err
}

// safeFileName keeps the letters, digits, '-' and '_' of s (a tool call id) for a file name.
func safeFileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return -1
	}, s)
}
