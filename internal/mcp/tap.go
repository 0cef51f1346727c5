package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// tap reads a connection's messages on the wire, before the SDK handles them, for two things
// the SDK's API loses:
//
//   - Tool definitions as sent. The SDK decodes annotations into sdk.ToolAnnotations, whose
//     readOnlyHint and idempotentHint are plain bools, so "absent" and false arrive the same;
//     SPEC §1 keeps them apart. Every result with a "tools" array is recorded by tool name, and
//     since the tap runs before the SDK sees the message, the definitions are here when
//     ListTools returns.
//   - Progress in wire order. The SDK runs notification handlers from a queue on another
//     goroutine while responses go straight to the caller, so the last notifications/progress
//     of a call routinely arrive after CallTool has returned, when onUpdate may no longer be
//     called. The tap hands each one to progress as it is read, so every notification the server
//     sent before its result reaches onUpdate before Execute returns.
//
// The stdio connection is tapped in Read; streamable HTTP in the response bodies.
type tap struct {
	progress func(params json.RawMessage) // notifications/progress params, in wire order

	mu   sync.Mutex
	defs map[string]json.RawMessage // by MCP tool name
}

// take returns the definitions recorded so far and forgets them.
func (d *tap) take() map[string]json.RawMessage {
	d.mu.Lock()
	defer d.mu.Unlock()
	defs := d.defs
	d.defs = nil
	return defs
}

// observeMessage looks at one JSON-RPC message.
func (d *tap) observeMessage(msg []byte) {
	isProgress := bytes.Contains(msg, []byte(`"notifications/progress"`))
	if !isProgress && !bytes.Contains(msg, []byte(`"tools"`)) {
		return
	}
	var m struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
	}
	if json.Unmarshal(msg, &m) != nil {
		return
	}
	if m.Method == "notifications/progress" {
		d.progress(m.Params)
		return
	}
	d.observeResult(m.Result)
}

// observeResult records the tools of a tools/list result (MCP 2025-11-25 §tools, ListToolsResult);
// other results are ignored.
func (d *tap) observeResult(result json.RawMessage) {
	if !bytes.Contains(result, []byte(`"tools"`)) {
		return
	}
	var r struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(result, &r) != nil {
		return
	}
	for _, raw := range r.Tools {
		var t struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"inputSchema"`
		}
		if json.Unmarshal(raw, &t) != nil || t.Name == "" || len(t.InputSchema) == 0 {
			continue
		}
		d.mu.Lock()
		if d.defs == nil {
			d.defs = map[string]json.RawMessage{}
		}
		d.defs[t.Name] = bytes.Clone(raw)
		d.mu.Unlock()
	}
}

// tappedTransport wraps a stdio transport so that the tap sees every message. (A streamable
// HTTP connection cannot be wrapped this way: the SDK relies on unexported methods of its
// connection type. HTTP is tapped in the RoundTripper instead.)
type tappedTransport struct {
	sdk.Transport
	tap *tap
}

func (t *tappedTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &tappedConn{Connection: c, tap: t.tap}, nil
}

type tappedConn struct {
	sdk.Connection
	tap *tap
}

func (c *tappedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		return msg, err
	}
	switch m := msg.(type) {
	case *jsonrpc.Response:
		if m.Error == nil {
			c.tap.observeResult(m.Result)
		}
	case *jsonrpc.Request:
		if m.Method == "notifications/progress" {
			c.tap.progress(m.Params)
		}
	}
	return msg, nil
}

// httpTransport is the RoundTripper of a streamable HTTP server: it adds the configured headers
// to every request (SPEC §13 "headers") and taps the response bodies.
type httpTransport struct {
	base    http.RoundTripper
	headers map[string]string
	tap     *tap
}

func (t *httpTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context()) // a RoundTripper must not modify its request
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		resp.Body = &jsonTap{ReadCloser: resp.Body, tap: t.tap}
	case "text/event-stream":
		resp.Body = &sseTap{ReadCloser: resp.Body, tap: t.tap}
	}
	return resp, nil
}

// maxTapped bounds what a tap buffers; a larger body is passed on untouched (and its tools fall
// back to the SDK's decoding, with readOnlyHint and idempotentHint counted as absent when false).
const maxTapped = 16 << 20

// jsonTap buffers an application/json body and records it at EOF, which the SDK reaches (it
// reads the whole body) before it decodes the message.
type jsonTap struct {
	io.ReadCloser
	tap  *tap
	buf  []byte
	over bool
}

func (t *jsonTap) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if !t.over {
		if len(t.buf)+n > maxTapped {
			t.over, t.buf = true, nil
		} else {
			t.buf = append(t.buf, p[:n]...)
		}
	}
	if err == io.EOF && !t.over {
		t.tap.observeMessage(t.buf)
		t.buf, t.over = nil, true
	}
	return n, err
}

// sseTap parses a text/event-stream body as it is read and records each event's data. An event
// is complete only at its blank line, which the SDK must read before it can decode the event, so
// the record is made first.
type sseTap struct {
	io.ReadCloser
	tap  *tap
	line []byte // the incomplete line so far
	data []byte // the event's data so far
}

func (t *sseTap) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	for _, b := range p[:n] {
		if b != '\n' {
			if len(t.line) < maxTapped {
				t.line = append(t.line, b)
			}
			continue
		}
		t.endLine(bytes.TrimSuffix(t.line, []byte("\r")))
		t.line = t.line[:0]
	}
	return n, err
}

func (t *sseTap) endLine(line []byte) {
	switch {
	case len(line) == 0:
		if len(t.data) > 0 {
			t.tap.observeMessage(t.data)
		}
		t.data = t.data[:0]
	case bytes.HasPrefix(line, []byte("data:")):
		v := bytes.TrimPrefix(line[len("data:"):], []byte(" "))
		if len(t.data) > 0 {
			t.data = append(t.data, '\n')
		}
		if len(t.data)+len(v) < maxTapped {
			t.data = append(t.data, v...)
		}
	}
}
