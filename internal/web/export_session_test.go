package web_test

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"countersign/internal/agent"
	"countersign/internal/gate"
	"countersign/internal/web"
)

// TestExportHoldsEverythingAndDeleteLeavesNothing (SPEC §16, issue 21 acceptance 6): after a run
// with a prompt and its decision, the JSON export holds every transcript entry and every
// approval record (the audit) the API lists, the Markdown download names the call and its
// decision; then the session is deleted, and no table of the database holds a row that names it.
func TestExportHoldsEverythingAndDeleteLeavesNothing(t *testing.T) {
	ts := newTestServer(t, map[string]string{"one": oneCall})
	var sess agent.Session
	if st := ts.call(t, "POST", "/api/sessions", map[string]string{"title": "export | me", "model": "faux:one"}, &sess); st != 201 {
		t.Fatalf("create = %d", st)
	}
	c := ts.events(t, sess.ID)
	next(t, c, "snapshot")
	ts.call(t, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	ev := next(t, c, "approval_requested")
	id := ev["approval"].(map[string]any)["id"].(string)
	if st := ts.call(t, "POST", "/api/approvals/"+id+"/decision", map[string]string{"decision": "approve", "reason": "looks fine"}, nil); st != 200 {
		t.Fatalf("decide = %d", st)
	}
	next(t, c, "agent_end")
	c.CloseNow()

	var exp web.SessionExport
	if st := ts.call(t, "GET", "/api/sessions/"+sess.ID+"/export", nil, &exp); st != 200 {
		t.Fatalf("export = %d", st)
	}
	var full struct {
		Entries []agent.Entry `json:"entries"`
	}
	ts.call(t, "GET", "/api/sessions/"+sess.ID, nil, &full)
	var all struct{ Approvals []gate.Approval }
	ts.call(t, "GET", "/api/sessions/"+sess.ID+"/approvals", nil, &all)
	if exp.Format != web.ExportFormat || exp.Session.ID != sess.ID {
		t.Errorf("export format %q, session %q", exp.Format, exp.Session.ID)
	}
	if len(exp.Entries) != len(full.Entries) || len(exp.Entries) < 4 {
		t.Errorf("export holds %d entries, the session %d", len(exp.Entries), len(full.Entries))
	}
	if len(exp.Approvals) != len(all.Approvals) || len(exp.Approvals) == 0 {
		t.Errorf("export holds %d approval records, the API lists %d", len(exp.Approvals), len(all.Approvals))
	}
	found := false
	for _, a := range exp.Approvals {
		found = found || a.ID == id && a.Status == gate.Approved && a.Reason == "looks fine"
	}
	if !found {
		t.Errorf("the decided approval %s is not in the export: %+v", id, exp.Approvals)
	}

	// The Markdown download (owner page route).
	req, _ := http.NewRequest("GET", ts.URL+"/sessions/"+sess.ID+"/export.md", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/markdown") ||
		!strings.Contains(res.Header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("export.md = %d %s %s", res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Content-Disposition"))
	}
	for _, want := range []string{"# export | me", "## Transcript", "Tool call `shell` (c1)", "## Audit", "| approved | owner |", "looks fine"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("export.md lacks %q:\n%s", want, md)
		}
	}

	if st := ts.call(t, "DELETE", "/api/sessions/"+sess.ID, nil, nil); st != 204 {
		t.Fatalf("delete = %d", st)
	}
	if st := ts.call(t, "GET", "/api/sessions/"+sess.ID+"/export", nil, nil); st != 404 {
		t.Errorf("export after delete = %d, want 404", st)
	}
	// Every table, whatever migrations add later: no row names the session or its approvals.
	db, err := sql.Open("sqlite", ts.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	checked := 0
	for _, tb := range tables {
		var dump string
		// Every column of every row as one text, searched for the session's and the approval's ids.
		cols, err := columns(ctx, db, tb)
		if err != nil {
			t.Fatalf("%s: %v", tb, err)
		}
		q := `SELECT COALESCE(group_concat(` + strings.Join(cols, ` || ' ' || `) + `, ' '), '') FROM "` + tb + `"`
		if err := db.QueryRowContext(ctx, q).Scan(&dump); err != nil {
			t.Fatalf("%s: %v", tb, err)
		}
		checked++
		if strings.Contains(dump, sess.ID) || strings.Contains(dump, id) {
			t.Errorf("table %s still names the deleted session or its approval", tb)
		}
	}
	if checked < 5 {
		t.Errorf("checked only %d tables: %v", checked, tables)
	}
}

// columns are table tb's columns as SQL expressions of their text (NULL as ”).
func columns(ctx context.Context, db *sql.DB, tb string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?)`, tb)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		cols = append(cols, `COALESCE(CAST("`+n+`" AS TEXT), '')`)
	}
	return cols, rows.Err()
}
