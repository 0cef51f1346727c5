package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestModelIdleTimeoutFlag(t *testing.T) {
	ws := t.TempDir()
	tests := []struct {
		name    string
		args    []string
		env     string
		want    time.Duration
		wantErr string
	}{
		{name: "unset: five minutes", want: 5 * time.Minute},
		{name: "the flag", args: []string{"-model-idle-timeout", "30s"}, want: 30 * time.Second},
		{name: "the environment", env: "2m", want: 2 * time.Minute},
		{name: "the flag wins", args: []string{"-model-idle-timeout", "45s"}, env: "2m", want: 45 * time.Second},
		{name: "not a duration", args: []string{"-model-idle-timeout", "soon"}, wantErr: `-model-idle-timeout "soon": want a positive Go duration`},
		{name: "zero", args: []string{"-model-idle-timeout", "0s"}, wantErr: "want a positive Go duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"COUNTERSIGN_MODEL_IDLE_TIMEOUT": tt.env}
			c, err := parseConfig(append([]string{"-workspace", ws}, tt.args...), func(k string) string { return env[k] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || c.modelIdleTimeout != tt.want {
				t.Fatalf("modelIdleTimeout %v, %v; want %v", c.modelIdleTimeout, err, tt.want)
			}
		})
	}
}

// TestAHungProviderShowsTheWaitAndEndsAtTheIdleTimeout (issue 34, acceptance 2): an
// OpenAI-compatible server that takes the request and never answers. While it hangs the session
// page says "waiting for the model" with the time so far (ticked on by countdown.js); the turn
// ends at -model-idle-timeout with an error that names the wait and the flag, not after 5 minutes.
func TestAHungProviderShowsTheWaitAndEndsAtTheIdleTimeout(t *testing.T) {
	got := make(chan struct{}, 4)
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got <- struct{}{}
		select { // hangs: no headers, no event
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); hung.Close() })
	const token = "idle-owner-token-idle-owner-token-xyz"
	login := startServer(t, []string{"-token", token, "-model-idle-timeout", "1500ms"},
		map[string]string{"OPENAI_BASE_URL": hung.URL + "/v1", "OPENAI_MODEL": "local-7b"})
	base := strings.SplitN(login, "/login", 2)[0]
	api := func(method, path string, body any, out any) int {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if out != nil {
			_ = json.Unmarshal(b, out)
		}
		return res.StatusCode
	}
	var sess struct{ ID string }
	if st := api("POST", "/api/sessions", map[string]string{"title": "hung", "model": "openai:local-7b"}, &sess); st != 201 && st != 200 {
		t.Fatalf("create session = %d", st)
	}
	start := time.Now()
	if st := api("POST", "/api/sessions/"+sess.ID+"/messages", map[string]string{"text": "hello"}, nil); st >= 300 {
		t.Fatalf("send = %d", st)
	}
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the provider got no request")
	}
	req, _ := http.NewRequest("GET", base+"/sessions/"+sess.ID, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(page), `data-testid="model-wait">waiting for the model · <time data-elapsed data-elapsed-ms="`) {
		t.Errorf("the page while the provider hangs does not show the wait:\n%s", page)
	}
	// The run's end: the error names the idle timeout (polled: the run lives in the server).
	var msgs []struct {
		StopReason   string `json:"stopReason"`
		ErrorMessage string `json:"errorMessage"`
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var s struct{ State string }
		api("GET", "/api/sessions/"+sess.ID, nil, &s)
		if s.State == "idle" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run still %q after %v", s.State, time.Since(start))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := time.Since(start); d < 1500*time.Millisecond || d > 15*time.Second {
		t.Errorf("the turn ended after %v; want it at the idle timeout (1.5s, and its retries' waits)", d)
	}
	var export struct {
		Entries []struct {
			Message struct {
				StopReason   string `json:"stopReason"`
				ErrorMessage string `json:"errorMessage"`
			} `json:"message"`
		} `json:"entries"`
	}
	api("GET", "/api/sessions/"+sess.ID+"/export", nil, &export)
	for _, e := range export.Entries {
		msgs = append(msgs, e.Message)
	}
	if len(msgs) == 0 || msgs[len(msgs)-1].StopReason != "error" ||
		!strings.Contains(msgs[len(msgs)-1].ErrorMessage, "no data from the provider for 1.5s (-model-idle-timeout)") {
		t.Errorf("the transcript's end: %+v; want an error naming the idle timeout", msgs)
	}
}
