package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"
	"time"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/store"
	"countersign/internal/store/storetest"
	"countersign/internal/tool"
)

// TestGroupedAuditMigrationKeepsEveryRow: a database from before 0012 keeps its approvals, each an
// ordinary record (count 0: it stands for one call, no last_at); 0012 is applied by its name
// whatever other migrations are recorded.
func TestGroupedAuditMigrationKeepsEveryRow(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	mustCreateSession(t, db, session("s1", t0))
	mustCreateSession(t, db, session("s2", t0))
	want := approvals()
	mustCreateApprovals(t, db, want...)
	for _, q := range []string{
		`ALTER TABLE approvals DROP COLUMN count`,
		`ALTER TABLE approvals DROP COLUMN last_at`,
		`DELETE FROM migrations WHERE name = '0012_grouped_audit.sql'`,
	} {
		if _, err := db.write.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		got, err := db.Approval(ctx, w.ID)
		if err != nil {
			t.Fatal(err)
		}
		assertEqual(t, "approval "+w.ID+" after 0012", got, w)
		if got.Calls() != 1 {
			t.Errorf("%s stands for %d calls, want 1", w.ID, got.Calls())
		}
	}
}

// TestCheckpointsRunInTheBackground: with commits no longer paying for checkpoints, the WAL is
// still copied into the database file, and Close stops the checkpointer.
func TestCheckpointsRunInTheBackground(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	before, err := os.Stat(db.Path())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := db.AppendEntry(ctx, "s1", agent.Message{ID: "m", Role: agent.User,
			Content: []agent.Block{{Type: "text", Text: string(make([]byte, 2000)) + string(rune('a'+i%26))}}}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * checkpointInterval)
	for {
		fi, err := os.Stat(db.Path())
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > before.Size()+100_000 {
			break // the entries reached the database file
		}
		if time.Now().After(deadline) {
			t.Fatalf("database file still %d bytes (was %d) after %v: no checkpoint ran", fi.Size(), before.Size(), 10*checkpointInterval)
		}
		time.Sleep(checkpointInterval / 5)
	}
}

// BenchmarkCreateApprovals: automatic records of nested calls written in batches of 128, as the
// agent's audit writer did before issue 19 (and still does for blocked and denied calls); ns/op
// is one record. "rule" records name the rule that decided them (SPEC §14, issue 17's rules bench
// case), "annotations" the annotation default. "grouped" is what the writer stores for allowed
// calls since issue 19: per 128 calls of one parent and tool, one grouped record counting them,
// merged into the group's row; ns/op is one call.
func BenchmarkCreateApprovals(b *testing.B) {
	b.Run("annotations", func(b *testing.B) { benchCreateApprovals(b, false) })
	b.Run("rule", func(b *testing.B) { benchCreateApprovals(b, true) })
	b.Run("grouped", benchCreateGroupedApprovals)
}

func benchCreateGroupedApprovals(b *testing.B) {
	db := MustOpenDB(b)
	ctx := context.Background()
	if err := db.CreateSession(ctx, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"}); err != nil {
		b.Fatal(err)
	}
	yes := true
	now := time.Now().UTC()
	stored := 0
	b.ResetTimer()
	for stored < b.N {
		count := min(128, b.N-stored)
		last := now.Add(time.Duration(stored+count) * time.Microsecond)
		g := gate.Approval{ID: "G0000000000000000000000000", SessionID: "s1", MessageID: "m1",
			ToolCallID: fmt.Sprintf("c1/%d", stored+1), ParentToolCallID: "c1", ToolName: "run_checks", ToolTitle: "Run checks",
			Arguments: []byte(`{}`), Annotations: tool.Annotations{ReadOnlyHint: &yes}, RequestedBy: "review_diff",
			Status: gate.Approved, Automatic: true, DecidedBy: "policy", Reason: "annotations allow it without approval",
			CreatedAt: now, DecidedAt: &now, DecisionSource: gate.FromAnnotations, Mode: gate.ModeDefault,
			Count: count, LastAt: &last}
		if err := db.CreateApprovals(ctx, []gate.Approval{g}); err != nil {
			b.Fatal(err)
		}
		stored += count
	}
}

func benchCreateApprovals(b *testing.B, byRule bool) {
	db := MustOpenDB(b)
	ctx := context.Background()
	if err := db.CreateSession(ctx, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"}); err != nil {
		b.Fatal(err)
	}
	yes := true
	now := time.Now().UTC()
	batch := make([]gate.Approval, 0, 128)
	flush := func() {
		if err := db.CreateApprovals(ctx, batch); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	b.ResetTimer()
	for i := range b.N {
		batch = append(batch, gate.Approval{ID: fmt.Sprintf("%013d%013d", i, i), SessionID: "s1", MessageID: "m1",
			ToolCallID: fmt.Sprintf("c1/%d", i), ParentToolCallID: "c1", ToolName: "run_checks", ToolTitle: "Run checks",
			Arguments: []byte(`{}`), Annotations: tool.Annotations{ReadOnlyHint: &yes}, RequestedBy: "review_diff",
			Status: gate.Approved, Automatic: true, DecidedBy: "policy", Reason: "annotations allow it without approval",
			CreatedAt: now, DecidedAt: &now, DecisionSource: gate.FromAnnotations, Mode: gate.ModeDefault})
		if byRule {
			a := &batch[len(batch)-1]
			a.DecidedBy, a.Reason, a.DecisionSource = gate.ByRule, "rule run_checks allows the call", gate.FromRule
			a.RuleID, a.RuleText, a.RuleSource = "policy:9", "run_checks", gate.SourcePolicyFile
		}
		if len(batch) == cap(batch) {
			flush()
		}
	}
	flush()
}

// TestEntriesMigrateToWithoutRowid: migration 0005 moves a transcript stored by 0001's rowid table
// into the WITHOUT ROWID table, entry for entry, and appends go on from the last seq.
func TestEntriesMigrateToWithoutRowid(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	var want []agent.Entry
	for _, text := range []string{"first", "second"} {
		e, err := db.AppendEntry(ctx, "s1", agent.Message{ID: text, Role: agent.User, Content: []agent.Block{{Type: "text", Text: text}}})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, e)
	}
	// Back to the table as 0001 made it, with the same rows, and 0005 not applied.
	for _, q := range []string{
		`ALTER TABLE entries RENAME TO entries_v5`,
		`CREATE TABLE entries (
			session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE, seq INTEGER NOT NULL,
			role TEXT NOT NULL, tool_call_id TEXT NOT NULL DEFAULT '', message TEXT NOT NULL CHECK (json_valid(message)),
			created_at TEXT NOT NULL, PRIMARY KEY (session_id, seq))`,
		`INSERT INTO entries SELECT * FROM entries_v5`,
		`DROP TABLE entries_v5`,
		`DELETE FROM migrations WHERE name = '0005_entries_without_rowid.sql'`,
	} {
		if _, err := db.write.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := db.read.ExecContext(ctx, `SELECT rowid FROM entries`); err != nil {
		t.Fatalf("the 0001 table has no rowid: %v", err)
	}
	if err := db.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.read.ExecContext(ctx, `SELECT rowid FROM entries`); err == nil {
		t.Error("entries still has a rowid after 0005")
	}
	got, err := db.Entries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	assertEqual(t, "entries after 0005", got, want)
	if e, err := db.AppendEntry(ctx, "s1", agent.Message{ID: "third", Role: agent.User}); err != nil || e.Seq != 3 {
		t.Fatalf("append after 0005 = seq %d, %v; want seq 3", e.Seq, err)
	}
}

// TestCreateApprovalsKeepsEveryTextByteForByte: a batch travels to SQLite as one JSON text; every
// column comes back exactly as CreateApproval stores it one row at a time, for texts JSON has to
// escape, texts it cannot carry (invalid UTF-8, NUL: that batch goes a row at a time), nil and set
// JSON arguments, absent and false hints, and NULL times.
func TestCreateApprovalsKeepsEveryTextByteForByte(t *testing.T) {
	ctx := context.Background()
	yes, no := true, false
	created := time.Date(2026, 11, 30, 5, 1, 2, 123456789, time.UTC)
	decided := created.Add(time.Second)
	mk := func(id string) gate.Approval {
		return gate.Approval{ID: id, SessionID: "s1", MessageID: "m\"1\\", ToolCallID: "c1/" + id, ParentToolCallID: "c1",
			ToolName: "tool\twith\ttabs", ToolTitle: "Ti\u2028tle é 🙂 \x01\x1f", Arguments: []byte(`{ "cmd" : "echo \"a\\b\"\n", "n": 1.50 }`),
			Annotations: tool.Annotations{ReadOnlyHint: &yes, OpenWorldHint: &no}, RequestedBy: "review_diff",
			Status: gate.Approved, Automatic: true, DecidedBy: "policy", Reason: "line one\r\nline two </script>",
			Scope: gate.Once, CreatedAt: created, DecidedAt: &decided, DerivedFrom: "parent-approval",
			AskReason: "server \"fs\" is not trusted\n é"}
	}
	plain := mk("a1")
	bare := gate.Approval{ID: "a2", SessionID: "s1", MessageID: "m", ToolCallID: "c2", ToolName: "t", RequestedBy: "model",
		Status: gate.Pending, CreatedAt: created}
	edited := mk("a3")
	edited.EditedArguments = []byte(`{"cmd":"ls"}`)
	edited.Automatic = false
	empty := mk("a4")
	empty.Arguments = []byte(`{}`)
	empty.Annotations = tool.Annotations{}
	nul := mk("b1")
	nul.Reason = "a\x00b"
	invalid := mk("b2")
	invalid.ToolTitle = "bad \xff byte"
	grouped := mk("a5")
	last := decided.Add(time.Hour)
	grouped.Count, grouped.LastAt = 1000, &last

	for _, tc := range []struct {
		batch   []gate.Approval
		viaJSON bool
	}{
		{[]gate.Approval{plain, bare, edited, grouped, empty}, true},
		{[]gate.Approval{mk("c1"), nul, mk("c2")}, false},
		{[]gate.Approval{mk("d1"), invalid}, false},
	} {
		batch := tc.batch
		one, many := MustOpenDB(t), MustOpenDB(t)
		if ok, err := many.ApprovalsJSON(batch); err != nil || ok != tc.viaJSON {
			t.Fatalf("batch %s goes through JSON: %v (%v), want %v", batch[0].ID, ok, err, tc.viaJSON)
		}
		for _, db := range []*DB{one, many} {
			mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
		}
		for _, a := range batch {
			if err := one.CreateApproval(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		if err := many.CreateApprovals(ctx, batch); err != nil {
			t.Fatal(err)
		}
		want, got := dumpApprovals(t, one), dumpApprovals(t, many)
		if len(got) != len(batch) || !reflect.DeepEqual(got, want) {
			t.Fatalf("stored in a batch:\n%q\nstored one at a time:\n%q", got, want)
		}
	}
}

// dumpApprovals reads every approval row's columns as SQLite holds them (type and bytes).
func dumpApprovals(t *testing.T, db *DB) [][]string {
	t.Helper()
	rows, err := db.read.Query(`SELECT * FROM approvals ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = fmt.Sprintf("%T %v", v, v)
			if b, ok := v.([]byte); ok {
				row[i] = fmt.Sprintf("%T %q", v, b)
			} else if s, ok := v.(string); ok {
				row[i] = fmt.Sprintf("%T %q", v, s)
			}
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCreateApprovalsRoundTripsRandomTexts: random valid UTF-8 texts (control characters, quote
// and backslash, DEL, C1 controls, U+2028, noncharacters, U+10FFFF) stored in a batch come back
// as CreateApproval stores them one at a time, and in the batch's order.
func TestCreateApprovalsRoundTripsRandomTexts(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	runes := []rune{1, 2, 0x1f, 0x20, '"', '\\', '/', 0x7f, 0x80, 0x9f, 0xa0, 0x2028, 0xd7ff, 0xe000, 0xfeff, 0xfffe, 0xffff, 0x10000, 0x10ffff, 'u', 'é', '{'}
	text := func() string {
		var b []rune
		for range r.IntN(12) {
			if r.IntN(3) == 0 {
				b = append(b, rune(1+r.IntN(0x7e)))
			} else {
				b = append(b, runes[r.IntN(len(runes))])
			}
		}
		return string(b)
	}
	for round := range 20 {
		one, many := MustOpenDB(t), MustOpenDB(t)
		for _, db := range []*DB{one, many} {
			mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
		}
		var batch []gate.Approval
		for i := range 30 {
			args, err := json.Marshal(text())
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, gate.Approval{ID: fmt.Sprintf("%d-%02d-%s", round, i, text()), SessionID: "s1", MessageID: text(),
				ToolCallID: text(), ParentToolCallID: text(), ToolName: text(), ToolTitle: text(), RequestedBy: text(),
				Status: gate.Approved, Automatic: r.IntN(2) == 0, DecidedBy: text(), Reason: text(), Scope: gate.Once,
				DerivedFrom: text(), AskReason: text(), Arguments: args, CreatedAt: t0})
		}
		if ok, err := many.ApprovalsJSON(batch); err != nil || !ok {
			t.Fatalf("round %d does not go through JSON: %v %v", round, ok, err)
		}
		for _, a := range batch {
			if err := one.CreateApproval(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		if err := many.CreateApprovals(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if got, want := dumpApprovals(t, many), dumpApprovals(t, one); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: stored in a batch:\n%q\none at a time:\n%q", round, got, want)
		}
		got, err := many.Approvals(ctx, "s1", "")
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i].ID != batch[i].ID {
				t.Fatalf("round %d: approval %d is %q, want the batch's order (%q)", round, i, got[i].ID, batch[i].ID)
			}
		}
	}
}

// BenchmarkCommitDurability: one single-row write (a session's state) committed at the write
// connection's synchronous=NORMAL and at FULL (store.Durable, the approvals' and decisions');
// ns/op is one commit. The difference is the WAL's sync.
func BenchmarkCommitDurability(b *testing.B) {
	for _, durable := range []bool{false, true} {
		name := "normal"
		if durable {
			name = "full"
		}
		b.Run(name, func(b *testing.B) {
			db := MustOpenDB(b)
			ctx := context.Background()
			if err := db.CreateSession(ctx, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"}); err != nil {
				b.Fatal(err)
			}
			var mode store.WriteMode
			if durable {
				mode = store.Durable
			}
			const q = `UPDATE sessions SET title = ? WHERE id = 's1'`
			for i := 0; b.Loop(); i++ {
				if err := (conn{db}).Write(ctx, mode, func(tx store.Querier) error {
					_, err := tx.Exec(ctx, q, fmt.Sprint(i))
					return err
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestStoppedResultsMigrationMarksOnlyStoppedCalls: 0018 marks the results stored before
// result.stopped existed whose call a Stop ended, and no other (issue 29: the page no longer
// reads the text).
func TestStoppedResultsMigrationMarksOnlyStoppedCalls(t *testing.T) {
	db := MustOpenDB(t)
	ctx := context.Background()
	mustCreateSession(t, db, agent.Session{ID: "s1", Title: "one", Model: "faux:demo", Workspace: "/w"})
	storetest.StoppedResultsBefore(t, ctx, db, "s1")
	if _, err := db.write.ExecContext(ctx, `DELETE FROM migrations WHERE name = '0018_stopped_results.sql'`); err != nil {
		t.Fatal(err)
	}
	if err := db.migrate(ctx); err != nil {
		t.Fatal(err)
	}
	entries, err := db.Entries(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	storetest.CheckStoppedResults(t, entries)
}
