package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"countersign/internal/gate"
)

var _ gate.RuleSuggester = Suggest

// Policy is what the policy file (-policy FILE, COUNTERSIGN_POLICY; SPEC §14) gives: its rules,
// all read-only (Source policy-file, Scope server), and the sessions' default mode.
type Policy struct {
	Rules       []gate.Rule
	DefaultMode gate.Mode
}

// LoadPolicyFile reads and checks a policy file in Claude Code's settings shape (SPEC §14):
//
//	{"permissions": {"allow": [texts], "ask": [texts], "deny": [texts], "defaultMode": mode},
//	 "rules": [{"effect": "deny", "tool": "pay__*", "when": "args.amount >= 1000", "note": "…"},
//	           {"effect": "ask", "tool": "run_command(git push:*)", "approvers": 2, "reviewers": ["alice", "bob"]}]}
//
// An ask rule may need several people (SPEC §15): "approvers" (2 to gate.MaxApprovers) and
// "reviewers" in a rule object, or the text form "run_command(git push:*) approvers=2
// reviewers=alice,bob" in "ask" (gate.SplitQuorum); on an allow or deny rule they are refused.
// Every key is optional; "tool" may carry a specifier in text form ("write_file(docs/**)").
// Each rule gets Source policy-file, Scope server, CreatedBy the file's base name, CreatedAt
// the file's modification time, Pos "file:line:col" (of its text, or of its object in "rules")
// and ID "policy:<n>" (n from 1 in the file's order). DefaultMode is ModeDefault when absent.
//
// Errors are "file:line:col: reason" (line and column from 1, the column in characters): a JSON
// syntax error where the parser stopped; an unknown key at the key; an unknown effect or mode,
// a rule text that does not parse, a specifier that does not compile, or a CEL error at the
// string that holds it (for a rule text's syntax error, at the offending character when the
// string has no JSON escapes).
func LoadPolicyFile(file string) (Policy, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return Policy{}, err
	}
	p := &policyParser{file: file, data: data, d: json.NewDecoder(bytes.NewReader(data))}
	if st, err := os.Stat(file); err == nil {
		p.created = st.ModTime().UTC()
	}
	pol, err := p.parse()
	if err != nil {
		return Policy{}, err
	}
	return pol, nil
}

type policyParser struct {
	file    string
	data    []byte
	d       *json.Decoder
	pol     Policy
	n       int
	created time.Time
}

// at is the "file:line:col" of the first significant byte at or after off.
func (p *policyParser) at(off int64) string {
	i := int(off)
	for i < len(p.data) && strings.IndexByte(" \t\r\n:,", p.data[i]) >= 0 {
		i++
	}
	return p.lineCol(i)
}

func (p *policyParser) lineCol(i int) string {
	if i > len(p.data) {
		i = len(p.data)
	}
	line, start := 1, 0
	for j := 0; j < i; j++ {
		if p.data[j] == '\n' {
			line, start = line+1, j+1
		}
	}
	return fmt.Sprintf("%s:%d:%d", p.file, line, utf8.RuneCount(p.data[start:i])+1)
}

func (p *policyParser) errAt(off int64, format string, a ...any) error {
	return fmt.Errorf("%s: %s", p.at(off), fmt.Sprintf(format, a...))
}

// token reads the next token and the offset where it starts.
func (p *policyParser) token() (json.Token, int64, error) {
	off := p.d.InputOffset()
	t, err := p.d.Token()
	if err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			i := int(se.Offset) // the offending byte, 0-based
			if i >= len(p.data) {
				i = len(p.data) - 1
			}
			if i < 0 {
				i = 0
			}
			return nil, off, fmt.Errorf("%s: %s", p.lineCol(i), se.Error())
		}
		if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, off, fmt.Errorf("%s: unexpected end of file", p.lineCol(len(p.data)))
		}
		return nil, off, fmt.Errorf("%s: %v", p.at(off), err)
	}
	return t, off, nil
}

func (p *policyParser) delim(want json.Delim, what string) (int64, error) {
	t, off, err := p.token()
	if err != nil {
		return off, err
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return off, p.errAt(off, "%s must be %s", what, map[json.Delim]string{'{': "an object", '[': "an array"}[want])
	}
	return off, nil
}

func (p *policyParser) str(what string) (string, int64, error) {
	t, off, err := p.token()
	if err != nil {
		return "", off, err
	}
	s, ok := t.(string)
	if !ok {
		return "", off, p.errAt(off, "%s must be a string", what)
	}
	return s, off, nil
}

// once refuses a key an object already had: JSON readers disagree on which of two "effect"s
// counts (the first, the last), so a file a person reads as deny must not load as allow.
func (p *policyParser) once(seen map[string]bool, key string, off int64) error {
	if seen[key] {
		return p.errAt(off, "duplicate key %q", key)
	}
	seen[key] = true
	return nil
}

func (p *policyParser) parse() (Policy, error) {
	if _, err := p.delim('{', "the policy file"); err != nil {
		return Policy{}, err
	}
	seen := map[string]bool{}
	for p.d.More() {
		key, off, err := p.str("a key")
		if err != nil {
			return Policy{}, err
		}
		if err := p.once(seen, key, off); err != nil {
			return Policy{}, err
		}
		switch key {
		case "permissions":
			err = p.permissions()
		case "rules":
			err = p.rules()
		default:
			err = p.errAt(off, "unknown key %q (want permissions or rules)", key)
		}
		if err != nil {
			return Policy{}, err
		}
	}
	if _, err := p.delim('}', "the policy file"); err != nil {
		return Policy{}, err
	}
	if t, off, err := p.token(); err == nil || !strings.HasSuffix(err.Error(), "unexpected end of file") {
		if err != nil {
			return Policy{}, err
		}
		return Policy{}, p.errAt(off, "unexpected %v after the policy object", t)
	}
	if p.pol.DefaultMode == "" {
		p.pol.DefaultMode = gate.ModeDefault
	}
	return p.pol, nil
}

func (p *policyParser) permissions() error {
	if _, err := p.delim('{', `"permissions"`); err != nil {
		return err
	}
	seen := map[string]bool{}
	for p.d.More() {
		key, off, err := p.str("a key")
		if err != nil {
			return err
		}
		if err := p.once(seen, key, off); err != nil {
			return err
		}
		switch key {
		case "allow", "ask", "deny":
			if _, err := p.delim('[', `"`+key+`"`); err != nil {
				return err
			}
			for p.d.More() {
				text, off, err := p.str("a rule text")
				if err != nil {
					return err
				}
				if err := p.addText(gate.Effect(key), text, off); err != nil {
					return err
				}
			}
			if _, err := p.delim(']', `"`+key+`"`); err != nil {
				return err
			}
		case "defaultMode":
			m, off, err := p.str(`"defaultMode"`)
			if err != nil {
				return err
			}
			switch gate.Mode(m) {
			case gate.ModeDefault, gate.ModePlan, gate.ModeAcceptEdits:
				p.pol.DefaultMode = gate.Mode(m)
			default:
				return p.errAt(off, "unknown mode %q (want default, plan or accept-edits)", m)
			}
		default:
			return p.errAt(off, "unknown key %q in permissions (want allow, ask, deny or defaultMode)", key)
		}
	}
	_, err := p.delim('}', `"permissions"`)
	return err
}

// stringStart is the offset of the opening quote of the string token that starts at off.
func (p *policyParser) stringStart(off int64) int {
	i := int(off)
	for i < len(p.data) && p.data[i] != '"' {
		i++
	}
	return i
}

func (p *policyParser) addText(eff gate.Effect, text string, off int64) error {
	full := text
	text, approvers, reviewers, err := gate.SplitQuorum(text)
	if err != nil {
		return p.errAt(off, "rule %q: %v", full, err)
	}
	tp, spec, err := Parse(text)
	if err != nil {
		var se *SyntaxError
		q := p.stringStart(off)
		if errors.As(err, &se) && q+1+len(text) < len(p.data) && string(p.data[q+1:q+1+len(text)]) == text {
			return fmt.Errorf("%s: rule %q: %s", p.lineCol(q+se.Col), text, se.Msg)
		}
		return p.errAt(off, "rule %q: %v", text, err)
	}
	r := gate.Rule{Effect: eff, Tool: tp, Specifier: spec, Approvers: approvers, Reviewers: reviewers}
	if err := p.add(r, off); err != nil {
		return p.errAt(off, "rule %q: %v", full, err)
	}
	return nil
}

// add checks a rule and appends it; the error has no position.
func (p *policyParser) add(r gate.Rule, off int64) error {
	p.n++
	r.ID = fmt.Sprintf("policy:%d", p.n)
	r.Scope = gate.ScopeServer
	r.Source = gate.SourcePolicyFile
	r.CreatedBy = filepath.Base(p.file)
	r.CreatedAt = p.created
	r.Pos = p.at(off)
	c, err := Check(r)
	if err != nil {
		return err
	}
	p.pol.Rules = append(p.pol.Rules, c)
	return nil
}

func (p *policyParser) rules() error {
	if _, err := p.delim('[', `"rules"`); err != nil {
		return err
	}
	for p.d.More() {
		objOff, err := p.delim('{', "a rule")
		if err != nil {
			return err
		}
		var r gate.Rule
		var effOff, toolOff, whenOff, peopleOff int64 = -1, -1, -1, -1
		seen := map[string]bool{}
		for p.d.More() {
			key, off, err := p.str("a key")
			if err != nil {
				return err
			}
			if err := p.once(seen, key, off); err != nil {
				return err
			}
			var v string
			var voff int64
			switch key {
			case "effect", "tool", "when", "note":
				v, voff, err = p.str(`"` + key + `"`)
				if err != nil {
					return err
				}
			case "approvers":
				if r.Approvers, err = p.count(`"approvers"`); err != nil {
					return err
				}
				if peopleOff < 0 {
					peopleOff = off
				}
				continue
			case "reviewers":
				if r.Reviewers, err = p.names(`"reviewers"`); err != nil {
					return err
				}
				if peopleOff < 0 {
					peopleOff = off
				}
				continue
			default:
				return p.errAt(off, "unknown key %q in a rule (want effect, tool, when, note, approvers or reviewers)", key)
			}
			switch key {
			case "effect":
				r.Effect, effOff = gate.Effect(v), voff
			case "tool":
				r.Tool, toolOff = v, voff
			case "when":
				r.When, whenOff = v, voff
			case "note":
				r.Note = v
			}
		}
		if _, err := p.delim('}', "a rule"); err != nil {
			return err
		}
		switch {
		case effOff < 0:
			return p.errAt(objOff, `a rule needs "effect"`)
		case toolOff < 0:
			return p.errAt(objOff, `a rule needs "tool"`)
		}
		switch r.Effect {
		case gate.Allow, gate.Ask, gate.Deny:
		default:
			return p.errAt(effOff, "unknown effect %q (want allow, ask or deny)", r.Effect)
		}
		if err := r.CheckQuorum(); err != nil {
			return p.errAt(peopleOff, "%v", err) // at the first of "approvers" and "reviewers"
		}
		tp, spec, err := Parse(r.Tool)
		if err != nil {
			return p.errAt(toolOff, "tool %q: %v", r.Tool, err)
		}
		r.Tool, r.Specifier = tp, spec
		if r.When != "" {
			if _, err := compileWhen(r.When); err != nil {
				return p.errAt(whenOff, "%v", err)
			}
		}
		if err := p.add(r, objOff); err != nil {
			if len(r.Reviewers) > 0 && strings.HasPrefix(err.Error(), "reviewer ") {
				return p.errAt(peopleOff, "%v", err)
			}
			// the specifier is the only thing left that can fail: point at the tool.
			return p.errAt(toolOff, "rule %q: %v", Text(r), err)
		}
	}
	_, err := p.delim(']', `"rules"`)
	return err
}

// count reads a whole number (a rule's "approvers").
func (p *policyParser) count(what string) (int, error) {
	t, off, err := p.token()
	if err != nil {
		return 0, err
	}
	f, ok := t.(float64)
	if !ok || f != float64(int(f)) || f < 0 || f > 1000 {
		return 0, p.errAt(off, "%s must be a whole number such as 2", what)
	}
	return int(f), nil
}

// names reads an array of strings (a rule's "reviewers").
func (p *policyParser) names(what string) ([]string, error) {
	if _, err := p.delim('[', what); err != nil {
		return nil, err
	}
	var out []string
	for p.d.More() {
		s, _, err := p.str("a reviewer's name")
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if _, err := p.delim(']', what); err != nil {
		return nil, err
	}
	return out, nil
}
