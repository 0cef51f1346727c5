package templates

import (
	"fmt"
	"time"
)

// InboxView is the inbox page (SPEC §15 "The inbox"): every pending approval the viewer may
// decide, oldest first.
type InboxView struct {
	// Cards are the pending approvals, oldest first.
	Cards []InboxCardView
	// LiveURL is the page's one WebSocket: every session's approval events (the owner's), or
	// the link's session's (an approver link's inbox).
	LiveURL string
	// Scope says whose inbox it is: "" for the owner's (every session), else the session's
	// title (an approver link's inbox is its own session's).
	Scope string
	// More, when set, says more approvals wait than the page shows and loads the next page.
	More *InboxMore
}

// InboxPageSize is how many approvals an inbox page shows (oldest first): a person decides the
// oldest first, and 1,000 prompts would be megabytes of page (issue 20, acceptance 7).
const InboxPageSize = 100

// InboxMore is the end of an inbox page that does not hold every pending approval (the page
// shows them a page at a time, oldest first): how many more wait, and where the next page is.
type InboxMore struct {
	// Count is how many more wait (-1: not counted, "more"); Next how many the next page shows
	// at most.
	Count, Next int
	URL         string
}

// InboxCardView is one approval in the inbox: where it waits and its prompt (pending) or its
// outcome (decided while the page was open).
type InboxCardView struct {
	// ApprovalID is the approval's id; the card's element id is "inbox-" + ApprovalID.
	ApprovalID   string
	SessionID    string
	SessionTitle string
	// SessionURL opens the session page at the call's card (its prompt).
	SessionURL string
	ToolName   string
	// WaitedMs is how long the approval has waited when rendered, in milliseconds on the
	// server's clock; inbox.js ticks it on. Since is its creation time, for the title.
	WaitedMs int64
	Since    time.Time
	// Card is the call's card with the approval as its viewer sees it: its ApprovalSlot holds
	// the same prompt as the session page (ApprovalPrompt).
	Card CardView
	// Outcome is set once the approval was decided: "approved by owner"; Elsewhere marks a
	// person's decision, which this page says was made "in another window" unless it was
	// made on this page (inbox.js knows which).
	Outcome   string
	Status    string
	Elsewhere bool
	// Reason is the decision's reason, said after the outcome: "denied by alice in another
	// window: not on main".
	Reason string
	// OOB makes the card a live update that replaces the page's card with the same id.
	OOB bool
}

// DOMID is the card's element id.
func (c InboxCardView) DOMID() string { return "inbox-" + c.ApprovalID }

// BadgeView is the header's inbox link with the pending count (SPEC §15: "Inbox (3)", and the
// tab title "(3) …"). New, when set, is the approval whose request this update brings: a
// hidden page raises a browser notification for it (inbox.js).
type BadgeView struct {
	Count int
	New   *BadgeNew
	// OOB makes the badge a live update that replaces the header's by id.
	OOB bool
}

// BadgeNew is a new approval as a notification shows it.
type BadgeNew struct {
	ApprovalID, ToolName, SessionTitle, URL string
	// Summary is what the call does in one line, for the notification's text: the command of a
	// command-running call, else its arguments as compact JSON, cut (issue 34).
	Summary string
}

// waitedText is how long an approval has waited, as inbox.js writes it too: "waiting 12 s",
// "waiting 3 min", "waiting 2 h 5 min".
func waitedText(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Minute:
		return fmt.Sprintf("waiting %d s", int64(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("waiting %d min", int64(d/time.Minute))
	}
	return fmt.Sprintf("waiting %d h %d min", int64(d/time.Hour), int64(d/time.Minute)%60)
}

// titlePrefix is the tab title's count: "(3) ", or "" when nothing waits.
func titlePrefix(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("(%d) ", n)
}

// elsewhereText is what a card says of a person's decision made elsewhere: " in another window"
// (inbox.js removes it on the page that made it); "" for any other outcome.
func elsewhereText(elsewhere bool) string {
	if elsewhere {
		return " in another window"
	}
	return ""
}

// reasonText is a decision's reason after its outcome: ": not on main"; "" for none.
func reasonText(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}
