package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Config is the MCP servers file of SPEC §13, in the shape MCP clients already use:
//
//	{"mcpServers": {
//	  "files":  {"command": "npx", "args": ["-y", "some-mcp-server"], "env": {"K": "V"}},
//	  "remote": {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer …"},
//	             "trusted": true}
//	}}
type Config struct {
	// File is the path the configuration was read from, for messages.
	File string
	// Servers in the order of the file.
	Servers []ServerConfig
	// PassEnv names variables of Countersign's environment that every stdio server gets besides
	// the allowlist (procenv); set from the -pass-env flag, never read from the file.
	PassEnv []string
}

// ServerConfig is one entry of "mcpServers". Exactly one of Command (a stdio server, MCP
// 2025-11-25 §transports "stdio") and URL (a streamable HTTP server, §transports "Streamable
// HTTP") is set.
type ServerConfig struct {
	// Name is the key in "mcpServers"; its tools are named "<Name>__<tool>".
	Name string
	// Command, Args and Env start a stdio server. The process gets the allowlisted variables of
	// Countersign's environment (procenv: HOME LOGNAME PATH SHELL TERM USER LANG LC_* TMPDIR, and
	// Config.PassEnv), never the rest of it (the owner token, model providers' keys), with Env
	// added on top.
	Command string
	Args    []string
	Env     map[string]string
	// URL and Headers reach a streamable HTTP server; Headers are sent with every request.
	URL     string
	Headers map[string]string
	// Trusted servers have their annotations believed by the approval policy (SPEC §3). Calls to
	// tools of untrusted servers (the default) always need approval: MCP 2025-11-25 §tools says
	// clients must consider annotations untrusted unless they come from trusted servers.
	Trusted bool
}

// Transport is "stdio" or "http".
func (s ServerConfig) Transport() string {
	if s.URL != "" {
		return "http"
	}
	return "stdio"
}

// ConfigError is a refused configuration file: where (1-based line and column, in characters)
// and why. Error() reads "file:line:col: reason".
type ConfigError struct {
	File   string
	Line   int
	Col    int
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Reason)
}

// LoadConfig reads and checks the MCP servers file at path (SPEC §13). A file that is not valid
// JSON, has unknown fields, a server with neither or both of "command" and "url", or a server name
// that would make tool names break the MCP name rule is refused with a *ConfigError naming the
// file, the position and the reason.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("MCP servers config: %w", err)
	}
	return ParseConfig(path, data)
}

// ParseConfig is LoadConfig for data already read; file names it in errors.
func ParseConfig(file string, data []byte) (Config, error) {
	p := &parser{file: file, data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	// json.Unmarshal finds syntax errors with exact offsets (the token walk below does not).
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return Config{}, p.syntax(err, 0)
	}
	cfg, err := p.config()
	if err != nil {
		return Config{}, err
	}
	cfg.File = file
	return cfg, nil
}

// maxServerName keeps "<server>__<tool>" within the 128 characters of the MCP tool name rule
// when the tool name has one character.
const maxServerName = 128 - len(separator) - 1

// separator joins a server name and its tool names.
const separator = "__"

var serverNameRule = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// checkServerName says why name cannot prefix tool names, or "" when it can. Tool names must be
// 1–128 of [A-Za-z0-9_.-] (MCP 2025-11-25 §tools, tool names). "__" and a trailing "_" are refused
// because "a_" + "__" + "b" and "a" + "__" + "_b" would give the same tool name.
func checkServerName(name string) string {
	switch {
	case name == "":
		return "server name is empty"
	case !serverNameRule.MatchString(name):
		return fmt.Sprintf("server name %q: use only letters, digits, '_', '.' and '-', because tool names are \"%s__<tool>\" and must match [A-Za-z0-9_.-]{1,128}", name, name)
	case len(name) > maxServerName:
		return fmt.Sprintf("server name %q is %d characters; at most %d, so that \"<server>__<tool>\" fits the 128 characters of a tool name", name, len(name), maxServerName)
	case strings.Contains(name, separator) || strings.HasSuffix(name, "_"):
		return fmt.Sprintf("server name %q: must not contain \"__\" or end with \"_\", which would make \"<server>__<tool>\" ambiguous", name)
	}
	return ""
}

// parser walks the file token by token so that every refusal can point at the key or value at
// fault, which json.Unmarshal's errors cannot do for unknown fields or rule violations.
type parser struct {
	file string
	data []byte
	dec  *json.Decoder
}

// errAt returns a *ConfigError at byte offset off.
func (p *parser) errAt(off int64, format string, args ...any) error {
	if off > int64(len(p.data)) {
		off = int64(len(p.data))
	}
	before := p.data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	return &ConfigError{File: p.file, Line: line, Col: col, Reason: fmt.Sprintf(format, args...)}
}

// start is the offset of the next token: the decoder's offset past separators and spaces.
func (p *parser) start() int64 {
	off := p.dec.InputOffset()
	for off < int64(len(p.data)) && strings.IndexByte(" \t\r\n,:", p.data[off]) >= 0 {
		off++
	}
	return off
}

// syntax turns a JSON syntax error into a positioned one; at is where to point at otherwise.
func (p *parser) syntax(err error, at int64) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se) && se.Offset >= int64(len(p.data)) && strings.Contains(se.Error(), "unexpected end"),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return p.errAt(int64(len(p.data)), "invalid JSON: unexpected end of file")
	case errors.As(err, &se):
		return p.errAt(max(se.Offset-1, 0), "invalid JSON: %s", se.Error()) // Offset counts the byte at fault
	}
	return p.errAt(at, "invalid JSON: %v", err)
}

// token reads the next token and its starting offset.
func (p *parser) token() (json.Token, int64, error) {
	at := p.start()
	tok, err := p.dec.Token()
	if err != nil {
		return nil, at, p.syntax(err, at)
	}
	return tok, at, nil
}

// openObject reads a '{' or fails with what.
func (p *parser) openObject(what string) (int64, error) {
	tok, at, err := p.token()
	if err != nil {
		return at, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return at, p.errAt(at, "%s must be a JSON object", what)
	}
	return at, nil
}

// key reads the next key of an object; ok is false at the object's end.
func (p *parser) key() (key string, at int64, ok bool, err error) {
	if !p.dec.More() {
		if _, _, err := p.token(); err != nil { // the closing '}'
			return "", 0, false, err
		}
		return "", 0, false, nil
	}
	tok, at, err := p.token()
	if err != nil {
		return "", at, false, err
	}
	return tok.(string), at, true, nil // inside an object, json.Decoder only yields string keys
}

// value decodes the next value into v, or fails saying it must be want.
func (p *parser) value(v any, want string) (int64, error) {
	at := p.start()
	if err := p.dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return at, p.errAt(at, "%s", want)
		}
		return at, p.syntax(err, at)
	}
	return at, nil
}

func (p *parser) config() (Config, error) {
	var cfg Config
	top, err := p.openObject(`the MCP servers config ({"mcpServers": {...}})`)
	if err != nil {
		return cfg, err
	}
	seen := false
	for {
		k, at, ok, err := p.key()
		if err != nil {
			return cfg, err
		}
		if !ok {
			break
		}
		if k != "mcpServers" {
			return cfg, p.errAt(at, "unknown field %q (the file holds one object, \"mcpServers\")", k)
		}
		if seen {
			return cfg, p.errAt(at, "duplicate field \"mcpServers\"")
		}
		seen = true
		if cfg.Servers, err = p.servers(); err != nil {
			return cfg, err
		}
	}
	if !seen {
		return cfg, p.errAt(top, "missing field \"mcpServers\"")
	}
	return cfg, nil
}

func (p *parser) servers() ([]ServerConfig, error) {
	if _, err := p.openObject(`"mcpServers"`); err != nil {
		return nil, err
	}
	servers := []ServerConfig{}
	names := map[string]bool{}
	for {
		name, at, ok, err := p.key()
		if err != nil {
			return nil, err
		}
		if !ok {
			return servers, nil
		}
		if reason := checkServerName(name); reason != "" {
			return nil, p.errAt(at, "%s", reason)
		}
		if names[name] {
			return nil, p.errAt(at, "duplicate server name %q", name)
		}
		names[name] = true
		s, err := p.server(name, at)
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
	}
}

// server reads one server object; nameAt is where its name is, for whole-server refusals.
func (p *parser) server(name string, nameAt int64) (ServerConfig, error) {
	s := ServerConfig{Name: name}
	if _, err := p.openObject(fmt.Sprintf("server %q", name)); err != nil {
		return s, err
	}
	seen := map[string]int64{}
	var typ string
	for {
		k, at, ok, err := p.key()
		if err != nil {
			return s, err
		}
		if !ok {
			break
		}
		if _, dup := seen[k]; dup {
			return s, p.errAt(at, "server %q: duplicate field %q", name, k)
		}
		var vat int64
		switch k {
		case "command":
			vat, err = p.value(&s.Command, fmt.Sprintf("server %q: \"command\" must be a string", name))
			if err == nil && strings.TrimSpace(s.Command) == "" {
				err = p.errAt(vat, "server %q: \"command\" is empty", name)
			}
		case "args":
			_, err = p.value(&s.Args, fmt.Sprintf("server %q: \"args\" must be an array of strings", name))
		case "env":
			_, err = p.value(&s.Env, fmt.Sprintf("server %q: \"env\" must be an object of strings", name))
		case "url":
			vat, err = p.value(&s.URL, fmt.Sprintf("server %q: \"url\" must be a string", name))
			if err == nil {
				if u, perr := url.Parse(s.URL); perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					err = p.errAt(vat, "server %q: \"url\" %q must be an http:// or https:// URL", name, s.URL)
				}
			}
		case "headers":
			_, err = p.value(&s.Headers, fmt.Sprintf("server %q: \"headers\" must be an object of strings", name))
		case "trusted":
			_, err = p.value(&s.Trusted, fmt.Sprintf("server %q: \"trusted\" must be true or false", name))
		case "type":
			// Accepted for files written for other clients (Claude Code's .mcp.json), where it
			// must agree with command or url.
			vat, err = p.value(&typ, fmt.Sprintf("server %q: \"type\" must be a string", name))
			if err == nil && typ != "stdio" && typ != "http" && typ != "streamable-http" {
				err = p.errAt(vat, "server %q: \"type\" %q is not supported (want \"stdio\" with \"command\", or \"http\" with \"url\")", name, typ)
			}
		default:
			return s, p.errAt(at, "server %q: unknown field %q (want command, args, env, url, headers, trusted)", name, k)
		}
		if err != nil {
			return s, err
		}
		seen[k] = at
	}
	_, hasCommand := seen["command"]
	_, hasURL := seen["url"]
	switch {
	case !hasCommand && !hasURL:
		return s, p.errAt(nameAt, "server %q: needs \"command\" (a stdio server) or \"url\" (a streamable HTTP server)", name)
	case hasCommand && hasURL:
		return s, p.errAt(max(seen["command"], seen["url"]), "server %q: has both \"command\" and \"url\"; give one", name)
	}
	for _, f := range []string{"args", "env"} {
		if at, ok := seen[f]; ok && hasURL {
			return s, p.errAt(at, "server %q: %q goes with \"command\", not \"url\"", name, f)
		}
	}
	if at, ok := seen["headers"]; ok && hasCommand {
		return s, p.errAt(at, "server %q: \"headers\" goes with \"url\", not \"command\"", name)
	}
	if at, ok := seen["type"]; ok && (typ == "stdio") != hasCommand {
		return s, p.errAt(at, "server %q: \"type\" %q does not match its %s", name, typ,
			map[bool]string{true: "\"command\"", false: "\"url\""}[hasCommand])
	}
	return s, nil
}
