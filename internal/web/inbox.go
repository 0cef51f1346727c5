package web

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/a-h/templ"
	"github.com/coder/websocket"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/tool"
	"countersign/web/templates"
)

// badgeURL is the small socket of the owner pages that have none of their own: it carries only
// the inbox badge (SPEC §15).
const badgeURL = "/inbox/badge"

// ownerPage is the Page of an owner page titled title: the owner's navigation and the inbox badge
// with the pending count, also in the tab title (SPEC §15). ownSocket says the page's own socket
// carries the badge's updates; else the page gets the badge's small socket.
func (s *Server) ownerPage(ctx context.Context, title string, ownSocket bool) templates.Page {
	p := templates.Page{Title: title, Owner: true}
	n, err := s.cfg.Store.PendingCountFor(ctx, "", ownerInbox.person)
	if err != nil {
		// The page is worth more than its count: shown without one, and the socket brings it.
		s.log.Error("inbox count", "err", err)
	}
	p.Inbox = templates.BadgeView{Count: n}
	if !ownSocket {
		p.BadgeURL = badgeURL
	}
	return p
}

// inboxPage is the owner's inbox (SPEC §15): every pending approval of every session, oldest
// first, a page at a time (Config.InboxPageSize), each with the session page's prompt, kept
// live by one socket (inboxLive).
func (s *Server) inboxPage(w http.ResponseWriter, r *http.Request) error {
	v, n, err := s.inboxView(r.Context(), "", ownerInbox)
	if err != nil {
		return err
	}
	v.LiveURL = "/inbox/live"
	p := templates.Page{Title: "Inbox", Owner: true, Inbox: templates.BadgeView{Count: n}}
	s.render(w, r, http.StatusOK, templates.Layout(p, templates.InboxPage(v)))
	return nil
}

// inboxView is the first page of the inbox of session sessionID ("" every session) as iv sees
// it, and how many approvals wait in all.
func (s *Server) inboxView(ctx context.Context, sessionID string, iv inboxViewer) (templates.InboxView, int, error) {
	n, err := s.cfg.Store.PendingCountFor(ctx, sessionID, iv.person)
	if err != nil {
		return templates.InboxView{}, 0, err
	}
	return s.inboxChunk(ctx, agent.InboxQuery{SessionID: sessionID, Limit: s.cfg.InboxPageSize}, n, iv)
}

// inboxChunk is the inbox page q selects as iv sees it; total is how many wait in all, of which
// the ones after this page are offered as the next (iv.moreURL).
func (s *Server) inboxChunk(ctx context.Context, q agent.InboxQuery, total int, iv inboxViewer) (templates.InboxView, int, error) {
	q.For = iv.person
	items, err := s.cfg.Store.Inbox(ctx, q)
	if err != nil {
		return templates.InboxView{}, 0, err
	}
	v := templates.InboxView{Cards: s.inboxCards(ctx, items, iv)}
	if len(items) == q.Limit {
		// At least one more, unless the last one was the last: the next page says.
		after := items[len(items)-1].Approval.ID
		more := total - len(items)
		if q.After != "" {
			more = -1 // unknown without counting what lies before; the button says "more"
		}
		if more != 0 {
			v.More = &templates.InboxMore{Count: more, Next: q.Limit, URL: iv.moreURL + "?after=" + url.QueryEscape(after)}
		}
	}
	return v, total, nil
}

// inboxMore is the next page of the owner's inbox after approval ?after=: its cards and, when
// more wait, the button for the one after (htmx swaps them in place of the button).
func (s *Server) inboxMore(w http.ResponseWriter, r *http.Request) error {
	return s.renderInboxMore(w, r, "", ownerInbox)
}

func (s *Server) renderInboxMore(w http.ResponseWriter, r *http.Request, sessionID string, iv inboxViewer) error {
	after := r.URL.Query().Get("after")
	if after == "" {
		return apperr.Errorf(apperr.Invalid, "Which page? ?after= names the last approval shown.")
	}
	v, _, err := s.inboxChunk(r.Context(), agent.InboxQuery{SessionID: sessionID, After: after, Limit: s.cfg.InboxPageSize}, -1, iv)
	if err != nil {
		return err
	}
	s.render(w, r, http.StatusOK, templates.InboxCards(v))
	return nil
}

// inboxViewer is whose inbox a card is drawn for: the owner's (every session, the owner's
// decision forms) or an approver link's (its session, the link's forms and page).
type inboxViewer struct {
	// who is the viewer of session sessionID.
	who       func(sessionID string) viewer
	sessionOf func(sessionID string) string // the session page's address
	moreURL   string                        // the next page's address, without its ?after=
	// person is whose inbox it is as reviewers name people ("owner"; "" lists every
	// approval): calls whose reviewers leave them out are not theirs to decide, so not
	// listed nor counted (SPEC §15; agent.InboxQuery.For).
	person string
}

// mayDecide reports whether a is iv's to decide as far as its reviewers go (see person).
func (iv inboxViewer) mayDecide(a gate.Approval) bool {
	return iv.person == "" || len(a.Reviewers) == 0 || slices.ContainsFunc(a.Reviewers, func(n string) bool { return gate.SamePerson(n, iv.person) })
}

// ownerInbox is the owner's inbox.
var ownerInbox = inboxViewer{who: ownerViewer, sessionOf: func(id string) string { return "/sessions/" + id }, moreURL: "/inbox/more",
	person: gate.ByOwner}

// linkInbox is the inbox of a share link (token) whose reviewer is who.
func linkInbox(token string, who viewer) inboxViewer {
	return inboxViewer{who: func(string) viewer { return who }, sessionOf: func(string) string { return "/r/" + token },
		moreURL: "/r/" + token + "/inbox/more"}
}

// inboxCards are items as iv sees them, measured against one clock reading.
func (s *Server) inboxCards(ctx context.Context, items []agent.InboxItem, iv inboxViewer) []templates.InboxCardView {
	now := time.Now()
	cards := make([]templates.InboxCardView, 0, len(items))
	for _, it := range items {
		cards = append(cards, s.inboxCard(it, iv, now))
	}
	return cards
}

// inboxCard is one approval as the inbox shows it: pending, the call's card with the session
// page's prompt (the viewer's decision form); decided, its outcome, which names a person's
// decision as made "in another window" (inbox.js drops that on the page that made it).
func (s *Server) inboxCard(it agent.InboxItem, iv inboxViewer, now time.Time) templates.InboxCardView {
	a := it.Approval
	b := s.newBuilder(a.SessionID, it.Workspace, iv.who(a.SessionID))
	b.approvals[callKey{a.MessageID, a.ToolCallID}] = a
	card := b.card(a.MessageID, a.ToolCallID, a.ParentToolCallID, a.ToolName, a.Arguments, false)
	c := templates.InboxCardView{ApprovalID: a.ID, SessionID: a.SessionID, SessionTitle: it.SessionTitle,
		SessionURL: iv.sessionOf(a.SessionID) + "#" + card.DOMID, ToolName: a.ToolName,
		WaitedMs: max(now.Sub(a.CreatedAt).Milliseconds(), 0), Since: a.CreatedAt, Card: card, Status: string(a.Status)}
	if a.Status != gate.Pending {
		said := a
		said.Reason = "" // after "in another window"
		c.Outcome, c.Reason = outcomeText(said), a.Reason
		c.Elsewhere = !a.Automatic && (a.Status == gate.Approved || a.Status == gate.Denied)
	}
	return c
}

// inboxLive is the owner's inbox socket: one per page, hearing every session's approval events
// (Broker.SubscribeApprovals). It starts with the list and the badge as the store has them, then
// sends, per event, the card (a new one appended, a decided one replaced by its outcome, an
// updated one redrawn) and the badge.
func (s *Server) inboxLive(w http.ResponseWriter, r *http.Request) error {
	end, done := s.loginEnd(r)
	defer done()
	s.pumpEvents(w, r, "", eventSocket{
		limit: ownerSockets,
		end:   end,
		subscribe: func() *agent.Subscription {
			return s.cfg.Broker.SubscribeApprovals()
		},
		first: func(ctx context.Context) ([][]byte, bool) {
			v, n, err := s.inboxView(ctx, "", ownerInbox)
			if err != nil {
				s.log.Error("inbox resync", "err", err)
				return nil, false
			}
			return s.renderFragment(ctx, nil, fragments(inboxList(v),
				templates.InboxBadge(templates.BadgeView{Count: n, OOB: true}))), true
		},
		message: func(ctx context.Context, msgs [][]byte, ev *agent.Event) [][]byte {
			msgs = s.inboxFragment(ctx, msgs, ev, ownerInbox, inboxKey{owner: true})
			return s.badgeFragment(ctx, msgs, ev)
		},
		behind: "resync",
		what:   "inbox",
	})
	return nil
}

// inboxBadge is the badge's small socket, for an owner page without a socket of its own (SPEC
// §15: the count is live on every page): the badge as the store counts, then once per approval
// event of any session.
func (s *Server) inboxBadge(w http.ResponseWriter, r *http.Request) error {
	end, done := s.loginEnd(r)
	defer done()
	s.pumpEvents(w, r, "", eventSocket{
		limit: ownerSockets,
		end:   end,
		subscribe: func() *agent.Subscription {
			return s.cfg.Broker.SubscribeApprovals()
		},
		first: func(ctx context.Context) ([][]byte, bool) {
			return s.renderFragment(ctx, nil, s.badge(ctx, nil)), true
		},
		message: s.badgeFragment,
		behind:  "resync",
		what:    "badge",
	})
	return nil
}

// loginEnd is the end of a socket opened with the owner's login cookie: it ends when that login
// does (logout). done forgets it when the socket closes.
func (s *Server) loginEnd(r *http.Request) (end *socketEnd, done func()) {
	c, err := r.Cookie(ownerCookieName)
	if err != nil || c.Value == "" {
		return nil, func() {}
	}
	end = newSocketEnd()
	key := "login:" + ownerSessionHash(c.Value)
	s.sockets.add(key, end)
	return end, func() { s.sockets.remove(key, end) }
}

// inboxList is the first page of the list as a live update (the socket's first message: what
// the store holds when it connects, as a reload would show it).
func inboxList(v templates.InboxView) templ.Component {
	return templ.ComponentFunc(func(ctx context.Context, w io.Writer) error {
		if _, err := w.Write([]byte(`<div id="inbox-list" class="inbox-list" aria-describedby="inbox-keys" hx-swap-oob="true">`)); err != nil {
			return err
		}
		if err := templates.InboxCards(v).Render(ctx, w); err != nil {
			return err
		}
		_, err := w.Write([]byte(`</div>`))
		return err
	})
}

// inboxKey is this package's agent.Event.Shared key of an event's inbox card, per class of
// viewer: the owner, or one approver link (its rights, the decision form's address among them).
type inboxKey struct {
	owner  bool
	token  string // the link's: its cards link to its page
	rights rights
}

// badgeKey is the Shared key of an approval event's badge for the owner.
type badgeKey struct{}

// inboxFragment appends ev's inbox card as iv sees it (rendered once per event and key): a new
// approval's card is appended to the list, any other approval event redraws its card where the
// page has it — pending (an approval_updated: a vote counted) with its prompt, decided with its
// outcome. Events that are not about an approval add nothing.
func (s *Server) inboxFragment(ctx context.Context, msgs [][]byte, ev *agent.Event, iv inboxViewer, key inboxKey) [][]byte {
	if !ev.Type.IsApproval() || ev.Approval == nil || !iv.mayDecide(*ev.Approval) {
		return msgs
	}
	v := ev.Shared(key, func() any {
		rctx := context.WithoutCancel(ctx)
		sess, err := s.eventSession(rctx, ev)
		if err != nil {
			return []byte(nil) // deleted meanwhile: nothing to show
		}
		c := s.inboxCard(agent.InboxItem{Approval: *ev.Approval, SessionTitle: sess.Title, Workspace: sess.Workspace}, iv, time.Now())
		if ev.Type == agent.ApprovalRequested {
			return s.renderBytes(rctx, appendTo("inbox-list", templates.InboxCard(c)))
		}
		c.OOB = true
		return s.renderBytes(rctx, templates.InboxCard(c))
	})
	if b, _ := v.([]byte); len(b) > 0 {
		msgs = append(msgs, b)
	}
	return msgs
}

// badgeFragment appends the owner's badge for an approval event (rendered once per event): the
// count as the store has it then, and a new approval's tool, session and address for a browser
// notification (SPEC §15).
func (s *Server) badgeFragment(ctx context.Context, msgs [][]byte, ev *agent.Event) [][]byte {
	if !ev.Type.IsApproval() {
		return msgs
	}
	v := ev.Shared(badgeKey{}, func() any {
		return s.renderBytes(context.WithoutCancel(ctx), s.badge(context.WithoutCancel(ctx), ev))
	})
	if b, _ := v.([]byte); len(b) > 0 {
		msgs = append(msgs, b)
	}
	return msgs
}

// badge is the owner's badge as a live update, counted now; for an approval_requested event ev,
// it names the new approval.
func (s *Server) badge(ctx context.Context, ev *agent.Event) templ.Component {
	n, err := s.cfg.Store.PendingCountFor(ctx, "", ownerInbox.person)
	if err != nil {
		s.log.Error("inbox count", "err", err)
		return nil
	}
	b := templates.BadgeView{Count: n, OOB: true}
	if ev != nil && ev.Type == agent.ApprovalRequested && ev.Approval != nil && ev.Approval.Status == gate.Pending &&
		ownerInbox.mayDecide(*ev.Approval) {
		title := ev.SessionID
		if sess, err := s.eventSession(ctx, ev); err == nil {
			title = sess.Title
		}
		b.New = &templates.BadgeNew{ApprovalID: ev.Approval.ID, ToolName: ev.Approval.ToolName, SessionTitle: title,
			URL:     "/sessions/" + ev.SessionID + "#" + cardID(ev.Approval.MessageID, ev.Approval.ToolCallID),
			Summary: callSummary(ev.Approval.Arguments)}
	}
	return templates.InboxBadge(b)
}

// reviewerInbox is a share link's inbox (SPEC §15: an approver link's inbox is its own
// session's): the session's pending approvals with the link's decision forms (a viewer link's
// cards have none). Before the reviewer gave a name, the link's page asks for it.
func (s *Server) reviewerInbox(w http.ResponseWriter, r *http.Request) error {
	l, err := s.link(r)
	if err != nil {
		return err
	}
	who := s.reviewerOf(r, l)
	token := r.PathValue("token")
	if who.decider.Name == "" {
		http.Redirect(w, r, "/r/"+token, http.StatusSeeOther)
		return nil
	}
	sess, err := s.cfg.Store.Session(r.Context(), l.SessionID)
	if err != nil {
		return err
	}
	v, _, err := s.inboxView(r.Context(), l.SessionID, linkInbox(token, who))
	if err != nil {
		return err
	}
	v.LiveURL, v.Scope = "/r/"+token+"/inbox/live", sess.Title
	s.render(w, r, http.StatusOK, templates.Layout(templates.Page{Title: "Inbox: " + sess.Title, Link: s.linkNav(r, l.SessionID)}, templates.InboxPage(v)))
	return nil
}

// reviewerInboxLive is a share link's inbox socket: its session's approval events only, drawn
// with the link's forms; it closes when the link is revoked or expires, as the link's page's.
func (s *Server) reviewerInboxLive(w http.ResponseWriter, r *http.Request) error {
	l, who, end, done, err := s.linkSocketEnd(r)
	if err != nil {
		return err
	}
	defer done()
	iv := linkInbox(r.PathValue("token"), who)
	s.pumpEvents(w, r, l.SessionID, eventSocket{
		limit: linkSockets(l.ID),
		end:   end,
		first: func(ctx context.Context) ([][]byte, bool) {
			v, _, err := s.inboxView(ctx, l.SessionID, iv)
			if err != nil {
				return nil, false
			}
			return s.renderFragment(ctx, nil, inboxList(v)), true
		},
		message: func(ctx context.Context, msgs [][]byte, ev *agent.Event) [][]byte {
			return s.inboxFragment(ctx, msgs, ev, iv, inboxKey{token: r.PathValue("token"), rights: who.rights()})
		},
		behind:        "resync",
		deletedStatus: websocket.StatusPolicyViolation,
		deletedReason: endedDeleted,
		what:          "link inbox",
	})
	return nil
}

// reviewerInboxMore is the next page of a share link's inbox (its session's), as inboxMore.
func (s *Server) reviewerInboxMore(w http.ResponseWriter, r *http.Request) error {
	l, err := s.link(r)
	if err != nil {
		return err
	}
	who := s.reviewerOf(r, l)
	if who.decider.Name == "" {
		return apperr.Errorf(apperr.Unauthorized, "Give your name first")
	}
	return s.renderInboxMore(w, r, l.SessionID, linkInbox(r.PathValue("token"), who))
}

// callSummary is a call's arguments in one line for a notification (issue 34): its command when
// it has one ("$ git push"), else the arguments as compact JSON; at most 200 bytes.
func callSummary(args json.RawMessage) string {
	var in struct {
		Command string `json:"command"`
	}
	if json.Unmarshal(args, &in) == nil && in.Command != "" {
		return tool.CutUTF8("$ "+strings.Join(strings.Fields(in.Command), " "), 200)
	}
	var buf bytes.Buffer
	if json.Compact(&buf, args) != nil {
		return ""
	}
	return tool.CutUTF8(buf.String(), 200)
}
