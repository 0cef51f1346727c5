package web

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/a-h/templ"
	"github.com/coder/websocket"

	"countersign/internal/agent"
	"countersign/web/templates"
)

// writeTimeout bounds each write to a WebSocket's connection (from writeTimeout/2 to writeTimeout,
// see batchConn); a client slower than this is dropped and re-syncs.
const writeTimeout = 5 * time.Second

// live is a session page's WebSocket: first the whole transcript as the store and the run's
// live state have it (so nothing between the page's render and the socket's start is lost), then
// one htmx out-of-band fragment per event, rendered by the page's own components.
func (s *Server) live(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := s.cfg.Store.Session(r.Context(), id); err != nil {
		return err
	}
	// A socket opened with a login cookie ends when that login does (logout).
	var end *socketEnd
	if c, err := r.Cookie(ownerCookieName); err == nil && c.Value != "" {
		end = newSocketEnd()
		key := "login:" + ownerSessionHash(c.Value)
		s.sockets.add(key, end)
		defer s.sockets.remove(key, end)
	}
	return s.serveLive(w, r, id, ownerViewer(id), ownerSockets, end)
}

// serveLive streams session id's live fragments to who until the client leaves, end is ended
// (a revoked or expired share link, a logout) or the session is deleted; those close the socket
// with 1008 and a reason the page shows. The socket counts under limit; past its cap it is
// closed at once with the limit's reason. A viewer that falls behind is closed (1013, "resync")
// and reconnects.
func (s *Server) serveLive(w http.ResponseWriter, r *http.Request, id string, who viewer, limit socketLimit, end *socketEnd) error {
	// Subscribed before the resync is rendered: an event that lands in between is sent twice,
	// which the fragments tolerate (replacements by id, appends deduplicated by id), rather
	// than never.
	var workspace string
	k := eventSocket{
		limit: limit,
		end:   end,
		first: func(ctx context.Context) ([][]byte, bool) {
			ws, frag := s.resync(ctx, id, who)
			workspace = ws
			if who.owner {
				// The owner's header badge rides on this socket (SPEC §15).
				frag = fragments(frag, s.badge(ctx, nil))
			}
			return s.renderFragment(ctx, nil, frag), true
		},
		message: func(ctx context.Context, msgs [][]byte, ev *agent.Event) [][]byte {
			if b := s.liveFragment(ctx, ev, who, workspace); len(b) > 0 {
				msgs = append(msgs, b)
			}
			return msgs
		},
		behind:        "resync",
		deletedStatus: websocket.StatusPolicyViolation,
		deletedReason: endedDeleted,
		what:          "live",
	}
	if who.owner {
		k.badge = s.badgeFragment
	}
	s.pumpEvents(w, r, id, k)
	return nil
}

// coalesce puts in evs (reusing its array) the event just received and whatever else is already
// queued, at most 256 in all, and drops updates that a later update of the same message or call
// supersedes. The last update always survives; the order is kept.
func coalesce(evs []*agent.Event, first *agent.Event, queue <-chan *agent.Event) []*agent.Event {
	evs = append(evs[:0], first)
drain:
	for len(evs) < 256 {
		select {
		case ev, ok := <-queue:
			if !ok {
				break drain
			}
			evs = append(evs, ev)
		default:
			break drain
		}
	}
	if len(evs) == 1 {
		return evs // a client that keeps up: nothing to coalesce
	}
	type key struct {
		t          agent.EventType
		msg, calls string
	}
	last := map[key]int{}
	for i, ev := range evs {
		if ev.Type == agent.MessageUpdate || ev.Type == agent.ToolExecutionUpdate {
			last[key{ev.Type, ev.MessageID, ev.ToolCallID}] = i
		}
	}
	out := evs[:0]
	for i, ev := range evs {
		if ev.Type == agent.MessageUpdate || ev.Type == agent.ToolExecutionUpdate {
			if last[key{ev.Type, ev.MessageID, ev.ToolCallID}] != i {
				continue
			}
		}
		out = append(out, ev) // i >= len(out): evs[i] was read before being overwritten
	}
	clear(evs[len(out):])
	return out
}

// renderFragment appends frag's HTML to msgs as one message; nothing when frag is nil, renders nothing
// or fails (logged, unless ctx ended: a viewer who leaves mid-render is no error).
func (s *Server) renderFragment(ctx context.Context, msgs [][]byte, frag templ.Component) [][]byte {
	if b := s.renderBytes(ctx, frag); len(b) > 0 {
		return append(msgs, b)
	}
	return msgs
}

// renderBytes is frag's HTML; nil when frag is nil, renders nothing or fails (logged, unless ctx
// ended).
func (s *Server) renderBytes(ctx context.Context, frag templ.Component) []byte {
	if frag == nil {
		return nil
	}
	var buf bytes.Buffer
	if err := frag.Render(ctx, &buf); err != nil {
		if ctx.Err() == nil {
			s.log.Error("render fragment", "err", err)
		}
		return nil
	}
	if buf.Len() == 0 {
		return nil
	}
	return buf.Bytes()
}

// rights is what of a viewer an event's fragment depends on: two viewers with the same rights
// get the same bytes. Not the reviewer's name, which no fragment shows; the approver link's
// token is in decidePrefix, so each approver link is a class of its own.
type rights struct {
	owner          bool
	decidePrefix   string
	edit, remember bool
	viaLink        bool
}

func (who viewer) rights() rights {
	return rights{owner: who.owner, decidePrefix: who.decidePrefix, edit: who.decider.Rights.Edit,
		remember: who.decider.Rights.Remember, viaLink: who.decider.Via != nil}
}

// fragmentKey and sessionKey are this package's keys of agent.Event.Shared: an event's fragment
// for one class of rights, and the session as the store has it when the event is rendered.
type (
	fragmentKey struct{ rights rights }
	sessionKey  struct{}
)

// liveFragment is ev's fragment as who sees it, rendered once per event and class of rights
// (issue 19): the first of the session's viewers with who's rights to need it renders it and the
// others send the same bytes, which nobody may modify. workspace is the session's folder (it
// never changes). The render does not depend on the viewer's context: a viewer who leaves
// mid-render leaves the others a whole fragment.
func (s *Server) liveFragment(ctx context.Context, ev *agent.Event, who viewer, workspace string) []byte {
	v := ev.Shared(fragmentKey{who.rights()}, func() any {
		rctx := context.WithoutCancel(ctx)
		return s.renderBytes(rctx, s.fragment(rctx, ev, who, workspace))
	})
	b, _ := v.([]byte)
	return b
}

// eventSession is the session as the store has it when ev is rendered, read once per event for
// all its viewers; only the events whose fragment shows the session's state, usage or
// instructions read it.
func (s *Server) eventSession(ctx context.Context, ev *agent.Event) (agent.Session, error) {
	type read struct {
		sess agent.Session
		err  error
	}
	r := ev.Shared(sessionKey{}, func() any {
		sess, err := s.cfg.Store.Session(ctx, ev.SessionID)
		return read{sess, err}
	}).(read)
	return r.sess, r.err
}

// resync renders the whole live part of the page: the transcript, the run state and Stop. It
// also returns the session's workspace folder, which the socket's fragments need.
func (s *Server) resync(ctx context.Context, id string, who viewer) (string, templ.Component) {
	sess, err := s.cfg.Store.Session(ctx, id)
	if err != nil {
		return "", nil
	}
	items, err := s.transcriptItems(ctx, sess, who)
	if err != nil {
		s.log.Error("resync", "session", id, "err", err)
		return sess.Workspace, nil
	}
	return sess.Workspace, fragments(templates.Transcript(items), runState(sess, who))
}

// runState renders the session's run state (idle, running, waiting for approval) and Stop, as
// the store reads them: the first render, every live update and a reload show the same.
func runState(sess agent.Session, who viewer) templ.Component {
	return fragments(templates.RunState(string(sess.State)), stopSlot(sess.ID, who, sess.State.Active()))
}

func stopSlot(id string, who viewer, running bool) templ.Component {
	if !who.owner {
		return nil
	}
	return templates.StopButton("/sessions/"+id+"/stop", running)
}

// fragment renders one event as out-of-band swaps. Top-level cards are updated slot by slot
// (approval, body), so a pending prompt is never replaced by a progress update; nested cards are
// upserted whole into their parent's list. The session is read from the store (once per event,
// eventSession) only by the events whose fragment shows its state, usage or instructions.
func (s *Server) fragment(ctx context.Context, ev *agent.Event, who viewer, workspace string) templ.Component {
	b := s.newBuilder(ev.SessionID, workspace, who)
	switch ev.Type {
	case agent.MessageStart, agent.MessageEnd:
		if ev.Message == nil {
			return nil
		}
		streaming := ev.Type == agent.MessageStart
		b.live = s.cfg.Runner.Live(ev.SessionID)
		msg := appendTo("transcript", templates.Message(b.message(*ev.Message, streaming)))
		if ev.Type != agent.MessageEnd || (ev.Message.Role != agent.Assistant && ev.Message.Role != agent.User) {
			return msg
		}
		sess, err := s.eventSession(ctx, ev)
		switch {
		case ev.Message.Role == agent.Assistant && err == nil:
			// The session's total, as the store has summed it with this message (SPEC §17).
			frags := []templ.Component{msg, templates.SessionUsage(usageText(sess.Usage))}
			if u := ev.Message.Usage; u != nil && !u.IsZero() {
				// The gauge moves with the last usage reported (issue 34).
				frags = append(frags, templates.ContextGauge(templates.ContextView{Used: u.Prompt() + u.Output,
					Window: int64(s.cfg.Runner.ContextWindow(sess.Model))}))
			}
			return fragments(frags...)
		case ev.Message.Role == agent.User && err == nil:
			// A message is stored: the instructions are fixed now, and their editor goes.
			return fragments(msg, templates.InstructionsBody(instructionsView(sess, who, false)))
		}
		return msg
	case agent.MessageUpdate:
		if ev.Message == nil {
			return nil
		}
		// The streaming message's slots, each replaced by id: its text, its reasoning, its
		// status (a retry's wait, results shortened), and the cards of its tool calls as they
		// stream (SPEC §17), upserted by id: none of them holds a prompt yet.
		b.live = agent.Live{Running: true, Streaming: ev.Message, Partial: ev.PartialCalls, Retry: ev.Retry}
		mv := b.message(*ev.Message, true)
		out := []templ.Component{templates.MessageText(mv), templates.MessageStatus(mv)}
		if mv.Thinking != "" {
			out = append(out, templates.ThinkingText(mv))
		}
		for _, c := range mv.Cards {
			out = append(out, appendTo(messageDOMID(ev.MessageID), templates.Card(c)))
		}
		return fragments(out...)
	case agent.ApprovalUpdated:
		// A vote counted, more needed (SPEC §15): only the votes line changes, in place, so a
		// reason being typed into the same prompt stays.
		if ev.Approval == nil {
			return nil
		}
		av := approvalView(*ev.Approval, "")
		if who.decidePrefix != "" {
			av.MyVote = myVote(*ev.Approval, who.decider.Name)
		}
		if av.MyVote != "" {
			// The voter's other windows: their form gives way to their vote too (issue 34).
			return fragments(templates.ApprovalVotes(av, true), templates.MyVoteOOB(av))
		}
		return templates.ApprovalVotes(av, true)
	case agent.ApprovalRequested, agent.ApprovalResolved, agent.ToolExecutionStart,
		agent.ToolExecutionUpdate, agent.ToolExecutionEnd:
		b.live = s.cfg.Runner.Live(ev.SessionID)
		if ev.Approval != nil {
			b.approvals[callKey{ev.MessageID, ev.ToolCallID}] = *ev.Approval
		}
		if ev.Result != nil {
			b.results[callKey{ev.MessageID, ev.ToolCallID}] = ev.Result
		}
		b.live.Running = true
		if ev.ParentToolCallID != "" && ev.Type == agent.ToolExecutionEnd {
			// A finished nested call is drawn from its parent's record entry, as after a
			// reload; one the record left out (past its 256 calls) leaves the page as it
			// leaves the reloaded one.
			if ev.NestedCall == nil {
				return removeElement(cardID(ev.MessageID, ev.ToolCallID))
			}
			card := b.nestedCard(ev.MessageID, ev.ParentToolCallID, *ev.NestedCall)
			return appendTo(cardID(ev.MessageID, ev.ParentToolCallID)+"-nested", templates.Card(card))
		}
		args := ev.Arguments
		if len(args) == 0 && ev.Approval != nil {
			// An outside agent's call (SPEC §18) has no run whose live state holds its
			// arguments: its approval has them.
			args = ev.Approval.EffectiveArguments()
		}
		card := b.card(ev.MessageID, ev.ToolCallID, ev.ParentToolCallID, ev.ToolName, args, false)
		if ev.Type == agent.ToolExecutionUpdate && card.Result == nil {
			card.Update, card.State = ev.Update, "running"
		}
		// A prompt opened or decided changes the run state (waiting for approval or not).
		var state templ.Component
		if ev.Type == agent.ApprovalRequested || ev.Type == agent.ApprovalResolved {
			if sess, err := s.eventSession(ctx, ev); err == nil {
				state = runState(sess, who)
			}
		}
		if ev.ParentToolCallID != "" {
			return fragments(appendTo(cardID(ev.MessageID, ev.ParentToolCallID)+"-nested", templates.Card(card)), state)
		}
		// Progress redraws only the body, so nothing else of the card moves while it runs.
		if ev.Type == agent.ToolExecutionUpdate {
			return templates.CardBody(card)
		}
		// Every change of state redraws the whole card, as a reload draws it (its state class
		// included). None of these can land on a prompt being filled in: a call's own prompt
		// is new at approval_requested and gone after it, and its nested calls (whose prompts
		// the card holds) start after its tool_execution_start and end before its
		// tool_execution_end.
		return fragments(appendTo(messageDOMID(ev.MessageID), templates.Card(card)), state)
	case agent.SessionUpdated, agent.AgentEnd:
		sess, err := s.eventSession(ctx, ev)
		if err != nil {
			return nil
		}
		var title, tools, grants, mode, allowAll, provenance templ.Component
		if ev.Session != nil {
			if av := agentView(*ev.Session); av != nil {
				// What the agent reports of itself changed (SPEC §18).
				provenance = templates.AgentProvenance(*av)
			}
			// A rename, a mode switched and a rule for every tool reach every page of the
			// session, reviewers' too (a reviewer sees the mode as text).
			title = templates.SessionTitle(ev.Session.Title)
			modeURL := ""
			if who.owner {
				modeURL = "/sessions/" + ev.SessionID + "/mode"
			}
			mode = templates.ModeForm(string(ev.Session.Mode), modeURL, "")
			allowAll = templates.AllowAllNotice(s.allowAllRules(*ev.Session))
		}
		if ev.Session != nil && who.owner {
			tools = templates.ToolsPanel(s.toolsView(*ev.Session, nil))
			// A grant made or revoked publishes session_updated too (Runner.grantsChanged).
			if gv, err := s.grantsView(ctx, ev.SessionID); err == nil {
				grants = templates.GrantsPanel(gv)
			}
		}
		return fragments(runState(sess, who), title, mode, allowAll, tools, grants, provenance)
	}
	return nil
}
