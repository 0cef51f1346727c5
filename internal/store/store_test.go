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
