package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// t0 is the tests' epoch: nanoseconds set, so a lossy time round trip shows.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

// MustOpenDB opens a fresh database file in a temporary folder, with a clock that starts at t0 and
// advances one second per reading, and closes it when the test ends.
func MustOpenDB(tb testing.TB) *DB {
	tb.Helper()
	return mustOpenPath(tb, filepath.Join(tb.TempDir(), "data", "countersign.db"))
}

func mustOpenPath(tb testing.TB, path string) *DB {
	tb.Helper()
	db, err := Open(context.Background(), path)
	if err != nil {
		tb.Fatalf("Open(%s): %v", path, err)
	}
	var mu sync.Mutex
	now := t0
	db.Now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return db
}

// migratedBefore makes a database file in a temporary folder with the embedded migrations
// applied and recorded up to, not including, the one whose name starts with first ("0011"), as a
// store of an older release left it; it returns the file's path and a raw handle to fill it with
// that release's rows (close it before opening the store on path).
func migratedBefore(t *testing.T, first string) (string, *sql.DB) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "old.db")
	raw, err := sql.Open("sqlite", "file:"+p+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	names, _ := fs.Glob(migrationFS, "migrations/*.sql")
	sort.Strings(names)
	if _, err := raw.Exec(`CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if path.Base(n) >= first {
			break
		}
		body, _ := migrationFS.ReadFile(n)
		if _, err := raw.Exec(string(body)); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if _, err := raw.Exec(`INSERT INTO migrations VALUES (?, '2025-01-01T00:00:00.000000000Z')`, path.Base(n)); err != nil {
			t.Fatal(err)
		}
	}
	return p, raw
}

// assertErr checks an error's code and user message.
func assertErr(t *testing.T, err error, code apperr.Code, msg string) {
	t.Helper()
	if got := apperr.CodeOf(err); got != code {
		t.Fatalf("code = %q (err %v), want %q", got, err, code)
	}
	if got := apperr.MessageOf(err); got != msg {
		t.Fatalf("message = %q, want %q", got, msg)
	}
}

func assertEqual[T any](t *testing.T, name string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %s\nwant %s", name, dump(got), dump(want))
	}
}

func dump(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	return string(b)
}

func mustCreateSession(t *testing.T, db *DB, s agent.Session) {
	t.Helper()
	if err := db.CreateSession(context.Background(), s); err != nil {
		t.Fatalf("CreateSession(%s): %v", s.ID, err)
	}
}

func session(id string, at time.Time) agent.Session {
	return agent.Session{ID: id, Title: "Title " + id, Model: "faux:demo", Workspace: "/work/" + id,
		State: agent.Idle, CreatedAt: at, Mode: gate.ModeDefault}
}

func TestSessions(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	sessions := []agent.Session{
		{ID: "s1", Title: "First", Model: "faux:demo", Workspace: "/tmp/w1", State: agent.Idle,
			CreatedAt: t0, Mode: gate.ModeDefault},
		{ID: "s2", Title: "Empty tool set", Model: "openai:gpt-4o", Workspace: "/tmp/w2", State: agent.Running,
			CreatedAt: t0.Add(time.Millisecond), ActiveTools: []string{}, Mode: gate.ModePlan},
		{ID: "s3", Title: "Some tools", Model: "faux:demo", Workspace: "/tmp/w3", State: agent.Idle,
			CreatedAt: t0.Add(time.Nanosecond), ActiveTools: []string{"write_file", "read_file"}, Mode: gate.ModeAcceptEdits},
	}
	for _, s := range sessions {
		mustCreateSession(t, db, s)
	}

	t.Run("round trip", func(t *testing.T) {
		for _, want := range sessions {
			got, err := db.Session(ctx, want.ID)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, want.ID, got, want)
		}
	})
	t.Run("newest first", func(t *testing.T) {
		got, err := db.Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "Sessions", got, []agent.Session{sessions[1], sessions[2], sessions[0]})
	})
	t.Run("in state", func(t *testing.T) {
		got, err := db.SessionsInState(ctx, agent.Running)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "SessionsInState", got, []agent.Session{sessions[1]})
	})
	t.Run("set state and tools", func(t *testing.T) {
		if err := db.SetSessionState(ctx, "s1", agent.Running); err != nil {
			t.Fatal(err)
		}
		if err := db.SetActiveTools(ctx, "s1", []string{"run_command"}); err != nil {
			t.Fatal(err)
		}
		if err := db.SetActiveTools(ctx, "s3", nil); err != nil {
			t.Fatal(err)
		}
		got, err := db.Session(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		want := sessions[0]
		want.State, want.ActiveTools = agent.Running, []string{"run_command"}
		assertEqual(t, "s1", got, want)
		got, err = db.Session(ctx, "s3")
		if err != nil {
			t.Fatal(err)
		}
		want = sessions[2]
		want.ActiveTools = nil
		assertEqual(t, "s3", got, want)
	})
	t.Run("zero CreatedAt and State are filled", func(t *testing.T) {
		mustCreateSession(t, db, agent.Session{ID: "s4", Title: "t", Model: "m", Workspace: "w"})
		got, err := db.Session(ctx, "s4")
		if err != nil {
			t.Fatal(err)
		}
		if got.CreatedAt.IsZero() || got.State != agent.Idle {
			t.Fatalf("got CreatedAt %v, State %q; want the clock's time and idle", got.CreatedAt, got.State)
		}
	})

	errTests := []struct {
		name string
		err  func() error
		code apperr.Code
		msg  string
	}{
		{"unknown session", func() error { _, err := db.Session(ctx, "nope"); return err },
			apperr.NotFound, "session nope not found"},
		{"duplicate id", func() error { return db.CreateSession(ctx, session("s1", t0)) },
			apperr.Conflict, "session s1 already exists"},
		{"empty id", func() error { return db.CreateSession(ctx, session("", t0)) },
			apperr.Invalid, "a session needs an id"},
		{"state of unknown session", func() error { return db.SetSessionState(ctx, "nope", agent.Idle) },
			apperr.NotFound, "session nope not found"},
		{"tools of unknown session", func() error { return db.SetActiveTools(ctx, "nope", nil) },
			apperr.NotFound, "session nope not found"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			assertErr(t, tt.err(), tt.code, tt.msg)
		})
	}
}

// transcript is one of each kind of message, tool result fields all set.
func transcript() []agent.Message {
	return []agent.Message{
		{ID: "m1", Role: agent.User, Content: []agent.Block{
			{Type: "text", Text: "List the files, then <b>delete</b> tmp & logs."},
			{Type: "image", Data: "iVBORw0KGgo=", MimeType: "image/png"},
		}, Timestamp: t0},
		{ID: "m2", Role: agent.Assistant, Model: "faux:demo", StopReason: agent.ToolUse, Content: []agent.Block{
			{Type: "text", Text: "Listing."},
			{Type: "toolCall", ID: "call_1", Name: "run_js", Arguments: json.RawMessage(`{"code":"1+1"}`)},
		}, Timestamp: t0.Add(time.Second)},
		{ID: "m3", Role: agent.ToolResult, ToolCallID: "call_1", ToolName: "run_js", Result: &tool.Result{
			Content:           []tool.Content{tool.Text("partial"), {Type: "image", Data: "AAAA", MimeType: "image/png"}},
			StructuredContent: json.RawMessage(`{"files":["a.txt","b.txt"],"count":2}`),
			IsError:           true,
			Details:           json.RawMessage(`{"stderr":"boom","exitCode":1}`),
			DurationMs:        1234,
			NestedCalls: &tool.NestedCalls{Complete: false, Calls: []tool.NestedCall{
				{ID: "n1", Name: "list_files", Arguments: json.RawMessage(`{"path":"."}`), Status: "ok", DurationMs: 3},
				{ID: "n2", Name: "delete_file", Status: "denied", DurationMs: 0, Error: "Denied by ana: no"},
			}},
			ContractViolation: &tool.ContractViolation{
				Violations:        []tool.Violation{},
				Content:           []tool.Content{tool.Text("raw")},
				StructuredContent: json.RawMessage(`{"x":1}`),
			},
		}, Timestamp: t0.Add(2 * time.Second)},
		{ID: "m4", Role: agent.Assistant, StopReason: agent.Error, ErrorMessage: "provider failed",
			Timestamp: t0.Add(3 * time.Second)},
	}
}

func TestEntries(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))
	mustCreateSession(t, db, session("s2", t0))

	var want []agent.Entry
	for i, m := range transcript() {
		got, err := db.AppendEntry(ctx, "s1", m)
		if err != nil {
			t.Fatal(err)
		}
		e := agent.Entry{Seq: int64(i + 1), SessionID: "s1", Message: m}
		assertEqual(t, "AppendEntry", got, e)
		want = append(want, e)
	}
	got, err := db.Entries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Entries", got, want)

	// Seq counts per session.
	e, err := db.AppendEntry(ctx, "s2", transcript()[0])
	if err != nil {
		t.Fatal(err)
	}
	if e.Seq != 1 {
		t.Fatalf("first entry of s2: Seq = %d, want 1", e.Seq)
	}

	_, err = db.AppendEntry(ctx, "nope", transcript()[0])
	assertErr(t, err, apperr.NotFound, "session nope not found")
	got, err = db.Entries(ctx, "nope")
	if err != nil || len(got) != 0 {
		t.Fatalf("Entries(nope) = %v, %v; want none", got, err)
	}
}

func TestAppendEntryConcurrent(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))
	const n = 50
	var wg sync.WaitGroup
	seqs := make(chan int64, n)
	for i := range n {
		wg.Go(func() {
			e, err := db.AppendEntry(ctx, "s1", agent.Message{ID: fmt.Sprint(i), Role: agent.User, Timestamp: t0})
			if err != nil {
				t.Error(err)
				return
			}
			seqs <- e.Seq
		})
	}
	wg.Wait()
	close(seqs)
	seen := map[int64]bool{}
	for s := range seqs {
		if seen[s] || s < 1 || s > n {
			t.Fatalf("Seq %d duplicated or out of 1..%d", s, n)
		}
		seen[s] = true
	}
	entries, err := db.Entries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != n {
		t.Fatalf("len(Entries) = %d, want %d", len(entries), n)
	}
}

// approvals are one pending and several decided approvals, every field set somewhere, with
// annotations absent, false, true and mixed.
func approvals() []gate.Approval {
	decided := t0.Add(90 * time.Second)
	return []gate.Approval{
		{ID: "a1", SessionID: "s1", MessageID: "m2", ToolCallID: "call_1", ToolName: "run_command",
			ToolTitle: "Run a command", Arguments: json.RawMessage(`{"command": "rm -rf tmp"}`),
			Annotations: tool.Annotations{}, RequestedBy: "model", Status: gate.Pending, CreatedAt: t0,
			AskReason: "it is not marked read-only, and destructiveHint defaults to true"},
		{ID: "a2", SessionID: "s1", MessageID: "m2", ToolCallID: "n1", ParentToolCallID: "call_2",
			ToolName: "write_file", Arguments: json.RawMessage(`{"path":"a.txt","content":"x"}`),
			EditedArguments: json.RawMessage(`{"path":"b.txt","content":"x"}`),
			Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(false), DestructiveHint: tool.Bool(false),
				IdempotentHint: tool.Bool(false), OpenWorldHint: tool.Bool(false)},
			RequestedBy: "run_js", Status: gate.Approved, DecidedBy: "ana", Reason: "looks fine",
			Scope: gate.Session, CreatedAt: t0.Add(time.Millisecond), DecidedAt: &decided},
		{ID: "a3", SessionID: "s1", MessageID: "m5", ToolCallID: "call_3", ToolName: "fetch",
			Arguments: json.RawMessage(`{}`),
			Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(true), DestructiveHint: tool.Bool(true),
				IdempotentHint: tool.Bool(true), OpenWorldHint: tool.Bool(true)},
			RequestedBy: "model", Status: gate.Approved, Automatic: true, DecidedBy: "policy",
			Scope: gate.Once, CreatedAt: t0.Add(2 * time.Millisecond), DecidedAt: &decided},
		{ID: "a4", SessionID: "s2", MessageID: "m9", ToolCallID: "call_9", ToolName: "run_command",
			Arguments:   json.RawMessage(`{"command":"ls"}`),
			Annotations: tool.Annotations{ReadOnlyHint: tool.Bool(false), OpenWorldHint: tool.Bool(true)},
			RequestedBy: "model", Status: gate.Pending, CreatedAt: t0.Add(-time.Hour)},
		{ID: "a5", SessionID: "s1", MessageID: "m6", ToolCallID: "call_4", ToolName: "run_command",
			Annotations: tool.Annotations{DestructiveHint: tool.Bool(false)},
			RequestedBy: "model", Status: gate.Denied, Automatic: true, DecidedBy: "handler",
			Reason: "Tool execution was blocked", CreatedAt: t0.Add(3 * time.Millisecond), DecidedAt: &decided},
	}
}

func mustCreateApprovals(t *testing.T, db *DB, as ...gate.Approval) {
	t.Helper()
	for _, a := range as {
		if err := db.CreateApproval(context.Background(), a); err != nil {
			t.Fatalf("CreateApproval(%s): %v", a.ID, err)
		}
	}
}

func TestApprovals(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))
	mustCreateSession(t, db, session("s2", t0))
	as := approvals()
	mustCreateApprovals(t, db, as...)

	for _, want := range as {
		t.Run("round trip "+want.ID, func(t *testing.T) {
			got, err := db.Approval(ctx, want.ID)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, want.ID, got, want)
		})
	}
	t.Run("annotations keep nil apart from false", func(t *testing.T) {
		got, err := db.Approval(ctx, "a5")
		if err != nil {
			t.Fatal(err)
		}
		if got.Annotations.ReadOnlyHint != nil || got.Annotations.DestructiveHint == nil || *got.Annotations.DestructiveHint {
			t.Fatalf("annotations = %s, want only destructiveHint false", dump(got.Annotations))
		}
	})

	lists := []struct {
		name      string
		sessionID string
		status    gate.Status
		want      []gate.Approval
	}{
		{"every status", "s1", "", []gate.Approval{as[0], as[1], as[2], as[4]}},
		{"pending", "s1", gate.Pending, []gate.Approval{as[0]}},
		{"approved", "s1", gate.Approved, []gate.Approval{as[1], as[2]}},
		{"other session", "s2", "", []gate.Approval{as[3]}},
		{"none", "s2", gate.Denied, nil},
		{"unknown session", "nope", "", nil},
	}
	for _, tt := range lists {
		t.Run("list "+tt.name, func(t *testing.T) {
			got, err := db.Approvals(ctx, tt.sessionID, tt.status)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, "Approvals", got, tt.want)
		})
	}
	t.Run("pending across sessions", func(t *testing.T) {
		got, err := db.PendingApprovals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "PendingApprovals", got, []gate.Approval{as[3], as[0]})
	})

	bad := as[0]
	bad.ID = "bad"
	bad.Status = "maybe"
	badJSON := as[0]
	badJSON.ID, badJSON.Arguments = "badjson", json.RawMessage(`{"command":`)
	orphan := as[0]
	orphan.ID, orphan.SessionID = "orphan", "nope"
	errTests := []struct {
		name string
		err  func() error
		code apperr.Code
		msg  string
	}{
		{"unknown approval", func() error { _, err := db.Approval(ctx, "nope"); return err },
			apperr.NotFound, "approval nope not found"},
		{"duplicate id", func() error { return db.CreateApproval(ctx, as[0]) },
			apperr.Conflict, "approval a1 already exists"},
		{"unknown session", func() error { return db.CreateApproval(ctx, orphan) },
			apperr.NotFound, "session nope not found"},
		{"unknown status", func() error { return db.CreateApproval(ctx, bad) },
			apperr.Invalid, `approval bad cannot be stored: invalid JSON arguments, status "maybe" or scope ""`},
		{"invalid JSON", func() error { return db.CreateApproval(ctx, badJSON) },
			apperr.Invalid, `approval badjson cannot be stored: invalid JSON arguments, status "pending" or scope ""`},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			assertErr(t, tt.err(), tt.code, tt.msg)
		})
	}
}

func TestResolveApproval(t *testing.T) {
	ctx := context.Background()
	at := t0.Add(time.Minute)
	tests := []struct {
		name string
		r    gate.Resolution
		want func(a gate.Approval) gate.Approval
	}{
		{"approve once", gate.Resolution{Status: gate.Approved, DecidedBy: "ana", Scope: gate.Once, At: at},
			func(a gate.Approval) gate.Approval {
				a.Status, a.DecidedBy, a.Scope, a.DecidedAt = gate.Approved, "ana", gate.Once, &at
				return a
			}},
		{"approve edited for the session", gate.Resolution{Status: gate.Approved, DecidedBy: "ana", Scope: gate.Session,
			EditedArguments: json.RawMessage(`{"command": "rm -rf tmp/cache"}`), At: at},
			func(a gate.Approval) gate.Approval {
				a.Status, a.DecidedBy, a.Scope, a.DecidedAt = gate.Approved, "ana", gate.Session, &at
				a.EditedArguments = json.RawMessage(`{"command": "rm -rf tmp/cache"}`)
				return a
			}},
		{"deny with reason", gate.Resolution{Status: gate.Denied, DecidedBy: "bob", Reason: "too broad", At: at},
			func(a gate.Approval) gate.Approval {
				a.Status, a.DecidedBy, a.Reason, a.DecidedAt = gate.Denied, "bob", "too broad", &at
				return a
			}},
		{"time out", gate.Resolution{Status: gate.TimedOut, DecidedBy: "timeout", Automatic: true,
			Reason: "no decision within 15m0s", At: at},
			func(a gate.Approval) gate.Approval {
				a.Status, a.DecidedBy, a.Automatic, a.Reason, a.DecidedAt = gate.TimedOut, "timeout", true,
					"no decision within 15m0s", &at
				return a
			}},
		{"zero At uses the clock", gate.Resolution{Status: gate.Cancelled, DecidedBy: "system", Automatic: true,
			Reason: "Interrupted by server restart"},
			func(a gate.Approval) gate.Approval {
				decided := t0.Add(time.Second) // the clock's first reading in a fresh database
				a.Status, a.DecidedBy, a.Automatic, a.Reason, a.DecidedAt = gate.Cancelled, "system", true,
					"Interrupted by server restart", &decided
				return a
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := MustOpenDB(t)
			mustCreateSession(t, db, session("s1", t0))
			pending := approvals()[0]
			mustCreateApprovals(t, db, pending)
			want := tt.want(pending)

			got, err := db.ResolveApproval(ctx, pending.ID, tt.r)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, "ResolveApproval", got, want)
			got, err = db.Approval(ctx, pending.ID)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, "Approval after", got, want)

			// A second decision loses and changes nothing.
			_, err = db.ResolveApproval(ctx, pending.ID, gate.Resolution{Status: gate.Denied, DecidedBy: "eve", At: at})
			assertErr(t, err, apperr.Conflict, "approval already resolved")
			got, err = db.Approval(ctx, pending.ID)
			if err != nil {
				t.Fatal(err)
			}
			assertEqual(t, "Approval after the losing decision", got, want)
		})
	}

	errTests := []struct {
		name string
		id   string
		r    gate.Resolution
		code apperr.Code
		msg  string
	}{
		{"unknown id", "nope", gate.Resolution{Status: gate.Approved}, apperr.NotFound, "approval nope not found"},
		{"already decided", "a2", gate.Resolution{Status: gate.Approved}, apperr.Conflict, "approval already resolved"},
		{"pending is no decision", "a1", gate.Resolution{Status: gate.Pending}, apperr.Invalid,
			`a decision must resolve the approval, not set it "pending"`},
		{"unknown scope", "a1", gate.Resolution{Status: gate.Approved, Scope: "forever"}, apperr.Invalid,
			`decision cannot be stored: invalid JSON edited arguments or scope "forever"`},
	}
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))
	mustCreateApprovals(t, db, approvals()[:2]...)
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := db.ResolveApproval(ctx, tt.id, tt.r)
			assertErr(t, err, tt.code, tt.msg)
		})
	}
	// The refused decisions left a1 pending.
	got, err := db.Approval(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "a1", got, approvals()[0])
}

// TestResolveApprovalRace has two deciders race for each of many pending approvals: exactly one
// wins, the other gets apperr.Conflict, and the store holds the winner's decision.
func TestResolveApprovalRace(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))
	for i := range 100 {
		a := approvals()[0]
		a.ID = fmt.Sprintf("race%03d", i)
		mustCreateApprovals(t, db, a)

		deciders := []gate.Resolution{
			{Status: gate.Approved, DecidedBy: "ana", Scope: gate.Once, At: t0},
			{Status: gate.Denied, DecidedBy: "bob", Reason: "no", At: t0},
		}
		results := make([]gate.Approval, len(deciders))
		errs := make([]error, len(deciders))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j, r := range deciders {
			wg.Go(func() {
				<-start
				results[j], errs[j] = db.ResolveApproval(ctx, a.ID, r)
			})
		}
		close(start)
		wg.Wait()

		var winner gate.Approval
		wins := 0
		for j, err := range errs {
			switch apperr.CodeOf(err) {
			case "":
				wins++
				winner = results[j]
			case apperr.Conflict:
			default:
				t.Fatalf("%s: decider %d: %v", a.ID, j, err)
			}
		}
		if wins != 1 {
			t.Fatalf("%s: %d decisions won, want exactly 1 (errors %v)", a.ID, wins, errs)
		}
		got, err := db.Approval(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, a.ID, got, winner)
	}
}

// TestReopen simulates a restart: everything committed before Close is there after Open.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "countersign.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s := session("s1", t0)
	s.State, s.ActiveTools = agent.Running, []string{"run_command"}
	as := approvals()
	var entries []agent.Entry
	func() {
		defer db.Close()
		mustCreateSession(t, db, s)
		mustCreateSession(t, db, session("s2", t0))
		mustCreateApprovals(t, db, as...)
		for _, m := range transcript() {
			e, err := db.AppendEntry(ctx, "s1", m)
			if err != nil {
				t.Fatal(err)
			}
			entries = append(entries, e)
		}
	}()

	db = mustOpenPath(t, path)
	got, err := db.Session(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	// Stored running with a pending approval: it reads back as waiting, with the count.
	want := s
	want.State, want.PendingApprovals = agent.Waiting, 1
	assertEqual(t, "Session", got, want)
	running, err := db.SessionsInState(ctx, agent.Running)
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "SessionsInState(running)", running, []agent.Session{want})
	gotEntries, err := db.Entries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Entries", gotEntries, entries)
	pending, err := db.PendingApprovals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "PendingApprovals", pending, []gate.Approval{as[3], as[0]})
	all, err := db.Approvals(ctx, "s1", "")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Approvals", all, []gate.Approval{as[0], as[1], as[2], as[4]})

	// A parked approval can still be decided after the restart, and the next entry follows on.
	if _, err := db.ResolveApproval(ctx, "a1", gate.Resolution{Status: gate.Approved, DecidedBy: "ana", At: t0}); err != nil {
		t.Fatal(err)
	}
	e, err := db.AppendEntry(ctx, "s1", transcript()[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(entries) + 1); e.Seq != want {
		t.Fatalf("Seq after restart = %d, want %d", e.Seq, want)
	}
}

// TestMigrateTwice checks that migrating an up-to-date database changes nothing, whether by
// calling migrate again or by opening the file again.
func TestMigrateTwice(t *testing.T) {
	ctx := context.Background()
	db := MustOpenDB(t)
	mustCreateSession(t, db, session("s1", t0))

	names := func(db *DB) []string {
		t.Helper()
		rows, err := db.read.QueryContext(ctx, `SELECT name FROM migrations ORDER BY name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			names = append(names, n)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return names
	}
	want := names(db)
	if len(want) == 0 || want[0] != "0001_init.sql" {
		t.Fatalf("migrations = %v, want 0001_init.sql first", want)
	}

	if err := db.migrate(ctx); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	assertEqual(t, "migrations after migrate", names(db), want)

	again := mustOpenPath(t, db.Path())
	assertEqual(t, "migrations after reopening", names(again), want)
	got, err := again.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "Sessions", got, []agent.Session{session("s1", t0)})
}

// TestOpenOddPath checks that the path is escaped into the file: URI, so characters that mean
// something in a URI still name the file.
func TestOpenOddPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a dir?x=1#frag%20")
	db := mustOpenPath(t, filepath.Join(dir, "my db.sqlite"))
	mustCreateSession(t, db, session("s1", t0))
	if _, err := os.Stat(filepath.Join(dir, "my db.sqlite")); err != nil {
		t.Fatalf("database file not where asked: %v", err)
	}
}

func TestOpenRefusesMemory(t *testing.T) {
	if _, err := Open(context.Background(), ":memory:"); err == nil {
		t.Fatal("Open(:memory:) succeeded, want an error")
	}
}

// TestReadPoolIsReadOnly checks the guard that keeps the read pool from becoming a second writer.
func TestReadPoolIsReadOnly(t *testing.T) {
	db := MustOpenDB(t)
	_, err := db.read.ExecContext(context.Background(), `DELETE FROM sessions`)
	if err == nil {
		t.Fatal("a write through the read pool succeeded")
	}
}

// TestPendingLookupsUseThePartialIndex: automatic records are stored decided, so only pending
// approvals are indexed by status (migration 0004); the two lookups by pending status must use
// that index, not scan the session's approvals or the whole table.
func TestPendingLookupsUseThePartialIndex(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	for _, q := range []string{
		`SELECT ` + approvalColumns + ` FROM approvals WHERE session_id = 's' AND status = 'pending' ORDER BY created_at, rowid`,
		`SELECT ` + approvalColumns + ` FROM approvals WHERE status = 'pending' ORDER BY created_at, rowid`,
		selectSession + ` WHERE id = 's'`, // a session's pending count
	} {
		rows, err := db.read.QueryContext(ctx, `EXPLAIN QUERY PLAN `+q)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if !strings.Contains(strings.Join(plan, "; "), "approvals_pending") {
			t.Errorf("plan of %q = %q, want it to use approvals_pending", q, plan)
		}
	}
}
