package mcp

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoadConfig(t *testing.T) {
	path := filepath.Join("testdata", "mcp.json")
	got, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{File: path, Servers: []ServerConfig{
		{Name: "files", Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-filesystem", "/tmp"},
			Env: map[string]string{"NODE_NO_WARNINGS": "1"}},
		{Name: "remote", URL: "http://127.0.0.1:9000/mcp",
			Headers: map[string]string{"Authorization": "Bearer change-me"}, Trusted: true},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LoadConfig = %+v\nwant %+v", got, want)
	}
	if got.Servers[0].Transport() != "stdio" || got.Servers[1].Transport() != "http" {
		t.Errorf("transports %q %q", got.Servers[0].Transport(), got.Servers[1].Transport())
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	_, err := LoadConfig(filepath.Join(t.TempDir(), "nope.json"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v, want one wrapping os.ErrNotExist", err)
	}
}

func TestParseConfigAccepts(t *testing.T) {
	for _, tc := range []struct{ name, data string }{
		{"no servers", `{"mcpServers": {}}`},
		{"claude code type stdio", `{"mcpServers": {"a": {"type": "stdio", "command": "x"}}}`},
		{"claude code type http", `{"mcpServers": {"a": {"type": "http", "url": "https://example.com/mcp"}}}`},
		{"longest name", `{"mcpServers": {"` + strings.Repeat("a", 125) + `": {"command": "x"}}}`},
		{"dots and dashes", `{"mcpServers": {"my.server-1": {"command": "x", "trusted": false}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseConfig("mcp.json", []byte(tc.data)); err != nil {
				t.Errorf("ParseConfig: %v", err)
			}
		})
	}
}

func TestParseConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       string // the whole error: file:line:col: reason
	}{
		{"not JSON", "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n  }\n}",
			`mcp.json:3:26: invalid JSON: invalid character '}' looking for beginning of object key string`},
		{"truncated", `{"mcpServers": {"a": {"command": "x"}`,
			`mcp.json:1:38: invalid JSON: unexpected end of file`},
		{"empty file", ``, `mcp.json:1:1: invalid JSON: unexpected end of file`},
		{"not an object", `[]`, `mcp.json:1:1: the MCP servers config ({"mcpServers": {...}}) must be a JSON object`},
		{"trailing data", `{"mcpServers": {}} {}`, `mcp.json:1:20: invalid JSON: invalid character '{' after top-level value`},
		{"missing mcpServers", "\n{}", `mcp.json:2:1: missing field "mcpServers"`},
		{"unknown top-level field", `{"mcpServers": {}, "servers": {}}`,
			`mcp.json:1:20: unknown field "servers" (the file holds one object, "mcpServers")`},
		{"unknown server field", "{\"mcpServers\": {\n  \"a\": {\"command\": \"x\", \"cwd\": \"/tmp\"}}}",
			`mcp.json:2:25: server "a": unknown field "cwd" (want command, args, env, url, headers, trusted)`},
		{"neither command nor url", "{\"mcpServers\": {\n  \"a\": {\"trusted\": true}}}",
			`mcp.json:2:3: server "a": needs "command" (a stdio server) or "url" (a streamable HTTP server)`},
		{"both command and url", `{"mcpServers": {"a": {"command": "x", "url": "http://h/mcp"}}}`,
			`mcp.json:1:39: server "a": has both "command" and "url"; give one`},
		{"name with a space", `{"mcpServers": {"my files": {"command": "x"}}}`,
			`mcp.json:1:17: server name "my files": use only letters, digits, '_', '.' and '-', because tool names are "my files__<tool>" and must match [A-Za-z0-9_.-]{1,128}`},
		{"name too long", `{"mcpServers": {"` + strings.Repeat("a", 126) + `": {"command": "x"}}}`,
			`mcp.json:1:17: server name "` + strings.Repeat("a", 126) + `" is 126 characters; at most 125, so that "<server>__<tool>" fits the 128 characters of a tool name`},
		{"name with __", `{"mcpServers": {"a__b": {"command": "x"}}}`,
			`mcp.json:1:17: server name "a__b": must not contain "__" or end with "_", which would make "<server>__<tool>" ambiguous`},
		{"empty name", `{"mcpServers": {"": {"command": "x"}}}`, `mcp.json:1:17: server name is empty`},
		{"duplicate name", "{\"mcpServers\": {\"a\": {\"command\": \"x\"},\n \"a\": {\"command\": \"y\"}}}",
			`mcp.json:2:2: duplicate server name "a"`},
		{"args not strings", `{"mcpServers": {"a": {"command": "x", "args": [1]}}}`,
			`mcp.json:1:47: server "a": "args" must be an array of strings`},
		{"env not strings", `{"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}`,
			`mcp.json:1:46: server "a": "env" must be an object of strings`},
		{"empty command", `{"mcpServers": {"a": {"command": " "}}}`, `mcp.json:1:34: server "a": "command" is empty`},
		{"bad url", `{"mcpServers": {"a": {"url": "ftp://h/mcp"}}}`,
			`mcp.json:1:30: server "a": "url" "ftp://h/mcp" must be an http:// or https:// URL`},
		{"headers on stdio", `{"mcpServers": {"a": {"command": "x", "headers": {}}}}`,
			`mcp.json:1:39: server "a": "headers" goes with "url", not "command"`},
		{"trusted not bool", `{"mcpServers": {"a": {"command": "x", "trusted": "yes"}}}`,
			`mcp.json:1:50: server "a": "trusted" must be true or false`},
		{"sse type", `{"mcpServers": {"a": {"type": "sse", "url": "http://h/sse"}}}`,
			`mcp.json:1:31: server "a": "type" "sse" is not supported (want "stdio" with "command", or "http" with "url")`},
		{"type disagrees", `{"mcpServers": {"a": {"type": "stdio", "url": "http://h/mcp"}}}`,
			`mcp.json:1:23: server "a": "type" "stdio" does not match its "url"`},
		{"column counts characters", `{"mcpServers": {"a": {"command": "é", "bogus": 1}}}`,
			`mcp.json:1:39: server "a": unknown field "bogus" (want command, args, env, url, headers, trusted)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("mcp.json", []byte(tc.data))
			if err == nil {
				t.Fatalf("ParseConfig accepted %s", tc.data)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("error\n got %s\nwant %s", got, tc.want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("error %T is not a *ConfigError", err)
			}
		})
	}
}
