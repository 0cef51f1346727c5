package testkit_test

import (
	"context"
	"slices"
	"testing"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/testkit"
)

// TestAnEnvRunsAScriptAndAStepsModelToTheEnd: a faux script given as JSON and a Steps model put
// under a name of its own each run a session to agent_end; the transcript is stored; the Steps
// model recorded its requests and refuses one past its last step.
func TestAnEnvRunsAScriptAndAStepsModelToTheEnd(t *testing.T) {
	env := testkit.New(t, testkit.Options{Scripts: map[string]string{
		"hi": `{"steps":[{"content":[{"type":"text","text":"Hi."}],"stopReason":"stop"}]}`}})
	m := testkit.Model(testkit.Say("one", nil))
	env.Scripts.Put("test:model", m)
	if got, want := env.Scripts.Names(), []string{"faux:hi", "test:model"}; !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	for _, model := range []string{"faux:hi", "test:model"} {
		sess := env.Session(model, model)
		sub := env.Broker.Subscribe(sess.ID)
		env.Send(sess.ID, "hello")
		var seen []agent.Event
		if end := testkit.Await(t, sub, agent.AgentEnd, 0, &seen); end.Error != "" {
			t.Errorf("%s: agent_end error %q", model, end.Error)
		}
		if len(seen) == 0 || seen[len(seen)-1].Type != agent.AgentEnd {
			t.Errorf("%s: seen does not end with the agent_end: %v", model, seen)
		}
		if es := env.Entries(sess.ID); len(es) != 2 {
			t.Errorf("%s: %d entries, want the user's and the answer", model, len(es))
		}
	}
	if n := len(m.Requests()); n != 1 {
		t.Errorf("the Steps model got %d requests, want 1", n)
	}
	if _, err := m.Stream(context.Background(), agent.Request{}, func(agent.Delta) {}); err == nil || err.Error() != "test model: no step left" {
		t.Errorf("a request past the last step: %v", err)
	}
	if _, err := env.Scripts.Model("faux:nope"); apperr.CodeOf(err) != apperr.Invalid {
		t.Errorf("an unknown model: %v, want an invalid error", err)
	}
}
