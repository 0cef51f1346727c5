package testkit

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/models"
	"countersign/internal/store/sqlite"
	"countersign/internal/tool"
)

// Options configure New. The zero value is a Runner with no tools and no models but what is
// added to Env.Scripts later, an approval timeout of one minute, over a fresh store.
type Options struct {
	// Tools are registered in Env.Tools, in order; a duplicate name fails the test.
	Tools []*tool.Tool
	// Scripts are faux scripts in the script file's JSON (models.ParseScript), by name: the
	// model "faux:<name>" replays each. A script that does not parse fails the test.
	Scripts map[string]string
	// Models, when set, is what the Runner is offered instead of Env.Scripts.
	Models agent.Models
	// Store, when set, wraps the store the Runner writes to (a spy, a failing store); Env.DB
	// stays the store itself.
	Store func(*sqlite.DB) agent.Store
	// Agent, when set, changes the Runner's configuration after New has filled Store, Models,
	// Tools, Broker and ApprovalTimeout (one minute), and before the Runner is made.
	Agent func(*agent.Config)
}

// Env is one test's environment: a store in a temporary folder, a Runner over it with the test's
// tools and models, and the Runner's Broker. New registers its teardown with tb.Cleanup: the
// Runner is shut down and waited for, then the store closed.
type Env struct {
	TB testing.TB
	// Dir is the temporary folder the store's file (test.db) is in.
	Dir string
	// Workspace is a second, empty temporary folder: the sessions' workspace (Session).
	Workspace string
	DB        *sqlite.DB
	Broker    *agent.Broker
	Runner    *agent.Runner
	Tools     *tool.Registry
	// Scripts is the model registry the Runner is offered unless Options.Models is set.
	Scripts *Scripts
}

// New builds an Env for tb; any failure fails the test at once.
func New(tb testing.TB, opt Options) *Env {
	tb.Helper()
	ctx := context.Background()
	e := &Env{TB: tb, Dir: tb.TempDir(), Workspace: tb.TempDir(), Broker: agent.NewBroker(),
		Tools: tool.NewRegistry(), Scripts: NewScripts()}
	db, err := sqlite.Open(ctx, filepath.Join(e.Dir, "test.db"))
	if err != nil {
		tb.Fatal(err)
	}
	e.DB = db
	tb.Cleanup(func() { db.Close() })
	for _, tl := range opt.Tools {
		if err := e.Tools.Register(tl); err != nil {
			tb.Fatal(err)
		}
	}
	for name, src := range opt.Scripts {
		e.Scripts.Add(name, Script(tb, src))
	}
	cfg := agent.Config{Store: db, Models: e.Scripts, Tools: e.Tools, Broker: e.Broker, ApprovalTimeout: time.Minute}
	if opt.Models != nil {
		cfg.Models = opt.Models
	}
	if opt.Store != nil {
		cfg.Store = opt.Store(db)
	}
	if opt.Agent != nil {
		opt.Agent(&cfg)
	}
	e.Runner = agent.New(cfg)
	tb.Cleanup(func() {
		e.Runner.Shutdown("test cleanup")
		e.Runner.Wait()
	})
	return e
}

// Replica is a second Runner over e's store (e.DB), e.Scripts and e.Tools with a Broker of its
// own and an approval timeout of one minute, as another server on the same database has (SPEC
// §16); configure, when set, changes its configuration (its Replicas, above all) before it is
// made. It is shut down and waited for when the test ends, before e's Runner and store.
func (e *Env) Replica(configure func(*agent.Config)) (*agent.Runner, *agent.Broker) {
	broker := agent.NewBroker()
	cfg := agent.Config{Store: e.DB, Models: e.Scripts, Tools: e.Tools, Broker: broker, ApprovalTimeout: time.Minute}
	if configure != nil {
		configure(&cfg)
	}
	r := agent.New(cfg)
	e.TB.Cleanup(func() {
		r.Shutdown("test cleanup")
		r.Wait()
	})
	return r, broker
}

// Script parses src, a script file's JSON (models.ParseScript); an error fails the test.
func Script(tb testing.TB, src string) *models.Script {
	tb.Helper()
	sc, err := models.ParseScript("test.json", []byte(src))
	if err != nil {
		tb.Fatal(err)
	}
	return sc
}

// Session creates a session titled title on the model named model, in e.Workspace.
func (e *Env) Session(title, model string) agent.Session {
	e.TB.Helper()
	s, err := e.Runner.CreateSession(context.Background(), title, model, e.Workspace)
	if err != nil {
		e.TB.Fatal(err)
	}
	return s
}

// Send starts a run of session id with the user's text.
func (e *Env) Send(id, text string) {
	e.TB.Helper()
	if err := e.Runner.Send(context.Background(), id, text); err != nil {
		e.TB.Fatal(err)
	}
}

// Entries is session id's transcript as stored.
func (e *Env) Entries(id string) []agent.Entry {
	e.TB.Helper()
	es, err := e.DB.Entries(context.Background(), id)
	if err != nil {
		e.TB.Fatal(err)
	}
	return es
}

// ToolResults is the toolResult messages of session id's transcript, in order.
func (e *Env) ToolResults(id string) []agent.Message {
	e.TB.Helper()
	var out []agent.Message
	for _, en := range e.Entries(id) {
		if en.Message.Role == agent.ToolResult {
			out = append(out, en.Message)
		}
	}
	return out
}
