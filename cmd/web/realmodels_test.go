package main

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemPromptFlag: -system-prompt (or COUNTERSIGN_SYSTEM_PROMPT) names the file of the
// default instructions; a file that is missing, empty or too long refuses to start, saying why.
func TestSystemPromptFlag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.md", "Work in {{workspace}}.\n")
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    string // the instructions read
		wantErr string
	}{
		{name: "unset: the built-in ones", want: ""},
		{name: "the flag", args: []string{"-system-prompt", good}, want: "Work in {{workspace}}.\n"},
		{name: "the environment", env: map[string]string{"COUNTERSIGN_SYSTEM_PROMPT": good}, want: "Work in {{workspace}}.\n"},
		{name: "a missing file", args: []string{"-system-prompt", filepath.Join(dir, "nope.md")}, wantErr: "-system-prompt: open " + filepath.Join(dir, "nope.md") + ": no such file or directory"},
		{name: "an empty file", args: []string{"-system-prompt", write("empty.md", " \n")}, wantErr: "is empty; leave the flag unset for the built-in instructions"},
		{name: "a file too long", args: []string{"-system-prompt", write("long.md", strings.Repeat("x", 64<<10+1))}, wantErr: "65537 bytes; the instructions take at most 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig(append([]string{"-workspace", dir}, tt.args...), func(k string) string { return tt.env[k] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || c.instructions != tt.want {
				t.Fatalf("instructions %q, %v; want %q", c.instructions, err, tt.want)
			}
		})
	}
}

// TestSystemPromptFileFillsTheNewSessionForm: the started server pre-fills the form's
// "Instructions" with the file's text, and refuses to start on a missing file.
func TestSystemPromptFileFillsTheNewSessionForm(t *testing.T) {
	p := filepath.Join(t.TempDir(), "prompt.md")
	if err := os.WriteFile(p, []byte("Marker 7f3a: work in {{workspace}}."), 0o600); err != nil {
		t.Fatal(err)
	}
	login := startServer(t, []string{"-system-prompt", p}, nil)
	jar, _ := cookiejar.New(nil)
	res, err := (&http.Client{Jar: jar}).Get(login)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), `aria-describedby="instructions-help">`+html.EscapeString("Marker 7f3a: work in {{workspace}}.")+`</textarea>`) {
		t.Errorf("the Instructions textbox is not pre-filled from the file:\n%s", body)
	}
	err = run(t.Context(), []string{"-addr", "127.0.0.1:0", "-db", filepath.Join(t.TempDir(), "x.db"), "-system-prompt", p + ".missing"},
		func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-system-prompt: open ") {
		t.Errorf("a missing file: %v, want a refusal to start naming it", err)
	}
}

func TestContextTokensFlag(t *testing.T) {
	ws := t.TempDir()
	tests := []struct {
		name    string
		args    []string
		env     string
		want    int
		wantErr string
	}{
		{name: "unset: each model's own", want: 0},
		{name: "the flag", args: []string{"-context-tokens", "2000"}, want: 2000},
		{name: "the environment", env: "32000", want: 32000},
		{name: "the flag wins", args: []string{"-context-tokens", "4000"}, env: "32000", want: 4000},
		{name: "not a number", args: []string{"-context-tokens", "2k"}, wantErr: `-context-tokens "2k": want a whole number of tokens`},
		{name: "negative", args: []string{"-context-tokens", "-5"}, wantErr: "want a whole number of tokens"},
		{name: "too small to hold anything", args: []string{"-context-tokens", "100"}, wantErr: "-context-tokens 100: want at least 1000 tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"COUNTERSIGN_CONTEXT_TOKENS": tt.env}
			c, err := parseConfig(append([]string{"-workspace", ws}, tt.args...), func(k string) string { return env[k] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || c.contextTokens != tt.want {
				t.Fatalf("contextTokens %d, %v; want %d", c.contextTokens, err, tt.want)
			}
		})
	}
}
