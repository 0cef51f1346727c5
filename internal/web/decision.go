package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/notify"
	"countersign/web/templates"
)

// Decision links (SPEC §15): /d/<token>, sent to a webhook receiver with approval.requested. No
// login: the token is the credential. It decides its one approval once, as its recipient, and
// only while the approval is pending with the arguments the link was made for; any token that
// names no link answers 404 with no detail (and counts as a guess, tokenFailures).

// NotifyStore is what the web layer reads and writes of webhook notifications.
type NotifyStore interface {
	// DecisionLink returns the link whose token hashes to tokenHash (notify.HashToken), or
	// apperr.NotFound.
	DecisionLink(ctx context.Context, tokenHash string) (notify.Link, error)
	// UseDecisionLink marks a link used; apperr.Conflict when it was used before.
	UseDecisionLink(ctx context.Context, id string, at time.Time) error
	// Deliveries lists a session's webhook events with their attempts (the audit page).
	Deliveries(ctx context.Context, sessionID string) ([]notify.Delivery, error)
}

// decisionLink resolves the request's decision token to its link and approval. Errors:
// apperr.NotFound, with no detail, for a token that names no link, a link whose receiver is not
// among Config.Receivers, or when notifications are off.
// noLink answers a path under /d/ or /r/ that no link route takes: 404 with no detail, counted
// as a failed guess like an unknown token.
func (s *Server) noLink(w http.ResponseWriter, r *http.Request) error {
	s.failures.fail(r)
	return apperr.Errorf(apperr.NotFound, "Not found")
}

func (s *Server) decisionLink(r *http.Request) (notify.Link, gate.Approval, error) {
	notFound := apperr.Errorf(apperr.NotFound, "Not found")
	if s.cfg.Notify == nil {
		return notify.Link{}, gate.Approval{}, notFound
	}
	l, err := s.cfg.Notify.DecisionLink(r.Context(), notify.HashToken(r.PathValue("token")))
	if apperr.CodeOf(err) == apperr.NotFound {
		s.failures.fail(r)
		return notify.Link{}, gate.Approval{}, notFound
	}
	if err != nil {
		return notify.Link{}, gate.Approval{}, err
	}
	if _, ok := s.receivers[l.ReceiverID]; !ok {
		// Its receiver was removed from -notify-webhook: the link died with it (issue 33; the
		// start deletes such links, store ForgetReceivers; this covers a replica started
		// without the receiver while another still makes links for it).
		return notify.Link{}, gate.Approval{}, notFound
	}
	a, err := s.cfg.Store.Approval(r.Context(), l.ApprovalID)
	if apperr.CodeOf(err) == apperr.NotFound {
		return notify.Link{}, gate.Approval{}, notFound // its session was deleted
	}
	return l, a, err
}

// deadReason says why link l can no longer decide a; "" while it can: unused, the approval
// pending, its arguments the ones the link was made for.
func deadReason(l notify.Link, a gate.Approval) string {
	switch {
	case l.UsedAt != nil && a.Status != gate.Pending:
		return fmt.Sprintf("This link was already used. The call was %s at %s UTC.", a.Outcome(), decidedAt(a))
	case l.UsedAt != nil:
		return "This link was already used."
	case a.Status != gate.Pending:
		return fmt.Sprintf("This link no longer decides anything: the call was %s at %s UTC.", a.Outcome(), decidedAt(a))
	case notify.ArgumentsDigest(a.Arguments) != l.ArgumentsSHA256:
		return "This link was made for other arguments; it cannot decide this call."
	}
	return ""
}

func decidedAt(a gate.Approval) string {
	if a.DecidedAt == nil {
		return "an unknown time"
	}
	return a.DecidedAt.UTC().Format("2006-01-02 15:04:05")
}

// decisionPage shows the link's prompt, or why it is dead.
func (s *Server) decisionPage(w http.ResponseWriter, r *http.Request) error {
	// The page holds the whole prompt (a command, a diff): no cache keeps it (found in review).
	w.Header().Set("Cache-Control", "no-store")
	l, a, err := s.decisionLink(r)
	if err != nil {
		return err
	}
	sess, err := s.cfg.Store.Session(r.Context(), a.SessionID)
	if err != nil {
		return err
	}
	v := templates.DecisionView{SessionTitle: sess.Title, Recipient: l.Recipient, Message: deadReason(l, a)}
	if v.Message == "" {
		b := s.newBuilder(sess.ID, sess.Workspace, viewer{decider: l.Decider()})
		c := b.baseCard(a.MessageID, a.ToolCallID, a.ParentToolCallID, a.ToolName, a.Arguments)
		c.State = "approval"
		av := b.approvalView(a)
		// Approve or deny as asked: a link has no right to edit or remember (no Edit, no Always
		// allow…, whatever the owner's links may do).
		av.DecideURL, av.CanEdit, av.CanRemember, av.PreviewURL = "/d/"+r.PathValue("token"), false, false, ""
		c.Approval = &av
		c.CallView = b.callView(a.ToolName, CallInfo{Arguments: a.Arguments, Preview: a.Preview})
		v.Card = &c
	}
	s.render(w, r, http.StatusOK, templates.Layout(templates.Page{Title: "Decide: " + sess.Title}, templates.DecisionPage(v)))
	return nil
}

// decisionLinkDecide applies the link's decision (approve or deny, with a reason) as its
// recipient. The link is spent first (single use, atomic), then the gate decides; a dead link
// answers 409 with why. An htmx request gets the slot that replaces the prompt; a plain form post
// is sent back to the page, which then says what happened.
func (s *Server) decisionLinkDecide(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Cache-Control", "no-store")
	l, a, err := s.decisionLink(r)
	if err != nil {
		return err
	}
	if err := parseForm(r); err != nil {
		return err
	}
	decision := r.PostForm.Get("decision")
	if decision != "approve" && decision != "deny" {
		return apperr.Errorf(apperr.Invalid, "A decision link approves or denies: decision must be approve or deny.")
	}
	if why := deadReason(l, a); why != "" {
		return apperr.Errorf(apperr.Conflict, "%s", why)
	}
	if err := s.cfg.Notify.UseDecisionLink(r.Context(), l.ID, time.Time{}); err != nil {
		if apperr.CodeOf(err) == apperr.Conflict {
			return apperr.Errorf(apperr.Conflict, "This link was already used.")
		}
		return err
	}
	done, err := s.cfg.Gate.Decide(r.Context(), a.SessionID, a.ID,
		gate.Answer{Decision: decision, Reason: r.PostForm.Get("reason"), By: l.Decider()})
	msg := ""
	switch {
	case apperr.CodeOf(err) == apperr.Conflict:
		// Someone else decided first; the link is spent either way.
		won, rerr := s.wonApproval(r.Context(), err, a.ID)
		if rerr != nil {
			return err
		}
		msg = fmt.Sprintf("Your decision was not applied: the call was already %s.", won.Outcome())
	case err != nil:
		return err
	case done.Status == gate.Pending:
		// Several approvers (SPEC §15): the vote counted (once, if this person had approved
		// already), and the call waits for the others.
		msg = fmt.Sprintf("Your approval is counted (%s); the call waits for the others. This link is now used.", done.VotesText())
	default:
		msg = fmt.Sprintf("Done: %s. This link is now used.", done.Outcome())
	}
	if r.Header.Get("HX-Request") == "" {
		http.Redirect(w, r, "/d/"+r.PathValue("token"), http.StatusSeeOther)
		return nil
	}
	s.render(w, r, http.StatusOK, templates.DecisionDone(msg))
	return nil
}

// deliveryRows are a session's webhook deliveries as the audit page lists them.
func (s *Server) deliveryRows(ctx context.Context, sessionID string) ([]templates.DeliveryRow, error) {
	if s.cfg.Notify == nil {
		return nil, nil
	}
	ds, err := s.cfg.Notify.Deliveries(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	rows := make([]templates.DeliveryRow, 0, len(ds))
	for _, d := range ds {
		row := templates.DeliveryRow{ID: d.ID, Event: string(d.Event), ToolName: d.Approval.ToolName, ToolCallID: d.Approval.ToolCallID,
			Receiver: d.ReceiverID}
		if rc, ok := s.receivers[d.ReceiverID]; ok {
			row.Receiver = rc.Name + " · " + hostOf(rc.URL)
		}
		switch {
		case d.DeliveredAt != nil:
			row.State, row.StateClass = "delivered", "delivered"
		case d.NextAt != nil && len(d.Attempts) == 0:
			row.State, row.StateClass = "queued", "retrying"
		case d.NextAt != nil:
			row.State, row.StateClass = "retrying at "+d.NextAt.UTC().Format("15:04:05")+" UTC", "retrying"
		default:
			row.State, row.StateClass = fmt.Sprintf("gave up after %d attempts", len(d.Attempts)), "failed"
		}
		for _, at := range d.Attempts {
			res := at.Error
			if at.Status != 0 {
				res = fmt.Sprintf("HTTP %d", at.Status)
			}
			row.Attempts = append(row.Attempts, templates.AttemptRow{At: at.At, Result: res,
				Duration: fmt.Sprintf("%d ms", at.Duration.Milliseconds())})
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// hostOf is a URL's host, "" when it has none.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}
