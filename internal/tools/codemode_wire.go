package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The codemode worker protocol: the parent (the server) and the worker (a child process running
// the interpreter, ServeCodemodeWorker) exchange newline-delimited JSON messages
// (codemodeMessage), one per line, over the worker's stdin and stdout. Each side refuses a line
// longer than codemodeMessageCap(outputCap) bytes, and a line that is not one well-formed message.
//
// Parent → worker: "run" (first and once: the code and the limits), then one "outcome" per call.
// Worker → parent: "ready" (its limits are set and the script starts: the time limit runs from
// here), then "console", "call" and "wait" in any order, and last "done".
const (
	msgRun     = "run"
	msgOutcome = "outcome"
	msgReady   = "ready"
	msgConsole = "console"
	msgCall    = "call"
	msgWait    = "wait"
	msgDone    = "done"
)

// MaxCodemodeMessage is the base bound, in bytes, of one protocol line between the server and its
// codemode worker: 4 MiB, plus 16 times Config.OutputCap (room for a result and an error cut to
// OutputCap, escaped as JSON). A call whose arguments do not fit rejects in the script; a result
// of a tool that does not fit reaches the script as an error.
const MaxCodemodeMessage = 4 << 20

// codemodeMessageCap is the bound on one protocol line for a run with this output cap.
func codemodeMessageCap(outputCap int) int { return MaxCodemodeMessage + 16*outputCap }

// codemodeMessage is one protocol message; Type says which fields it uses.
type codemodeMessage struct {
	Type string `json:"type"`

	// run (parent): the script, its time limit in nanoseconds (of script execution, not of
	// waiting for calls), the result cap in bytes and the memory budget in bytes.
	Code        string `json:"code,omitempty"`
	TimeoutNs   int64  `json:"timeoutNs,omitempty"`
	OutputCap   int    `json:"outputCap,omitempty"`
	MemoryLimit int64  `json:"memoryLimit,omitempty"`
	// Tools (run) are the names of the tools the script may call, sorted: the keys of its
	// `tools` object (Object.keys(tools), for…in). Any other name is still tried when called.
	Tools []string `json:"tools,omitempty"`

	// call (worker): call ID (1, 2, … in the order the script starts them), the tool's name and
	// its arguments. outcome (parent): the same ID, the nested call's toolCallId, whether it
	// failed, its text (for a failure the text the script's Error carries) and its
	// structuredContent.
	ID                int             `json:"id,omitempty"`
	Name              string          `json:"name,omitempty"`
	Arguments         json.RawMessage `json:"arguments,omitempty"`
	ToolCallID        string          `json:"toolCallId,omitempty"`
	IsError           bool            `json:"isError,omitempty"`
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`

	// console (worker): a line kept within CodemodeConsoleCap (level and text), or, with cut
	// and no level, the mark that later lines were dropped. Text is also an outcome's text.
	Level string `json:"level,omitempty"`
	Text  string `json:"text,omitempty"`
	Cut   bool   `json:"cut,omitempty"`

	// wait (worker): the worker is blocked until outcome number consumed+1 arrives (it has taken
	// consumed outcomes so far).
	Consumed int `json:"consumed,omitempty"`

	// done (worker): the return value as JSON (absent for undefined, or when the script
	// failed); or, for a value longer than outputCap bytes of JSON, resultHead, the first
	// outputCap bytes of that JSON; or the failure text (cut to outputCap bytes).
	Result     json.RawMessage `json:"result,omitempty"`
	ResultHead string          `json:"resultHead,omitempty"`
	Error      string          `json:"error,omitempty"`
}

// errMessageTooLong is readMessage's error for a line over the cap.
var errMessageTooLong = errors.New("message too long")

// messageReader reads protocol lines of at most max bytes from r. It refuses a longer line as
// soon as more than max bytes without a newline have arrived, without waiting for the rest.
type messageReader struct {
	r       io.Reader
	max     int
	buf     []byte // read from r; buf[start:] is not returned yet
	start   int
	scanned int // bytes of buf[start:] known to hold no newline
	err     error
}

func newMessageReader(r io.Reader, max int) *messageReader {
	return &messageReader{r: r, max: max}
}

// read returns the next message: io.EOF at a clean end, an error wrapping io.ErrUnexpectedEOF
// when the stream ends inside a line, one wrapping errMessageTooLong for a line longer than the
// cap, a decoding error naming what is wrong for a line that is not one message (unknown fields
// included), or the reader's error.
func (m *messageReader) read() (codemodeMessage, error) {
	for {
		if i := bytes.IndexByte(m.buf[m.start+m.scanned:], '\n'); i >= 0 {
			end := m.start + m.scanned + i + 1
			line := m.buf[m.start:end]
			m.start, m.scanned = end, 0
			if len(line) > m.max {
				return codemodeMessage{}, fmt.Errorf("%w: a line longer than %d bytes", errMessageTooLong, m.max)
			}
			return decodeMessage(line)
		}
		m.scanned = len(m.buf) - m.start
		if m.scanned > m.max {
			return codemodeMessage{}, fmt.Errorf("%w: a line longer than %d bytes", errMessageTooLong, m.max)
		}
		if m.err != nil {
			if m.scanned > 0 && errors.Is(m.err, io.EOF) {
				return codemodeMessage{}, fmt.Errorf("%w: a line cut short (%d bytes)", io.ErrUnexpectedEOF, m.scanned)
			}
			return codemodeMessage{}, m.err
		}
		// Keep the unreturned bytes at the front, with room to read at least 32 KiB.
		n := copy(m.buf, m.buf[m.start:])
		m.buf, m.start = m.buf[:n], 0
		if cap(m.buf)-n < 32<<10 {
			grown := make([]byte, n, max(2*cap(m.buf), 64<<10))
			copy(grown, m.buf)
			m.buf = grown
		}
		k, err := m.r.Read(m.buf[n:cap(m.buf)])
		m.buf = m.buf[:n+k]
		m.err = err
	}
}

// decodeMessage decodes one line: exactly one JSON object with known fields and a type.
func decodeMessage(line []byte) (codemodeMessage, error) {
	var msg codemodeMessage
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msg); err != nil {
		return codemodeMessage{}, fmt.Errorf("not a message: %v (line starts %q)", err, preview(line))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return codemodeMessage{}, fmt.Errorf("not a message: text after the JSON object (line starts %q)", preview(line))
	}
	if msg.Type == "" {
		return codemodeMessage{}, fmt.Errorf("not a message: no type (line starts %q)", preview(line))
	}
	return msg, nil
}

// preview is the start of a line for an error message: at most 60 bytes.
func preview(line []byte) string {
	return cutUTF8(string(bytes.TrimRight(line, "\n")), 60)
}

// encodeMessage is msg as one protocol line, newline included. It fails only for a RawMessage
// field that is not valid JSON.
func encodeMessage(msg codemodeMessage) ([]byte, error) {
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
