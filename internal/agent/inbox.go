package agent

import "countersign/internal/gate"

// InboxItem is one pending approval as the inbox lists it (SPEC §15 "The inbox"): the approval as
// stored (tool, arguments, preview, who asked — RequestedBy "model" or the parent tool's name,
// with ParentToolCallID — and CreatedAt, from which the wait is measured) and what it shows of
// its session: the title, linked to the session page, and the workspace folder its diff is drawn
// against.
type InboxItem struct {
	Approval     gate.Approval `json:"approval"`
	SessionTitle string        `json:"sessionTitle"`
	Workspace    string        `json:"workspace"`
}

// InboxQuery selects a page of the inbox: the pending approvals of session SessionID ("" for
// every session), oldest first, after approval After ("" from the oldest), at most Limit of them
// (0: all). For, when set, is the person whose inbox it is ("owner"): an approval whose reviewers
// do not name them is left out, since they may not decide it (SPEC §15: the inbox lists what the
// viewer may decide).
type InboxQuery struct {
	SessionID string
	After     string
	Limit     int
	For       string
}
