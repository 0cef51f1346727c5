package mcpproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	csmcp "countersign/internal/mcp"
)

// Config is one proxy's settings.
type Config struct {
	// URL is the Countersign server's base URL ("https://countersign.example").
	URL string
	// Token is a connection's token (kind mcp); it is sent in the Authorization header only.
	Token string
	// Name names the wrapped server in its tools' names, "<Name>__<tool>", as rules write
	// them (SPEC §18); letters, digits, '.', '-' and single '_'.
	Name string
	// Timeout is the client's timeout for a call: Countersign answers 5 s before it (default
	// 60 s: at 55 s).
	Timeout time.Duration
	// ProgressEvery is how often a held call sends notifications/progress when the client
	// gave a progressToken (default 15 s).
	ProgressEvery time.Duration
	// Command is the wrapped server's command line.
	Command []string
	// HTTPClient reaches Countersign (nil: a client with no overall timeout: calls are held).
	HTTPClient *http.Client
}

// Main is `countersign mcp-proxy [flags] -- <command> [args…]` (SPEC §18 Door 2): it serves
// the wrapped server's tools on stdin/stdout until the client closes stdin, and returns the exit
// code (2 for bad flags, 1 when the server cannot start or Countersign refuses the token).
// Flags: --connection-token-env NAME (required: the variable holding a connection's token),
// --url (default $COUNTERSIGN_URL, else http://127.0.0.1:8080), --name (default the command's
// base name), --timeout seconds (60).
func Main(ctx context.Context, args []string, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("countersign mcp-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tokenEnv := fs.String("connection-token-env", "", "the environment variable that holds the connection's token (required)")
	base := fs.String("url", "", "Countersign's URL (default $COUNTERSIGN_URL, else http://127.0.0.1:8080)")
	name := fs.String("name", "", "the wrapped server's name in its tools' names, <name>__<tool> (default: the command's base name)")
	timeout := fs.Float64("timeout", 60, "the client's timeout for a call, in seconds: Countersign answers 5 s before it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := Config{URL: *base, Name: *name, Timeout: time.Duration(*timeout * float64(time.Second)), Command: fs.Args()}
	if *tokenEnv == "" {
		fmt.Fprintln(stderr, "countersign mcp-proxy: --connection-token-env NAME is required (the variable that holds the connection's token)")
		return 2
	}
	if cfg.Token = strings.TrimSpace(getenv(*tokenEnv)); cfg.Token == "" {
		fmt.Fprintf(stderr, "countersign mcp-proxy: $%s is empty: set it to the connection's token\n", *tokenEnv)
		return 2
	}
	if len(cfg.Command) == 0 {
		fmt.Fprintln(stderr, "countersign mcp-proxy: no server command: countersign mcp-proxy --connection-token-env NAME -- <command> [args…]")
		return 2
	}
	if cfg.URL == "" {
		cfg.URL = getenv("COUNTERSIGN_URL")
	}
	if cfg.URL == "" {
		cfg.URL = "http://127.0.0.1:8080"
	}
	if err := Run(ctx, cfg, &sdk.IOTransport{Reader: stdin, Writer: stdout}, stderr); err != nil {
		fmt.Fprintln(stderr, "countersign mcp-proxy:", err)
		return 1
	}
	return 0
}

// Run starts the wrapped server, lists its tools and serves them to the client on t until the
// client leaves or ctx ends; the server's stderr goes to stderr. Errors: the server failed to
// start or list its tools; cfg is incomplete.
func Run(ctx context.Context, cfg Config, t sdk.Transport, stderr io.Writer) error {
	if cfg.Name == "" && len(cfg.Command) > 0 {
		cfg.Name = strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
				return r
			}
			return '-'
		}, filepath.Base(cfg.Command[0]))
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 15 * time.Second
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if _, err := url.Parse(cfg.URL); err != nil || len(cfg.Command) == 0 {
		return fmt.Errorf("a URL and a command are needed")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := &proxy{cfg: cfg, id: newID()}
	p.srv = sdk.NewServer(&sdk.Implementation{Name: "countersign-mcp-proxy", Title: cfg.Name + " (countersigned)", Version: "1"},
		&sdk.ServerOptions{Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}}})
	client := sdk.NewClient(&sdk.Implementation{Name: "countersign-mcp-proxy", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(ctx context.Context, _ *sdk.ToolListChangedRequest) {
			if err := p.list(ctx); err != nil {
				fmt.Fprintln(stderr, "countersign mcp-proxy: listing the tools again:", err)
			}
		},
	})
	cmd := exec.CommandContext(ctx, cfg.Command[0], cfg.Command[1:]...)
	cmd.Stderr = stderr
	up, err := client.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("starting %s: %w", strings.Join(cfg.Command, " "), err)
	}
	defer up.Close()
	p.mu.Lock()
	p.up = up
	p.mu.Unlock()
	if err := p.list(ctx); err != nil {
		return err
	}
	return p.srv.Run(ctx, t)
}

type proxy struct {
	cfg Config
	id  string // this proxy's client session (DecideRequest.SessionID)
	srv *sdk.Server

	mu    sync.Mutex
	up    *sdk.ClientSession
	names []string // the tools offered
}

// list offers the wrapped server's tools as they are now.
func (p *proxy) list(ctx context.Context) error {
	p.mu.Lock()
	up := p.up
	p.mu.Unlock()
	if up == nil {
		return nil
	}
	var tools []*sdk.Tool
	for t, err := range up.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("listing the wrapped server's tools: %w", err)
		}
		tools = append(tools, t)
	}
	p.mu.Lock()
	old := p.names
	p.names = nil
	p.mu.Unlock()
	if len(old) > 0 {
		p.srv.RemoveTools(old...)
	}
	for _, t := range tools {
		raw, err := json.Marshal(t)
		if err != nil {
			continue
		}
		p.srv.AddTool(t, p.call(t.Name, raw))
		p.mu.Lock()
		p.names = append(p.names, t.Name)
		p.mu.Unlock()
	}
	return nil
}

// call is the handler of the wrapped tool name (raw: its definition): ask Countersign, then run
// it on the wrapped server when allowed. Anything but an allow from Countersign (a denial, no
// decision yet, Countersign unreachable or refusing) is an isError result and the call never
// runs.
func (p *proxy) call(name string, raw json.RawMessage) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		dr := DecideRequest{SessionID: p.id, Server: p.cfg.Name, Tool: raw, Arguments: req.Params.Arguments}
		if ci := req.ClientInfo(); ci != nil {
			dr.ClientInfo = ClientInfo{Name: ci.Name, Version: ci.Version}
		}
		stop := p.progress(ctx, req)
		var d Decision
		err := p.post(ctx, "/mcp/decide?timeout="+strconv.FormatFloat(p.cfg.Timeout.Seconds(), 'f', -1, 64), dr, &d)
		stop()
		if err != nil {
			return isError("Countersign could not decide this call, so it did not run: " + err.Error()), nil
		}
		switch d.Decision {
		case Allow:
		case Deny, Wait:
			return isError(d.Reason), nil
		default:
			return isError("Countersign answered no decision, so the call did not run"), nil
		}
		p.mu.Lock()
		up := p.up
		p.mu.Unlock()
		or := OutcomeRequest{SessionID: p.id, ApprovalID: d.ApprovalID}
		res, err := up.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: d.Arguments})
		if err != nil {
			or.Error = "the wrapped server: " + err.Error()
		} else if or.Result, err = json.Marshal(res); err != nil {
			or.Error = err.Error()
		}
		var out Outcome
		if err := p.post(context.WithoutCancel(ctx), "/mcp/outcome", or, &out); err != nil {
			return isError("the call ran, but Countersign could not check its result: " + err.Error()), nil
		}
		var final sdk.CallToolResult
		if err := json.Unmarshal(out.Result, &final); err != nil {
			return isError("Countersign's answer about the result is not a CallToolResult: " + err.Error()), nil
		}
		return &final, nil
	}
}

// progress sends notifications/progress every ProgressEvery while a call waits for
// Countersign, when the client gave a progressToken (mcp.HoldProgress); stop ends it.
func (p *proxy) progress(ctx context.Context, req *sdk.CallToolRequest) (stop func()) {
	return csmcp.HoldProgress(ctx, req, p.cfg.ProgressEvery, "waiting for approval in Countersign")
}

// post sends body to Countersign's path and decodes a 200 answer into out; any other status is
// an error with the server's reason (never the token).
func (p *proxy) post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(p.cfg.URL, "/")+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	res, err := p.cfg.HTTPClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return fmt.Errorf("Countersign is unreachable: %v", ue.Err)
		}
		return err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		return fmt.Errorf("%s: %s", res.Status, msg)
	}
	return json.Unmarshal(data, out)
}

func isError(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, IsError: true}
}

// newID is a random id for this proxy's client session (128 bits, hex).
func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
