package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestNotifyWebhookFlagsAndTheirEnvironment(t *testing.T) {
	ws := t.TempDir()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	t.Run("the environment's comma-separated list", func(t *testing.T) {
		c, err := parseConfig([]string{"-workspace", ws}, env(map[string]string{
			"COUNTERSIGN_NOTIFY_WEBHOOK": "alice=https://a.example/h, https://hooks.slack.com/services/X?format=slack"}), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range c.receivers {
			got = append(got, r.Name+" "+r.URL+" "+string(r.Format))
		}
		want := []string{"alice https://a.example/h json", "hooks.slack.com https://hooks.slack.com/services/X slack"}
		if !slices.Equal(got, want) {
			t.Errorf("receivers %q, want %q", got, want)
		}
	})
	t.Run("the repeatable flag wins over the environment", func(t *testing.T) {
		c, err := parseConfig([]string{"-workspace", ws, "-notify-webhook", "bob=http://b.example/1", "-notify-webhook", "http://c.example/2",
			"-public-url", "https://cs.example.com/", "-notify-retry-base", "250ms"},
			env(map[string]string{"COUNTERSIGN_NOTIFY_WEBHOOK": "alice=https://a.example/h"}), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.receivers) != 2 || c.receivers[0].Name != "bob" || c.receivers[1].Name != "c.example" ||
			c.publicURL != "https://cs.example.com" || c.retryBase != 250*time.Millisecond {
			t.Errorf("config %+v %q %v", c.receivers, c.publicURL, c.retryBase)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"not a URL", []string{"-notify-webhook", "hooks.example.com"}, `-notify-webhook "hooks.example.com": want http(s)://host/path`},
		{"a reserved recipient", []string{"-notify-webhook", "owner=https://x.example/h"}, `the recipient's name "owner"`},
		{"an unknown format", []string{"-notify-webhook", "https://x.example/h?format=xml"}, `unknown format "xml"`},
		{"a bad public URL", []string{"-public-url", "cs.example.com"}, "-public-url"},
		{"a bad retry base", []string{"-notify-retry-base", "soon"}, "-notify-retry-base"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(append([]string{"-workspace", ws}, tc.args...), env(nil), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestTheWebhookKeyIsMadeBesideTheDatabaseAndShownOnce: the first start with a receiver creates
// <db>.notify-key (owner-only) and prints its secret after the login line; the next start keeps
// it and does not print it again. The file tools may not touch it.
func TestTheWebhookKeyIsMadeBesideTheDatabaseAndShownOnce(t *testing.T) {
	recv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer recv.Close()
	db := filepath.Join(t.TempDir(), "db", "cs.db")
	start := func() (second string) {
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-db", db, "-workspace", t.TempDir(), "-notify-webhook", "alice=" + recv.URL},
				func(string) string { return "" }, pw, io.Discard)
			pw.Close()
		}()
		rd := bufio.NewReader(pr)
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		// The line after the login line, if any, comes before run returns.
		lines := make(chan string, 1)
		go func() { l, _ := rd.ReadString('\n'); lines <- l; io.Copy(io.Discard, rd) }()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return <-lines
	}
	first := start()
	key, err := os.ReadFile(db + ".notify-key")
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(key))
	if !strings.HasPrefix(secret, "whsec_") || !strings.Contains(first, secret) || !strings.Contains(first, "Webhook signing secret") {
		t.Errorf("first start printed %q; key file %q", first, secret)
	}
	if fi, _ := os.Stat(db + ".notify-key"); fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v", fi.Mode().Perm())
	}
	if second := start(); strings.Contains(second, "whsec_") {
		t.Errorf("second start printed the secret again: %q", second)
	}
	if !slices.Contains(ownFiles(config{db: db}), db+".notify-key") {
		t.Error("the file tools are not kept from the key")
	}
}

// TestARemovedReceiversDecisionLinksDie (issue 33): a receiver's decision link works while the
// receiver is configured; after a restart without its -notify-webhook entry the link answers
// 404, while the receiver kept keeps its link; after one with no receiver at all, every link does.
func TestARemovedReceiversDecisionLinksDie(t *testing.T) {
	links := make(chan string, 10) // "<name> <decision link path>"
	receiver := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var p struct {
				Type string
				Data struct{ Links struct{ Decision string } }
			}
			if err := json.NewDecoder(r.Body).Decode(&p); err == nil && p.Type == "approval.requested" {
				u, _ := url.Parse(p.Data.Links.Decision)
				links <- name + " " + u.Path
			}
		}))
		t.Cleanup(s.Close)
		return s
	}
	alice, bob := receiver("alice"), receiver("bob")
	f := newServerFiles(t)
	p := startServing(t, append(f.args("127.0.0.1:0"), "-notify-webhook", "alice="+alice.URL, "-notify-webhook", "bob="+bob.URL)...)
	var sess struct{ ID string }
	p.mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "held", "model": "faux:blocking"}, &sess)
	p.mustAPI(t, http.StatusAccepted, "POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "go"}, nil)
	got := map[string]string{}
	for len(got) < 2 {
		select {
		case l := <-links:
			name, path, _ := strings.Cut(l, " ")
			got[name] = path
		case <-time.After(30 * time.Second):
			t.Fatalf("decision links received: %v; stderr:\n%s", got, p.stderr.String())
		}
	}
	get := func(p *proc, path string) int {
		res, err := http.Get(p.base + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if st := get(p, got["bob"]); st != http.StatusOK {
		t.Fatalf("bob's link while he is a receiver: %d, want 200", st)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.waitExit(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr.String())
	}
	p = startServing(t, append(f.args("127.0.0.1:0"), "-notify-webhook", "alice="+alice.URL)...)
	if st := get(p, got["bob"]); st != http.StatusNotFound {
		t.Errorf("bob's link after he was removed: %d, want 404", st)
	}
	if st := get(p, got["alice"]); st != http.StatusOK {
		t.Errorf("alice's link: %d, want 200", st)
	}
	// Without any receiver, alice's link dies too.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.waitExit(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr.String())
	}
	p = startServing(t, f.args("127.0.0.1:0")...)
	if st := get(p, got["alice"]); st != http.StatusNotFound {
		t.Errorf("alice's link with no receivers: %d, want 404", st)
	}
}
