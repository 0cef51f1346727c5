package web_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/testkit"
	"countersign/internal/web"
)

// failingModel streams some text, then fails as a provider does (a 429, a cut stream).
type failingModel struct{}

func (failingModel) Stream(_ context.Context, _ agent.Request, onDelta func(agent.Delta)) (agent.Message, error) {
	onDelta(agent.Delta{Text: "half a sent"})
	return agent.Message{}, errors.New("openai: 429 Too Many Requests: Rate limit reached")
}

type failingModels struct{}

func (failingModels) Model(string) (agent.Model, error) { return failingModel{}, nil }
func (failingModels) Names() []string                   { return []string{"openai:test"} }

// TestProviderErrorEndsTheRunWithItsMessage: a provider error ends the run with the provider's
// message shown, and nothing half-written is stored.
func TestProviderErrorEndsTheRunWithItsMessage(t *testing.T) {
	ctx := context.Background()
	env := testkit.New(t, testkit.Options{Models: failingModels{}})
	r, db, broker := env.Runner, env.DB, env.Broker
	srv := web.New(web.Config{Runner: r, Store: db, Broker: broker, Models: failingModels{}, OwnerToken: token, Workspace: t.TempDir()})
	sess := env.Session("p", "openai:test")
	sub := broker.Subscribe(sess.ID)
	env.Send(sess.ID, "hello")
	end := testkit.Await(t, sub, agent.AgentEnd, 0, nil)
	if !strings.Contains(end.Error, "429 Too Many Requests") {
		t.Errorf("agent_end error %q", end.Error)
	}
	es, _ := db.Entries(ctx, sess.ID)
	if len(es) != 2 {
		t.Fatalf("%d entries, want the user message and the error", len(es))
	}
	m := es[1].Message
	if m.StopReason != agent.Error || len(m.Content) != 0 || !strings.Contains(m.ErrorMessage, "Rate limit reached") {
		t.Errorf("stored %+v: want stopReason error, no content, the provider's message", m)
	}
	ts := newHTTPTest(t, srv.Handler())
	req, _ := http.NewRequest("GET", ts+"/sessions/"+sess.ID, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), "The model failed: openai: 429 Too Many Requests: Rate limit reached") || strings.Contains(string(body), "half a sent") {
		t.Errorf("the page does not show the provider's error (or shows the half-written text)")
	}
	// The session takes new messages.
	if err := r.Send(ctx, sess.ID, "again"); err != nil {
		t.Errorf("Send after a provider error: %v", err)
	}
}

func newHTTPTest(t *testing.T, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}
