package mcp

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"countersign/internal/tool"
)

// TestServerToolsWithExternalSchemaRefsAreRefused (issue 15, item 5): an MCP server offers tools
// whose inputSchema or outputSchema refers to a file holding a secret, or to an HTTP URL. Each
// of those tools is refused at registration with an error naming the tool and the reference; the
// server's other tools still register; the file is never read (its secret appears nowhere) and
// the URL is never fetched.
func TestServerToolsWithExternalSchemaRefsAreRefused(t *testing.T) {
	dir := t.TempDir()
	secret := "s3cr3t-mcp-planted"
	secretPath := filepath.Join(dir, "secret.json")
	if err := os.WriteFile(secretPath, []byte(fmt.Sprintf(`{"const": %q}`, secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	fileURL := (&url.URL{Scheme: "file", Path: secretPath}).String()
	var hits atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, `{"const": %q}`, secret)
	}))
	defer hs.Close()
	httpURL := hs.URL + "/schema.json"

	m, _ := newTestManager(t, Config{Servers: []ServerConfig{{Name: "evil", Command: stdioServerBin,
		Env: map[string]string{"STDIOSERVER_REF_FILE": fileURL, "STDIOSERVER_REF_HTTP": httpURL}}}})
	if st := status(m, "evil"); st.State != Up {
		t.Fatalf("evil = %+v, want up", st)
	}
	reg := tool.NewRegistry()
	added, err := m.RegisterTools(reg)
	want := []string{"evil__bad_output", "evil__echo", "evil__fail_with_data", "evil__picture", "evil__slow"}
	if !reflect.DeepEqual(added, want) {
		t.Errorf("registered %v, want the server's other tools %v", added, want)
	}
	if err == nil {
		t.Fatal("RegisterTools reported no refused tool")
	}
	msg := err.Error()
	t.Logf("refused: %s", msg)
	for _, want := range []string{
		`tool evil__ref_file: inputSchema refers to "` + fileURL + `"`,
		`tool evil__ref_output: outputSchema refers to "` + fileURL + `"`,
		`tool evil__ref_http: inputSchema refers to "` + httpURL + `"`,
		`tool evil__ref_meta: inputSchema refers to "` + httpURL + `"`,
		"loads no external schema",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("RegisterTools error does not contain %q", want)
		}
	}
	if strings.Contains(msg, secret) {
		t.Error("RegisterTools error contains the planted secret")
	}
	for _, name := range []string{"evil__ref_file", "evil__ref_output", "evil__ref_http", "evil__ref_meta"} {
		if _, ok := reg.Lookup(name); ok {
			t.Errorf("%s was registered", name)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the schema URL was fetched %d times, want never", n)
	}
	// The Tools panel says why each is missing.
	warnings := strings.Join(status(m, "evil").Warnings, "\n")
	for _, name := range []string{"evil__ref_file", "evil__ref_output", "evil__ref_http", "evil__ref_meta"} {
		if want := "refused by Countersign, not offered to the model: tool " + name + ": "; !strings.Contains(warnings, want) {
			t.Errorf("server warnings %q do not contain %q", warnings, want)
		}
	}
	if strings.Contains(warnings, secret) {
		t.Error("server warnings contain the planted secret")
	}
	// The refused tools stay refused: RegisterTools does not try them again.
	if added, err := m.RegisterTools(reg); len(added) != 0 || err != nil {
		t.Errorf("RegisterTools again = %v, %v; want nothing", added, err)
	}
}
