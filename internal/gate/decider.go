package gate

import (
	"countersign/internal/apperr"
)

// The names an approval's DecidedBy holds when no reviewer decided it: the owner, or a rule
// (SPEC §3, "Decisions made by rules … are recorded too, marked automatic"). A reviewer may not
// take any of them as a display name (share.NormalizeName checks ReservedNames), so the audit
// never shows a person as the owner or as a rule.
const (
	ByOwner   = "owner"             // the session's owner (pages, JSON API)
	ByPolicy  = "policy"            // the annotation policy let the call through
	ByGrant   = "session grant"     // a session grant ("Approve for session") let it through
	ByHandler = "tool_call handler" // a tool_call handler blocked it
	ByTimeout = "timeout"           // nobody decided within the approval timeout
	BySystem  = "system"            // cancelled: the run stopped, the server restarted
)

// ReservedNames lists every DecidedBy value above, for the check that keeps reviewers from
// taking one: a new automatic decider belongs in the constants and in this list.
func ReservedNames() []string {
	return []string{ByOwner, ByPolicy, ByGrant, ByHandler, ByTimeout, BySystem, ByRule, ByMode}
}

// LinkRef names the share link a decision was made through (SPEC §7): its id and its label as
// they were when the decision was made. Two reviewers who gave the same name on different links
// are told apart by it.
type LinkRef struct {
	LinkID string `json:"linkId"`
	Label  string `json:"label"`
}

// Rights are what a decider may do to a pending approval besides approving or denying it once
// (SPEC §7, §14): Edit its arguments before approving, Remember it (approve for the session,
// a session grant). The owner has both; a share link has those it was created with.
type Rights struct {
	Edit     bool `json:"canEdit"`
	Remember bool `json:"canRemember"`
}

// Decider is who decides an approval and with what rights: the owner, or a reviewer (their
// display name) deciding through a share link (Via).
type Decider struct {
	Name   string
	Via    *LinkRef // nil for the owner
	Rights Rights
	// ChoseName is set when the reviewer typed Name themselves (a share link not created for a
	// person): such a name never counts as a listed reviewer or as one of several approvers
	// (SPEC §15 "People are the owner and the named holders of approver links"). False for the
	// owner, a link created `for` a person and a decision link's recipient.
	ChoseName bool
}

// Owner is the session's owner as a decider: every right, no link.
func Owner() Decider {
	return Decider{Name: ByOwner, Rights: Rights{Edit: true, Remember: true}}
}

// Permit reports whether d may make a decision of scope (Once or Session), with edited
// arguments or not. Errors: apperr.Invalid for a decider with no name; apperr.Forbidden naming
// the right that is missing.
func (d Decider) Permit(scope Scope, edited bool) error {
	if d.Name == "" {
		return apperr.Errorf(apperr.Invalid, "a decision needs someone who decides")
	}
	if edited && !d.Rights.Edit {
		return apperr.Errorf(apperr.Forbidden, "This link may not edit arguments; approve or deny the call as asked.")
	}
	if scope == Session && !d.Rights.Remember {
		return apperr.Errorf(apperr.Forbidden, "This link may not approve for the session; approve or deny this call only.")
	}
	return nil
}
