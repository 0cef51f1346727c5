package web

import (
	"context"
	"crypto/hmac"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/share"
	"countersign/web/templates"
)

// Share links (SPEC §7): the owner makes them in the share panel or the API; a reviewer opens
// /r/<token>, gives a display name once, and watches the session live; an approver may also
// decide its approvals. A revoked or expired link answers 404 and its open sockets close.

const reviewerCookie = "countersign_reviewer"

// Why a live socket was ended, as the page shows it (the WebSocket close reason, with 1008).
const (
	endedLink    = "This share link was revoked or has expired. The page no longer updates."
	endedLogout  = "You logged out. This page no longer updates; log in again to see it."
	endedDeleted = "This session was deleted. The page no longer updates."
)

// socketEnd ends one open live socket, once, with a reason.
type socketEnd struct {
	done   chan struct{}
	once   sync.Once
	reason string // set before done is closed
}

func newSocketEnd() *socketEnd { return &socketEnd{done: make(chan struct{})} }

// end closes the socket with reason; later calls do nothing.
func (e *socketEnd) end(reason string) {
	e.once.Do(func() {
		e.reason = reason
		close(e.done)
	})
}

// Done is closed when the socket is to end; nil (never) for a nil end.
func (e *socketEnd) Done() <-chan struct{} {
	if e == nil {
		return nil
	}
	return e.done
}

// socketEnds tracks open live sockets by what they depend on — a share link ("link:<id>"), an
// owner login ("login:<hash>") — so revoking the link or logging out closes them.
type socketEnds struct {
	mu    sync.Mutex
	byKey map[string]map[*socketEnd]struct{}
}

func (se *socketEnds) add(key string, e *socketEnd) {
	se.mu.Lock()
	defer se.mu.Unlock()
	if se.byKey == nil {
		se.byKey = map[string]map[*socketEnd]struct{}{}
	}
	if se.byKey[key] == nil {
		se.byKey[key] = map[*socketEnd]struct{}{}
	}
	se.byKey[key][e] = struct{}{}
}

func (se *socketEnds) remove(key string, e *socketEnd) {
	se.mu.Lock()
	defer se.mu.Unlock()
	delete(se.byKey[key], e)
	if len(se.byKey[key]) == 0 {
		delete(se.byKey, key)
	}
}

// closeKey ends every open socket under key with reason.
func (se *socketEnds) closeKey(key, reason string) {
	se.mu.Lock()
	defer se.mu.Unlock()
	for e := range se.byKey[key] {
		e.end(reason)
	}
	delete(se.byKey, key)
}

// link resolves the request's share token (404 with no detail otherwise).
func (s *Server) link(r *http.Request) (share.Link, error) {
	if s.cfg.Shares == nil {
		return share.Link{}, apperr.Errorf(apperr.NotFound, "Not found")
	}
	l, err := s.cfg.Shares.Resolve(r.Context(), r.PathValue("token"))
	if apperr.CodeOf(err) == apperr.NotFound {
		s.failures.fail(r) // a guess, or a revoked or expired link (tokenFailures)
	}
	return l, err
}

// reviewerOf returns who the reviewer is: their name from the link's cookie (decider.Name ""
// before they gave one) and what the link lets them do (its role and rights).
func (s *Server) reviewerOf(r *http.Request, l share.Link) viewer {
	who := viewer{}
	if l.For != "" {
		// A link made for a person decides as that person (SPEC §15): no name is asked, and no
		// cookie can give another.
		who.decider = l.Decider("")
		if l.Role == share.Approver {
			who.decidePrefix = "/r/" + r.PathValue("token") + "/approvals/"
		}
		return who
	}
	// The cookie is "<name>.<signature>"; anything else (edited, forged, another link's) counts
	// as no name, and the reviewer is asked again.
	if c, err := r.Cookie(reviewerCookie); err == nil {
		if i := strings.LastIndexByte(c.Value, '.'); i > 0 {
			name, err := url.QueryUnescape(c.Value[:i])
			if err == nil && share.ValidName(name) &&
				hmac.Equal([]byte(c.Value[i+1:]), []byte(s.cfg.Shares.SignName(l.ID, name))) {
				who.decider = l.Decider(name)
			}
		}
	}
	if l.Role == share.Approver {
		who.decidePrefix = "/r/" + r.PathValue("token") + "/approvals/"
	}
	return who
}

func (s *Server) reviewerPage(w http.ResponseWriter, r *http.Request) error {
	l, err := s.link(r)
	if err != nil {
		return err
	}
	who := s.reviewerOf(r, l)
	sess, err := s.cfg.Store.Session(r.Context(), l.SessionID)
	if err != nil {
		return err
	}
	if who.decider.Name == "" {
		s.render(w, r, http.StatusOK, templates.Layout(templates.Page{Title: sess.Title},
			templates.ReviewerName(templates.NamePage{Action: "/r/" + r.PathValue("token") + "/name", Title: sess.Title, Role: string(l.Role)})))
		return nil
	}
	v, err := s.sessionView(r.Context(), r, l.SessionID, who)
	if err != nil {
		return err
	}
	v.LiveURL = "/r/" + r.PathValue("token") + "/live"
	what := "watch this session live"
	if l.Role == share.Approver {
		can := []string{"watch this session live", "decide its approvals"}
		if l.CanEdit {
			can = append(can, "edit their arguments")
		}
		if l.CanRemember {
			can = append(can, "approve a tool for the session")
		}
		what = strings.Join(can[:len(can)-1], ", ") + " and " + can[len(can)-1]
	}
	v.Banner = "Shared with you as " + string(l.Role) + ": you can " + what + ". Signed in as " + who.decider.Name + "."
	s.render(w, r, http.StatusOK, templates.Layout(templates.Page{Title: v.Title, Link: s.linkNav(r, l.SessionID)}, templates.SessionPage(v)))
	return nil
}

// linkNav is a share link's navigation (issue 34): its session page and its inbox with the
// session's pending count.
func (s *Server) linkNav(r *http.Request, sessionID string) *templates.LinkNav {
	token := r.PathValue("token")
	n, err := s.cfg.Store.PendingCount(r.Context(), sessionID)
	if err != nil {
		n = 0 // the links still work without the count
	}
	return &templates.LinkNav{SessionURL: "/r/" + token, InboxURL: "/r/" + token + "/inbox", Pending: n}
}

// reviewerName records the reviewer's display name, as share.NormalizeName leaves it, in a
// cookie scoped to the link; a refused name shows the form again with the reason (400).
func (s *Server) reviewerName(w http.ResponseWriter, r *http.Request) error {
	l, err := s.link(r)
	if err != nil {
		return err
	}
	if err := parseForm(r); err != nil {
		return err
	}
	name, err := share.NormalizeName(r.PostForm.Get("name"))
	if l.For != "" {
		// The name of a link made for a person is fixed by the owner (SPEC §15): another one is
		// refused; the same one changes nothing.
		if err != nil || name != l.For {
			return apperr.Errorf(apperr.Forbidden, "This link was made for %s: the name is fixed.", l.For)
		}
		http.Redirect(w, r, "/r/"+r.PathValue("token"), http.StatusSeeOther)
		return nil
	}
	if err != nil {
		sess, serr := s.cfg.Store.Session(r.Context(), l.SessionID)
		if serr != nil {
			return serr
		}
		s.render(w, r, http.StatusBadRequest, templates.Layout(templates.Page{Title: sess.Title},
			templates.ReviewerName(templates.NamePage{Action: "/r/" + r.PathValue("token") + "/name", Title: sess.Title,
				Role: string(l.Role), Error: apperr.MessageOf(err)})))
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: reviewerCookie, Value: url.QueryEscape(name) + "." + s.cfg.Shares.SignName(l.ID, name), Path: "/r/" + r.PathValue("token"),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secure(r), MaxAge: 30 * 24 * 3600})
	http.Redirect(w, r, "/r/"+r.PathValue("token"), http.StatusSeeOther)
	return nil
}

// reviewerLive is a reviewer's live socket; it closes when the link is revoked or expires.
func (s *Server) reviewerLive(w http.ResponseWriter, r *http.Request) error {
	l, who, end, done, err := s.linkSocketEnd(r)
	if err != nil {
		return err
	}
	defer done()
	return s.serveLive(w, r, l.SessionID, who, linkSockets(l.ID), end)
}

// linkSocketEnd checks r's share link and its reviewer's name for a live socket (401 "Give your
// name first" without one) and registers the socket's end: it ends when the link is revoked or
// expires. done releases it, when the socket closes.
func (s *Server) linkSocketEnd(r *http.Request) (l share.Link, who viewer, end *socketEnd, done func(), err error) {
	if l, err = s.link(r); err != nil {
		return l, who, nil, nil, err
	}
	if who = s.reviewerOf(r, l); who.decider.Name == "" {
		return l, who, nil, nil, apperr.Errorf(apperr.Unauthorized, "Give your name first")
	}
	end = newSocketEnd()
	s.sockets.add("link:"+l.ID, end)
	var expiry *time.Timer
	if l.ExpiresAt != nil {
		expiry = time.AfterFunc(time.Until(*l.ExpiresAt), func() { end.end(endedLink) })
	}
	return l, who, end, func() {
		if expiry != nil {
			expiry.Stop()
		}
		s.sockets.remove("link:"+l.ID, end)
	}, nil
}

// reviewerDecide is an approver's decision, recorded with their name and the link, within the
// link's rights (403 for an edit or "Approve for session" the link was not created with).
func (s *Server) reviewerDecide(w http.ResponseWriter, r *http.Request) error {
	sessionID, by, err := s.approver(r)
	if err != nil {
		return err
	}
	return s.decideAs(w, r, sessionID, by)
}

// approver is the approver behind the request's share link, as a decider (their name, the
// link, its rights), and the link's session. Errors: apperr.NotFound for an unknown, revoked,
// expired or viewer link; apperr.Unauthorized before the reviewer gave a name.
func (s *Server) approver(r *http.Request) (sessionID string, by gate.Decider, err error) {
	l, err := s.link(r)
	if err != nil {
		return "", gate.Decider{}, err
	}
	if l.Role != share.Approver {
		return "", gate.Decider{}, apperr.Errorf(apperr.NotFound, "Not found")
	}
	who := s.reviewerOf(r, l)
	if who.decider.Name == "" {
		return "", gate.Decider{}, apperr.Errorf(apperr.Unauthorized, "Give your name first")
	}
	return l.SessionID, who.decider, nil
}

// sharesView is the owner's share panel for a session; formErr, when set, is the create form's
// refusal to show.
func (s *Server) sharesView(ctx context.Context, r *http.Request, sessionID, formErr string) (templates.SharesView, error) {
	v := templates.SharesView{CreateURL: "/sessions/" + sessionID + "/shares", Error: formErr}
	if s.cfg.Shares == nil {
		return v, nil
	}
	links, err := s.cfg.Shares.Links(ctx, sessionID)
	if err != nil {
		return v, err
	}
	now := s.cfg.Shares.Now()
	for _, l := range links {
		row := templates.ShareRow{ID: l.ID, URL: s.shareURL(r, l), Role: string(l.Role), Label: l.Label, For: l.For,
			CanEdit: l.CanEdit, CanRemember: l.CanRemember, Status: "active", RevokeURL: "/sessions/" + sessionID + "/shares/" + l.ID + "/revoke"}
		switch {
		case l.RevokedAt != nil:
			row.Status = "revoked"
		case !l.Active(now):
			row.Status = "expired"
		}
		if l.ExpiresAt != nil {
			row.Expires = l.ExpiresAt.Local().Format("2006-01-02 15:04")
		}
		if l.LastUsedAt != nil {
			row.LastUsed = l.LastUsedAt.Local().Format("2006-01-02 15:04")
		}
		v.Links = append(v.Links, row)
	}
	return v, nil
}

// shareURL is a link's full URL: on the server's -public-url when set (never on the request's
// Host, which a client chooses), else on the address the owner's browser used (baseURL).
func (s *Server) shareURL(r *http.Request, l share.Link) string {
	return s.baseURL(r) + "/r/" + s.cfg.Shares.Token(l.ID)
}

func (s *Server) createShare(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := parseForm(r); err != nil {
		return err
	}
	if _, err := s.cfg.Store.Session(r.Context(), id); err != nil {
		return err
	}
	formErr := ""
	if s.cfg.Shares == nil {
		return apperr.Errorf(apperr.NotFound, "Sharing is not configured")
	}
	form := templates.ShareForm{Role: r.PostForm.Get("role"), Label: r.PostForm.Get("label"), ExpiresIn: r.PostForm.Get("expiresIn"),
		CanEdit: r.PostForm.Get("canEdit") != "", CanRemember: r.PostForm.Get("canRemember") != "", For: r.PostForm.Get("for")}
	rights := gate.Rights{Edit: form.CanEdit, Remember: form.CanRemember}
	_, _, err := s.cfg.Shares.CreateFor(r.Context(), id, share.Role(form.Role), form.Label, form.ExpiresIn, rights, form.For)
	if apperr.CodeOf(err) == apperr.Invalid {
		formErr = apperr.MessageOf(err)
	} else if err != nil {
		return err
	}
	v, err := s.sharesView(r.Context(), r, id, formErr)
	if err != nil {
		return err
	}
	if formErr != "" {
		// Refused: the form shows what was typed, to correct rather than retype.
		v.Form = form
	}
	st := http.StatusOK
	if formErr != "" {
		st = http.StatusBadRequest
	}
	s.render(w, r, st, templates.SharesPanel(v))
	return nil
}

func (s *Server) revokeShare(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if s.cfg.Shares == nil {
		return apperr.Errorf(apperr.NotFound, "Not found")
	}
	l, err := s.cfg.Shares.Revoke(r.Context(), id, r.PathValue("sid"))
	if err != nil {
		return err
	}
	s.closeSockets("link:" + l.ID)
	v, err := s.sharesView(r.Context(), r, id, "")
	if err != nil {
		return err
	}
	s.render(w, r, http.StatusOK, templates.SharesPanel(v))
	return nil
}

// apiShare is a share link as the API returns it (SPEC §12), with its rights.
type apiShare struct {
	ID          string     `json:"id"`
	URL         string     `json:"url"`
	Role        share.Role `json:"role"`
	Label       string     `json:"label"`
	ExpiresAt   *time.Time `json:"expiresAt"`
	CanEdit     bool       `json:"canEdit"`
	CanRemember bool       `json:"canRemember"`
	For         string     `json:"for,omitempty"`
}

// apiCreateShare makes a share link: {role, label?, expiresIn?, canEdit?, canRemember?, for?} →
// 201 apiShare. canEdit and canRemember (default false) are an approver link's rights; for
// ("alice") makes an approver link for that person, whose name is then fixed (SPEC §15; 400
// for a name share.NormalizeName refuses).
func (s *Server) apiCreateShare(w http.ResponseWriter, r *http.Request) error {
	var in struct {
		Role        share.Role `json:"role"`
		Label       string     `json:"label"`
		ExpiresIn   string     `json:"expiresIn"`
		CanEdit     bool       `json:"canEdit"`
		CanRemember bool       `json:"canRemember"`
		For         string     `json:"for"`
	}
	if err := decodeJSON(r, &in); err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, err := s.cfg.Store.Session(r.Context(), id); err != nil {
		return err
	}
	if s.cfg.Shares == nil {
		return apperr.Errorf(apperr.NotFound, "Sharing is not configured")
	}
	l, _, err := s.cfg.Shares.CreateFor(r.Context(), id, in.Role, in.Label, in.ExpiresIn, gate.Rights{Edit: in.CanEdit, Remember: in.CanRemember}, in.For)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, apiShare{ID: l.ID, URL: s.shareURL(r, l), Role: l.Role, Label: l.Label, ExpiresAt: l.ExpiresAt,
		CanEdit: l.CanEdit, CanRemember: l.CanRemember, For: l.For})
	return nil
}

func (s *Server) apiRevokeShare(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Shares == nil {
		return apperr.Errorf(apperr.NotFound, "Not found")
	}
	l, err := s.cfg.Shares.Revoke(r.Context(), "", r.PathValue("id"))
	if err != nil {
		return err
	}
	s.closeSockets("link:" + l.ID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
