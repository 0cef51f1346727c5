package agent

import (
	"context"

	"countersign/internal/gate"
)

// gateSessions is the gate.Service's port to the runner's sessions (gate.Sessions): a session's
// workspace and its mode as of now, a mode switch, and session_updated to its viewers.
type gateSessions struct{ r *Runner }

// Session is session id's workspace and current mode; apperr.NotFound for an unknown id.
func (p gateSessions) Session(ctx context.Context, id string) (gate.SessionInfo, error) {
	s, err := p.r.cfg.Store.Session(ctx, id)
	if err != nil {
		return gate.SessionInfo{}, err
	}
	return p.r.GateSession(s), nil
}

// GateSession is session s as the gate judges its calls: its workspace, its mode as of now (a
// switch made since s was read counts) and, for an agent session, its agent and connection
// (gate.OutsideRequest.Session, for a caller that has just read s).
func (r *Runner) GateSession(s Session) gate.SessionInfo {
	info := gate.SessionInfo{ID: s.ID, Workspace: s.Workspace, Mode: gateSessions{r}.mode(s)}
	if s.Agent != nil {
		info.Agent, info.Connection = s.Agent.Kind, s.Agent.ConnectionID
	}
	return info
}

// SetMode stores session id's mode and keeps it for the calls of its run, which hold the
// session as it was when the run started.
func (p gateSessions) SetMode(ctx context.Context, id string, mode gate.Mode) error {
	if err := p.r.cfg.Store.SetSessionMode(ctx, id, mode); err != nil {
		return err
	}
	p.r.modes.Store(id, mode)
	return nil
}

// Changed tells the session's viewers that its mode or rules changed, as a session_updated event
// (the owner's page redraws its mode and grants from it).
func (p gateSessions) Changed(ctx context.Context, id string) {
	s, err := p.r.cfg.Store.Session(ctx, id)
	if err != nil {
		return
	}
	p.r.publish(Event{Type: SessionUpdated, SessionID: id, Session: &s})
}

// mode is session s's mode as of now (a switch, here or on another replica, applies to the next
// call), else the default.
func (p gateSessions) mode(s Session) gate.Mode {
	if m, ok := p.r.modes.Load(s.ID); ok {
		return m.(gate.Mode)
	}
	if s.Mode != "" {
		return s.Mode
	}
	return p.r.cfg.DefaultMode
}

// approvalChanged is the gate's notify hook: an approval stored, counted a vote or resolved is
// published to its session's viewers (and the other replicas'), before the waiting call wakes.
func (p gateSessions) approvalChanged(a gate.Approval) {
	typ := ApprovalResolved
	switch {
	case a.Status == gate.Pending && len(a.Votes) > 0:
		typ = ApprovalUpdated // a vote counted, more needed (SPEC §15)
	case a.Status == gate.Pending:
		typ = ApprovalRequested
	}
	p.r.publish(Event{Type: typ, SessionID: a.SessionID, MessageID: a.MessageID,
		ToolCallID: a.ToolCallID, ParentToolCallID: a.ParentToolCallID, ToolName: a.ToolName, Approval: &a})
}
