package store

import (
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/tool"
)

// approvalJSONBuffers keeps the buffers appendApprovalsJSON writes batches into (a batch of the
// audit writer's 128 records is about 50 KB).
var approvalJSONBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// appendApprovalsJSON appends as to buf as the parameter of insertApprovalsJSON: a JSON array
// with one array per approval, its approvalColumnCount column values in approvalColumns order,
// the same values appendApprovalRow binds (texts as JSON strings, NULL as null, automatic as 0 or
// 1, count as a number). ok is false when a text cannot make the trip through JSON byte for byte: it is not valid
// UTF-8 or holds a NUL; the caller then binds the rows one at a time. Errors: apperr.Invalid for
// an approval without an id, as CreateApproval's.
func (db *SQL) appendApprovalsJSON(buf []byte, as []gate.Approval) (_ []byte, ok bool, err error) {
	ok = true
	text := func(s string) {
		ok = ok && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
		buf = appendJSONString(buf, s)
		buf = append(buf, ',')
	}
	nullText := func(b []byte) {
		if b == nil {
			buf = append(buf, "null,"...)
			return
		}
		ok = ok && utf8.Valid(b)
		text(string(b))
	}
	buf = append(buf, '[')
	for i, a := range as {
		if a.ID == "" {
			return buf, false, apperr.Errorf(apperr.Invalid, "an approval needs an id")
		}
		if a.CreatedAt.IsZero() {
			a.CreatedAt = db.Now()
		}
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '[')
		text(a.ID)
		text(a.SessionID)
		text(a.MessageID)
		text(a.ToolCallID)
		text(a.ParentToolCallID)
		text(a.ToolName)
		text(a.ToolTitle)
		nullText(a.Arguments)
		nullText(a.EditedArguments)
		buf = append(buf, '"')
		buf = appendAnnotationsJSON(buf, a.Annotations, true)
		buf = append(buf, `",`...)
		text(a.RequestedBy)
		text(string(a.Status))
		if a.Automatic {
			buf = append(buf, "1,"...)
		} else {
			buf = append(buf, "0,"...)
		}
		text(a.DecidedBy)
		text(a.Reason)
		text(string(a.Scope))
		buf = append(buf, '"')
		buf = a.CreatedAt.UTC().AppendFormat(buf, timeFormat)
		buf = append(buf, `",`...)
		if a.DecidedAt == nil {
			buf = append(buf, "null,"...)
		} else {
			buf = append(buf, '"')
			buf = a.DecidedAt.UTC().AppendFormat(buf, timeFormat)
			buf = append(buf, `",`...)
		}
		text(a.DerivedFrom)
		viaID, viaLabel := linkColumns(a.DecidedVia)
		text(viaID)
		text(viaLabel)
		text(a.AskReason)
		text(string(a.DecisionSource))
		text(a.RuleID)
		text(a.RuleText)
		text(string(a.RuleSource))
		text(string(a.Mode))
		text(string(a.RuleScope))
		buf = strconv.AppendInt(buf, int64(a.Count), 10)
		buf = append(buf, ',')
		if a.LastAt == nil {
			buf = append(buf, "null,"...)
		} else {
			buf = append(buf, '"')
			buf = a.LastAt.UTC().AppendFormat(buf, timeFormat)
			buf = append(buf, `",`...)
		}
		preview, err := previewColumn(a.Preview)
		if err != nil {
			return buf, false, err
		}
		if preview == nil {
			buf = append(buf, "null,"...)
		} else {
			text(preview.(string))
		}
		buf = strconv.AppendInt(buf, int64(a.Approvers), 10)
		buf = append(buf, ',')
		if names := namesColumn(a.Reviewers); names == nil {
			buf = append(buf, "null,"...)
		} else {
			text(names.(string))
		}
		if a.ExpiresAt == nil {
			buf = append(buf, "null,"...)
		} else {
			buf = append(buf, '"')
			buf = a.ExpiresAt.UTC().AppendFormat(buf, timeFormat)
			buf = append(buf, `",`...)
		}
		buf[len(buf)-1] = ']' // the last value's comma
	}
	return append(buf, ']'), ok, nil
}

// appendAnnotationsJSON appends a as json.Marshal writes it (absent hints left out, false kept),
// with its quotes escaped when quoted is set (the text inside a JSON string).
func appendAnnotationsJSON(buf []byte, a tool.Annotations, quoted bool) []byte {
	q := `"`
	if quoted {
		q = `\"`
	}
	buf = append(buf, '{')
	first := true
	for _, h := range [...]struct {
		name string
		v    *bool
	}{{"readOnlyHint", a.ReadOnlyHint}, {"destructiveHint", a.DestructiveHint}, {"idempotentHint", a.IdempotentHint}, {"openWorldHint", a.OpenWorldHint}} {
		if h.v == nil {
			continue
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = append(buf, q...)
		buf = append(buf, h.name...)
		buf = append(buf, q...)
		buf = append(buf, ':')
		if *h.v {
			buf = append(buf, "true"...)
		} else {
			buf = append(buf, "false"...)
		}
	}
	return append(buf, '}')
}

// appendJSONString appends s as a JSON string (RFC 8259 §7): quote, backslash and control
// characters escaped, everything else as it is.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf = append(buf, s[start:i]...)
		switch c {
		case '"', '\\':
			buf = append(buf, '\\', c)
		case '\n':
			buf = append(buf, '\\', 'n')
		case '\r':
			buf = append(buf, '\\', 'r')
		case '\t':
			buf = append(buf, '\\', 't')
		default:
			buf = append(buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}

// ApprovalsJSON reports whether CreateApprovals inserts as through its one JSON statement
// (Dialect.JSONRows: every text can make the trip through JSON byte for byte) rather than a row
// at a time; err is CreateApproval's for an approval without an id. For the SQLite store's tests.
func (db *SQL) ApprovalsJSON(as []gate.Approval) (ok bool, err error) {
	_, ok, err = db.appendApprovalsJSON(nil, as)
	return ok, err
}
