package tools

import (
	"bufio"
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

// messageReader reads protocol lines of at most max bytes.
type messageReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

func newMessageReader(r io.Reader, max int) *messageReader {
	return &messageReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// read returns the next message: io.EOF at a clean end, an error wrapping errMessageTooLong for
// a line longer than the cap (nothing past the cap is kept), or a decoding error naming what is
// wrong for a line that is not one message (unknown fields included).
func (m *messageReader) read() (codemodeMessage, error) {
	m.buf = m.buf[:0]
	for {
		chunk, err := m.r.ReadSlice('\n')
		if len(m.buf)+len(chunk) > m.max {
			return codemodeMessage{}, fmt.Errorf("%w: a line longer than %d bytes", errMessageTooLong, m.max)
		}
		m.buf = append(m.buf, chunk...)
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && len(m.buf) > 0 {
			return codemodeMessage{}, fmt.Errorf("%w: a line cut short (%d bytes)", io.ErrUnexpectedEOF, len(m.buf))
		}
		return codemodeMessage{}, err
	}
	return decodeMessage(m.buf)
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
