package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
)

// Replicas is what several servers sharing one database need of each other (SPEC §16, issue 21):
// leases, so one replica at a time drives a session's run, and a relay, so every replica's viewers
// see every session's events. internal/relay provides it over PostgreSQL (relay.Relay); a server
// alone on its database (a SQLite file) has SingleServer, which relays nothing.
type Replicas interface {
	// Acquire takes sessionID's lease for the run run (a random token), or renews it if this
	// replica's run already holds it: true when it holds it now, false when another replica's
	// lease has not expired — or has, but this replica may not take leases over yet (it has not
	// been connected for a whole lease period itself: SPEC §16 "Trust between replicas").
	Acquire(ctx context.Context, sessionID, run string) (bool, error)
	// Hold renews sessionID's lease if run still holds it, and reports whether it does: a run
	// checks it before each write to the transcript, so a replica that stalled past its lease
	// (and was taken over) writes nothing when it wakes.
	Hold(ctx context.Context, sessionID, run string) (bool, error)
	// Release gives the lease back if run still holds it (a later run's lease stays).
	Release(ctx context.Context, sessionID, run string) error
	// Renew extends every lease this replica holds and returns their sessions: a local run whose
	// session is missing lost its lease (the replica was cut off longer than a lease lasts).
	Renew(ctx context.Context) ([]string, error)
	// Orphans lists the sessions that need a driver: active (running or waiting) or with a
	// pending approval, and no replica's live lease — their replica died or stopped; none while
	// this replica may not take leases over yet (Acquire).
	Orphans(ctx context.Context) ([]string, error)

	// MarkStarted records that the model-issued call a person's approval approvalID let through
	// starts now, before it runs: a replica taking the session over runs a decided call that
	// never started (its replica died before the decision reached it) and ends one that did as
	// interrupted, never running it twice (SPEC §8).
	MarkStarted(ctx context.Context, approvalID string) error
	// Started reports which of approvalIDs' calls MarkStarted recorded.
	Started(ctx context.Context, approvalIDs []string) (map[string]bool, error)

	// Publish sends an event this replica published to the other replicas, after what it
	// reports was committed; it must not block. Which events are stored and numbered, and which
	// go as notifications only (text deltas, progress), is the implementation's.
	Publish(ev Event)
	// Stop asks the replica driving sessionID's run, if another one does, to stop it.
	Stop(sessionID, who string)
	// RulesChanged tells the other replicas that the stored rules changed: they read them again.
	RulesChanged()
}

// Defaults of the lease loop (Replica.RunLeases).
const (
	// LeaseEvery is how often a replica renews its leases and looks for sessions whose lease
	// expired. A lease lasts longer than a few of these (relay.LeaseTTL), so one missed renewal
	// loses nothing, and a dead replica's sessions are taken over within the lease's life plus
	// one of these.
	LeaseEvery = time.Second
	// roundTimeout bounds a round of the lease loop, in rounds (RunLeases), and never below
	// minRoundTimeout (tests' rounds are short; a loaded machine's reads are not).
	roundTimeout    = 3
	minRoundTimeout = 2 * time.Second
)

// SingleServer is the Replicas of a server alone on its database (a SQLite file; New's when
// Config.Replicas is nil): nobody else drives a session, watches its events or decides its calls,
// so it relays nothing (Publish, Stop and RulesChanged do nothing), no session is orphaned, and
// every lease is this server's — Acquire and Hold always succeed, and Renew returns the sessions
// acquired and not released, so the lease loop never parks a run. It records no call's start, and
// reports every call as started (Started): recovery never runs a call twice. Its zero value is
// ready; it is safe for concurrent use.
type SingleServer struct {
	mu     sync.Mutex
	leases map[string]string // session → the run holding it
}

// Compile-time check.
var _ Replicas = (*SingleServer)(nil)

// Alone reports that the server has no other replica: recovery is a restart of its own sessions,
// never a takeover (Replica.alone).
func (s *SingleServer) Alone() bool { return true }

// Acquire records run's lease of sessionID: always true.
func (s *SingleServer) Acquire(_ context.Context, sessionID, run string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases == nil {
		s.leases = map[string]string{}
	}
	s.leases[sessionID] = run
	return true, nil
}

// Hold is true: nobody takes a session over from a server alone.
func (s *SingleServer) Hold(context.Context, string, string) (bool, error) { return true, nil }

// Release forgets sessionID's lease if run holds it.
func (s *SingleServer) Release(_ context.Context, sessionID, run string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leases[sessionID] == run {
		delete(s.leases, sessionID)
	}
	return nil
}

// Renew returns the sessions whose leases were acquired and not released.
func (s *SingleServer) Renew(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := make([]string, 0, len(s.leases))
	for id := range s.leases {
		held = append(held, id)
	}
	return held, nil
}

// Orphans is none: no other server left any.
func (s *SingleServer) Orphans(context.Context) ([]string, error) { return nil, nil }

// MarkStarted records nothing.
func (s *SingleServer) MarkStarted(context.Context, string) error { return nil }

// Started reports every call as started: without a record, a call that may have run is never
// run again (SPEC §8).
func (s *SingleServer) Started(_ context.Context, approvalIDs []string) (map[string]bool, error) {
	out := make(map[string]bool, len(approvalIDs))
	for _, id := range approvalIDs {
		out[id] = true
	}
	return out, nil
}

// Publish does nothing: nobody else watches.
func (s *SingleServer) Publish(Event) {}

// Stop does nothing: nobody else drives a run.
func (s *SingleServer) Stop(string, string) {}

// RulesChanged does nothing: nobody else holds the rules.
func (s *SingleServer) RulesChanged() {}

// Replica is this server as one of the servers sharing its database (SPEC §16), for its Runner
// (Runner.Replica): it keeps the leases of the runner's runs and takes over the sessions dead
// replicas left (RunLeases), and it hands the runner what the other replicas relay (Deliver,
// StopRun, ReloadRules: relay.Target). A server alone on its database (SingleServer) reads the
// same: its leases are always its own, and nothing is relayed to it.
type Replica struct {
	r    *Runner
	port Replicas // Config.Replicas
	// alone is set when the port says the server has no other replica (SingleServer.Alone,
	// promoted through a wrapper such as relay.Single). The few rules that differ read it: no
	// session is another replica's run (DeleteSession), and what recovery finds is this server's
	// own restart, never a takeover — a missing workspace folder is the tools' to report, nobody
	// else was watching the run it ends, and there is no takeover to log.
	alone bool
}

func newReplica(r *Runner, port Replicas) *Replica {
	p := &Replica{r: r, port: port}
	if a, ok := port.(interface{ Alone() bool }); ok {
		p.alone = a.Alone()
	}
	return p
}

// Replica is this server's side of the replicas sharing its database: the lease loop, and what
// the relay hands the runner.
func (r *Runner) Replica() *Replica { return r.replica }

// remoteRuns is the live state of runs other replicas drive, built from their events (Deliver),
// so a page reloaded on this replica shows a running call's progress too.
type remoteRuns struct {
	mu   sync.Mutex
	runs map[string]*liveState
}

// apply updates sessionID's remote live state with ev.
func (m *remoteRuns) apply(ev Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.Type {
	case AgentStart:
		if m.runs == nil {
			m.runs = map[string]*liveState{}
		}
		m.runs[ev.SessionID] = &liveState{}
		return
	case AgentEnd, SessionDeleted:
		delete(m.runs, ev.SessionID)
		return
	}
	if s := m.runs[ev.SessionID]; s != nil {
		s.apply(ev)
	}
}

func (m *remoteRuns) get(sessionID string) *liveState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs[sessionID]
}

// Deliver publishes on this replica an event another replica published (SPEC §16): to this
// replica's viewers, into the live state a reloaded page reads, and — for an approval a person
// decided there — to the call waiting for it here, which the approval's stored row wakes (the
// event only says where to look). Called by the Replicas implementation, in each session's event
// order.
//
// What decides or shows a decision is read back from the store, never taken from the event
// (issue 33, SPEC §16 "Trust between replicas"; the relay authenticates events, this is the
// second fence): a session switched to another mode keeps the mode its stored row says; a
// deleted session is forgotten (its rules, its mode) only once its row is gone; an approval is
// shown as its stored row says. Those few events cost a read of the store (up to
// deliverReadTimeout); an event whose row cannot be read is not shown.
func (p *Replica) Deliver(ev Event) {
	r := p.r
	switch {
	case ev.Type == SessionDeleted:
		if !p.gone(ev.SessionID) {
			r.log.Warn("a relayed deletion of a session that is still stored: ignored", "session", ev.SessionID)
			return
		}
		r.rules.ForgetSession(ev.SessionID)
		r.modes.Delete(ev.SessionID)
		r.tellDeleted(ev.SessionID) // the gateway's cached session: its next call makes a new one
	case ev.Type == SessionUpdated:
		ctx, cancel := context.WithTimeout(context.Background(), deliverReadTimeout)
		s, err := r.cfg.Store.Session(ctx, ev.SessionID)
		cancel()
		if err != nil {
			r.log.Warn("a relayed session update: its session could not be read", "session", ev.SessionID, "err", err)
			return
		}
		if s.Mode != "" {
			r.modes.Store(ev.SessionID, s.Mode)
		}
		ev.Session = &s
	case ev.Type.IsApproval() && ev.Approval != nil:
		ctx, cancel := context.WithTimeout(context.Background(), deliverReadTimeout)
		a, err := r.cfg.Store.Approval(ctx, ev.Approval.ID)
		cancel()
		if err != nil || a.SessionID != ev.SessionID {
			r.log.Warn("a relayed approval event: its approval could not be read", "approval", ev.Approval.ID, "err", err)
			return
		}
		ev.Approval = &a
		switch {
		case a.Status != gate.Pending:
			ev.Type = ApprovalResolved
		case len(a.Votes) > 0:
			ev.Type = ApprovalUpdated
		default:
			ev.Type = ApprovalRequested
		}
	}
	r.remote.apply(ev)
	r.cfg.Broker.Publish(ev)
	if ev.Type.IsApproval() && ev.Approval != nil && ev.Approval.Status != gate.Pending && r.gate.Waiting(ev.Approval.ID) {
		id := ev.Approval.ID
		go func() {
			if err := r.gate.Wake(context.Background(), id); err != nil {
				r.log.Error("wake a call decided on another replica", "approval", id, "err", err)
			}
		}()
	}
}

// deliverReadTimeout bounds the store read a relayed event that shows or decides something costs
// (Deliver).
const deliverReadTimeout = 5 * time.Second

// gone reports whether sessionID's row is no longer stored (a read that fails otherwise: not
// gone).
func (p *Replica) gone(sessionID string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), deliverReadTimeout)
	defer cancel()
	_, err := p.r.cfg.Store.Session(ctx, sessionID)
	return apperr.CodeOf(err) == apperr.NotFound
}

// Drives reports whether this replica drives sessionID's run (relay.Target): another replica's
// Stop of it is this one's to act on.
func (p *Replica) Drives(sessionID string) bool {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	return p.r.runs[sessionID] != nil
}

// StopRun stops sessionID's run if this replica drives it: another replica's Stop (Replicas.Stop).
func (p *Replica) StopRun(sessionID, who string) {
	r := p.r
	r.mu.Lock()
	rn := r.runs[sessionID]
	r.mu.Unlock()
	if rn != nil {
		rn.cancel(&StoppedError{By: who})
	}
}

// ReloadRules reads the stored rules again: another replica changed them (Replicas.RulesChanged).
func (p *Replica) ReloadRules(ctx context.Context) error { return p.r.rules.Load(ctx) }

// acquire takes sessionID's lease for a new run with token lease.
func (p *Replica) acquire(ctx context.Context, sessionID, lease string) (bool, error) {
	return p.port.Acquire(ctx, sessionID, lease)
}

// release gives back the lease of a run that ended (or of a recovery that found nothing to run).
func (p *Replica) release(sessionID, lease string) {
	if lease == "" {
		return
	}
	if err := p.port.Release(context.Background(), sessionID, lease); err != nil {
		p.r.log.Error("release a session's lease", "session", sessionID, "err", err)
	}
}

// drivenElsewhere reports whether sess's run, active in the store but not here, is another
// replica's (SPEC §16); never for a server alone.
func (p *Replica) drivenElsewhere(sess Session) bool {
	return !p.alone && sess.State.Active() && !p.r.Busy(sess.ID)
}

// RunLeases keeps this replica's leases alive and takes over the sessions whose replica died
// (SPEC §16, §8), every `every` until ctx ends: it renews the leases its runs hold, parks a run
// whose lease another replica took (this one was cut off too long: the other one drives it now),
// and recovers every orphaned session it can lease, as a restart recovers them (Recover). A
// server alone renews its own leases and finds no orphan. Errors are logged, and the next round
// tries again.
func (p *Replica) RunLeases(ctx context.Context, every time.Duration) {
	r := p.r
	t := time.NewTicker(every)
	defer t.Stop()
	failures := 0 // rounds in a row that failed: logged at the 1st, 2nd, 4th, 8th…
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A renewal or a look for orphans that hangs (a database that stopped answering without
		// closing anything) ends after roundTimeout rounds (at least minRoundTimeout): it fails, as one of a database that
		// is down does, and the replica counts as cut off (relay.Relay.Connected) rather than
		// stall here. A takeover itself (Recover's steps) runs under ctx.
		round, cancel := context.WithTimeout(ctx, max(roundTimeout*every, minRoundTimeout))
		err := p.renew(round)
		if err == nil {
			err = p.takeOver(ctx, round)
		}
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures++
			if failures&(failures-1) == 0 {
				r.log.Error("leases: renew or take over", "err", err, "failures", failures)
			}
		case failures > 0:
			r.log.Info("leases: the database answers again", "after", failures)
			failures = 0
		}
	}
}

func (p *Replica) renew(ctx context.Context) error {
	r := p.r
	held, err := p.port.Renew(ctx)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, id := range held {
		have[id] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, rn := range r.runs {
		// Two rounds' grace: a lease taken just after Renew read the table is not in its answer.
		if !have[id] && rn.lease != "" && time.Since(rn.leased) > 2*LeaseEvery {
			r.log.Error("a session's lease was lost: another replica drives it now; this run parks", "session", id)
			rn.leaseLost.Store(true)
			rn.cancel(&StoppedError{By: "lease lost", park: true})
		}
	}
	return nil
}

// takeOver recovers the sessions no live replica drives (Replicas.Orphans, asked under look)
// that this replica can lease.
func (p *Replica) takeOver(ctx, look context.Context) error {
	ids, err := p.port.Orphans(look)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := p.recover(ctx, id, nil); err != nil {
			p.r.log.Error("take over a session", "session", id, "err", err)
		}
	}
	return nil
}

// recover recovers sessionID (SPEC §8) if this replica runs nothing in it and can lease it;
// pending are its pending approvals when the caller has them (nil: read here).
func (p *Replica) recover(ctx context.Context, sessionID string, pending []gate.Approval) error {
	r := p.r
	if r.Busy(sessionID) {
		return nil
	}
	lease := newID()
	ok, err := p.acquire(ctx, sessionID, lease)
	if err != nil || !ok {
		return err
	}
	if pending == nil {
		if pending, err = r.cfg.Store.Approvals(ctx, sessionID, gate.Pending); err != nil {
			p.release(sessionID, lease)
			return err
		}
	}
	started, err := r.recoverSession(ctx, sessionID, pending, lease)
	if !started {
		p.release(sessionID, lease)
	}
	if err == nil && !p.alone {
		r.log.Info("took over a session", "session", sessionID, "resumed", started)
	}
	return err
}

// markStarted records that a model-issued call a person approved starts (Replicas.MarkStarted):
// without the record, a replica taking the session over could not tell a call that never started
// from one that was running when its replica died.
func (p *Replica) markStarted(ctx context.Context, inv *invocation, a gate.Approval) error {
	if inv.call.ParentToolCallID != "" || a.Automatic {
		return nil
	}
	return p.port.MarkStarted(context.WithoutCancel(ctx), a.ID)
}

// decidedNotStarted returns the approvals of open (model-issued, unanswered) calls that a person
// decided while no replica drove the session: their calls never started (Replicas.Started), so
// recovery hands them their decision as if it had just been made. A server alone reports every
// call as started: none.
func (p *Replica) decidedNotStarted(ctx context.Context, sessionID, messageID string, open []Block) (map[string]gate.Approval, error) {
	r := p.r
	if len(open) == 0 {
		return nil, nil
	}
	as, err := r.cfg.Store.Approvals(ctx, sessionID, "")
	if err != nil {
		return nil, err
	}
	own := map[string]gate.Approval{}
	var ids []string
	for _, a := range as {
		if a.MessageID == messageID && a.ParentToolCallID == "" && !a.Automatic && a.Status != gate.Pending && isOpen(open, a.ToolCallID) {
			own[a.ToolCallID] = a
			ids = append(ids, a.ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	started, err := p.port.Started(ctx, ids)
	if err != nil {
		return nil, err
	}
	for call, a := range own {
		if started[a.ID] || a.Status != gate.Approved && a.Status != gate.Denied && a.Status != gate.TimedOut {
			delete(own, call)
		}
	}
	return own, nil
}

// workspaceMissing is an error naming sess's workspace folder when it is not a folder on this
// replica: a session taken over here cannot run its calls (SPEC §16: a workspace replicas share
// must be on shared storage). nil when the folder is there, and for a server alone (a restart
// takes nothing over: its tools report a folder that went away).
func (p *Replica) workspaceMissing(sess Session) error {
	if p.alone || sess.Workspace == "" {
		return nil
	}
	if fi, err := os.Stat(sess.Workspace); err == nil && fi.IsDir() {
		return nil
	}
	return apperr.Errorf(apperr.Invalid, "The session's workspace folder %s is missing on this server (replicas must share the workspace); the run cannot continue here.", sess.Workspace)
}

// errLeaseLost ends a run whose session another replica took over: it writes nothing more, as a
// parked run does.
var errLeaseLost = fmt.Errorf("this server no longer holds the session (another server took it over): %w", errParked)

// append stores m (with records) as the run's next transcript entry, if the run still holds its
// session's lease (Replicas.Hold): a replica that stalled longer than a lease and was taken over
// writes nothing when it wakes (errLeaseLost); a server alone always holds it.
//
// With replicas, a database that is away does not end the run (issue 33, SPEC §16 "Trust
// between replicas": a replica cut off from the database is not dead): the write waits for it,
// and once it answers, the lease is renewed first (Hold) and the entry written then. A replica
// takes a lease over only after it has been connected for a whole lease period itself, so the
// holder coming back renews before anyone may take it; if someone did take it (the holder was
// away longer than that while the database was not), the write is refused as errLeaseLost. A
// write whose commit may have gone through before the connection broke is looked for before it
// is tried again: the entry is stored once. It gives up after writeRetryFor, or when a graceful
// shutdown parks the run (the next owner records the call as interrupted, as after a kill).
func (rn *run) append(ctx context.Context, m Message, records ...gate.Approval) error {
	r := rn.r
	if rn.lease == "" || r.replica.alone {
		if rn.lease != "" {
			if held, err := r.cfg.Replicas.Hold(ctx, rn.session.ID, rn.lease); err != nil {
				return err
			} else if !held {
				rn.leaseLost.Store(true)
				return errLeaseLost
			}
		}
		_, err := r.cfg.Store.AppendEntry(ctx, rn.session.ID, m, records...)
		return err
	}
	deadline := time.Now().Add(writeRetryFor)
	wait := writeRetryFirst
	failed := 0 // appends that failed while the lease was held (the database answered)
	tried := false
	for {
		held, err := rn.hold(ctx)
		switch {
		case err != nil:
			// The database is away: wait for it.
		case !held:
			rn.leaseLost.Store(true)
			return errLeaseLost
		default:
			if tried {
				// The last attempt may have committed before its answer was lost.
				if ok, serr := rn.stored(ctx, m.ID); serr == nil && ok {
					return nil
				} else if serr != nil {
					err = serr
					break
				}
			}
			tried = true
			if _, err = r.cfg.Store.AppendEntry(ctx, rn.session.ID, m, records...); err == nil {
				return nil
			}
			if c := apperr.CodeOf(err); c != apperr.Internal && c != "" {
				return err // the store refused it: no retry changes that
			}
			if failed++; failed >= 3 {
				return err // the database answers, and refuses this write
			}
		}
		if time.Now().After(deadline) || rn.parking() {
			return err
		}
		if wait == writeRetryFirst {
			r.log.Warn("the database is away: a run's write waits for it", "session", rn.session.ID, "err", err)
		}
		time.Sleep(wait)
		wait = min(2*wait, writeRetryMax)
	}
}

// How long and how often a run's write is tried again while the database is away (run.append).
const (
	writeRetryFor   = 10 * time.Minute
	writeRetryFirst = 50 * time.Millisecond
	writeRetryMax   = time.Second
)

// untilAnswered runs write, an idempotent write of the run's (its session idle at its end, its
// lease given back), and, with replicas, runs it again while the database is away, as append
// does: the lease is renewed first (Hold), and nothing is written once another replica holds it.
// It gives up as append does; its error is write's last.
func (rn *run) untilAnswered(ctx context.Context, write func() error) error {
	r := rn.r
	err := write()
	if err == nil || rn.lease == "" || r.replica.alone {
		return err
	}
	deadline := time.Now().Add(writeRetryFor)
	wait := writeRetryFirst
	for failed := 1; ; {
		if time.Now().After(deadline) || rn.parking() {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, writeRetryMax)
		held, herr := rn.hold(ctx)
		switch {
		case herr != nil:
			continue // still away
		case !held:
			rn.leaseLost.Store(true)
			return err
		}
		if err = write(); err == nil {
			return nil
		}
		if failed++; failed >= 3 {
			return err // the database answers, and refuses this write
		}
	}
}

// hold is Replicas.Hold of the run's lease, bounded by holdTimeout: a database that hangs is one
// that is away, and the write waiting for it can still give up (parking).
func (rn *run) hold(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, holdTimeout)
	defer cancel()
	return rn.r.cfg.Replicas.Hold(ctx, rn.session.ID, rn.lease)
}

// holdTimeout bounds one renewal of a run's lease while its write waits for the database.
const holdTimeout = 5 * time.Second

// stored reports whether the session's transcript holds an entry whose message has id.
func (rn *run) stored(ctx context.Context, id string) (bool, error) {
	entries, err := rn.r.cfg.Store.Entries(ctx, rn.session.ID)
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if e.Message.ID == id {
			return true, nil
		}
	}
	return false, nil
}

// parking reports whether a graceful shutdown stopped the run (Runner.Shutdown): its pending
// writes are given up, and the next owner of the session settles the call.
func (rn *run) parking() bool {
	var stopped *StoppedError
	return errors.As(context.Cause(rn.ctx), &stopped) && stopped.park
}
