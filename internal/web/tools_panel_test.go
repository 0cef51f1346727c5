package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"countersign/internal/testkit"
	"countersign/internal/tool"
	"countersign/internal/web"
)

// TestToolsPanelGroupsBySourceAndShowsServerState: MCP tools are grouped under their server,
// whose state (down, with its error) the panel shows (SPEC §13).
func TestToolsPanelGroupsBySourceAndShowsServerState(t *testing.T) {
	ok := func(context.Context, json.RawMessage, func(tool.Update), tool.Context) (tool.Result, error) {
		return tool.Result{}, nil
	}
	var tools []*tool.Tool
	for _, name := range []string{"read_file", "files__echo"} {
		tools = append(tools, &tool.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`), Execute: ok, AlwaysAsk: name == "files__echo"})
	}
	env := testkit.New(t, testkit.Options{Tools: tools, Models: failingModels{}})
	db, broker := env.DB, env.Broker
	ms := testkit.NewScripts() // the page's models: none
	sources := func() []web.ToolSource {
		return []web.ToolSource{{Name: "files", Kind: "MCP stdio", State: "down", Error: "MCP server files is down: signal: killed", Tools: []string{"files__echo"}}}
	}
	srv := web.New(web.Config{Runner: env.Runner, Store: db, Broker: broker, Models: ms, OwnerToken: token, Workspace: t.TempDir(), Sources: sources})
	sess := env.Session("panel", "openai:test")
	base := newHTTPTest(t, srv.Handler())
	req, _ := http.NewRequest("GET", base+"/sessions/"+sess.ID, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	page := string(body)
	builtIn := strings.Index(page, "Built-in")
	files := strings.Index(page, "MCP stdio")
	if builtIn < 0 || files < 0 || builtIn > files {
		t.Fatalf("the panel does not group built-in tools, then the server")
	}
	for _, want := range []string{"server-down", "MCP server files is down: signal: killed", "untrusted: every call asks", `aria-label="files__echo"`} {
		if !strings.Contains(page[files:], want) {
			t.Errorf("the server's group lacks %q", want)
		}
	}
	if strings.Contains(page[builtIn:files], "files__echo") {
		t.Error("the MCP tool is listed under Built-in")
	}
}
