// Command stdioserver is a real MCP server over stdio, built by the internal/mcp tests with the
// same SDK Countersign uses. Its tools exercise what SPEC §13 asks of the client:
//
//   - echo: readOnlyHint true, openWorldHint false, an outputSchema; returns structuredContent;
//   - picture: returns a text and an image block;
//   - fail_with_data: isError true with structuredContent that does NOT match its outputSchema;
//     annotations {destructiveHint: false} and a title given only as annotations.title;
//   - bad_output: succeeds with structuredContent that violates its outputSchema; no annotations;
//   - slow: reports progress over about a second; when cancelled, writes "cancelled" to the file
//     named by STDIOSERVER_CANCEL_FILE.
//
// Environment: STDIOSERVER_PID_FILE receives the process id at start; STDIOSERVER_ENV_FILE
// receives the server's whole environment at start, one NAME=value a line; STDIOSERVER_FAIL=1 makes
// the server print to stderr and exit 3 before speaking MCP. STDIOSERVER_REF_FILE and
// STDIOSERVER_REF_HTTP (URLs) add tools whose schemas refer to them (issue 15, item 5: a client
// must load neither): ref_file and ref_http ($ref in the inputSchema), ref_output ($ref to the
// file in the outputSchema) and ref_meta ($schema naming the http URL). Run it with
// MCPGODEBUG=hintomitempty=1 so that false readOnlyHint and idempotentHint are omitted (absent)
// rather than sent as false.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if f := os.Getenv("STDIOSERVER_PID_FILE"); f != "" {
		if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if f := os.Getenv("STDIOSERVER_ENV_FILE"); f != "" {
		if err := os.WriteFile(f, []byte(strings.Join(os.Environ(), "\n")+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if os.Getenv("STDIOSERVER_FAIL") == "1" {
		fmt.Fprintln(os.Stderr, "stdioserver: cannot open the database")
		os.Exit(3)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "stdioserver", Version: "1.0.0"}, nil)
	yes, no := true, false

	s.AddTool(&mcp.Tool{
		Name: "echo", Title: "Echo", Description: "Echoes its text.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"echo":{"type":"string"}},"required":["echo"]}`),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in struct{ Text string }
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}},
			StructuredContent: map[string]any{"echo": in.Text},
		}, nil
	})

	s.AddTool(&mcp.Tool{
		Name: "picture", Description: "Returns a tiny picture.",
		InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "a picture"},
			&mcp.ImageContent{Data: []byte("\x89PNG"), MIMEType: "image/png"},
		}}, nil
	})

	s.AddTool(&mcp.Tool{
		Name: "fail_with_data", Description: "Always fails, with data.",
		InputSchema:  json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}`),
		Annotations:  &mcp.ToolAnnotations{Title: "Fail with data", DestructiveHint: &no},
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{
			IsError:           true,
			Content:           []mcp.Content{&mcp.TextContent{Text: "quota exceeded"}},
			StructuredContent: map[string]any{"reason": 42},
		}, nil
	})

	s.AddTool(&mcp.Tool{
		Name: "bad_output", Description: "Succeeds with output that breaks its outputSchema.",
		InputSchema:  json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"count":{"type":"integer"}},"required":["count"]}`),
	}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: "three"}},
			StructuredContent: map[string]any{"count": "three"},
		}, nil
	})

	s.AddTool(&mcp.Tool{
		Name: "slow", Description: "Takes about a second, reporting progress.",
		InputSchema: json.RawMessage(`{"type":"object"}`),
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &yes},
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		const steps = 5
		for i := 1; i <= steps; i++ {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: tok, Progress: float64(i), Total: steps, Message: fmt.Sprintf("step %d of %d", i, steps),
				})
			}
			select {
			case <-ctx.Done():
				if f := os.Getenv("STDIOSERVER_CANCEL_FILE"); f != "" {
					_ = os.WriteFile(f, []byte("cancelled"), 0o644)
				}
				return nil, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
	})

	addRefTools(s)

	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}

// addRefTools adds the tools of STDIOSERVER_REF_FILE and STDIOSERVER_REF_HTTP (see the package
// comment). Their handlers are never meant to run.
func addRefTools(s *mcp.Server) {
	never := func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, fmt.Errorf("a tool with an external schema reference ran")
	}
	ref := func(u string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"$ref": u}}})
		return json.RawMessage(b)
	}
	if u := os.Getenv("STDIOSERVER_REF_FILE"); u != "" {
		s.AddTool(&mcp.Tool{Name: "ref_file", InputSchema: ref(u)}, never)
		s.AddTool(&mcp.Tool{Name: "ref_output", InputSchema: json.RawMessage(`{"type":"object"}`), OutputSchema: ref(u)}, never)
	}
	if u := os.Getenv("STDIOSERVER_REF_HTTP"); u != "" {
		s.AddTool(&mcp.Tool{Name: "ref_http", InputSchema: ref(u)}, never)
		meta, _ := json.Marshal(map[string]any{"$schema": u, "type": "object"})
		s.AddTool(&mcp.Tool{Name: "ref_meta", InputSchema: json.RawMessage(meta)}, never)
	}
}
