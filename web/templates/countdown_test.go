package templates

import (
	"testing"
	"time"
)

// TestCountdownText: what a pending prompt's countdown says as rendered; countdown.js writes the
// same as it ticks (issue 16, item 3).
func TestCountdownText(t *testing.T) {
	for _, tc := range []struct {
		left time.Duration
		want string
	}{
		{15 * time.Minute, "times out in 15:00"},
		{14*time.Minute + 51*time.Second + 100*time.Millisecond, "times out in 14:52"},
		{500 * time.Millisecond, "times out in 0:01"},
		{time.Hour + 2*time.Minute + 3*time.Second, "times out in 1:02:03"},
		{0, "timing out…"},
		{-time.Second, "timing out…"},
	} {
		if got := countdownText(tc.left); got != tc.want {
			t.Errorf("countdownText(%v) = %q, want %q", tc.left, got, tc.want)
		}
	}
}

// TestAgentCountdownText: an outside agent's pending call counts down to when the agent stops
// waiting (SPEC §18), in the words countdown.js takes from data-countdown-prefix and
// data-countdown-end.
func TestAgentCountdownText(t *testing.T) {
	for _, tc := range []struct {
		left time.Duration
		want string
	}{
		{85 * time.Second, "the agent stops waiting in 1:25"},
		{54*time.Second + 100*time.Millisecond, "the agent stops waiting in 0:55"},
		{0, "the agent stops waiting…"},
	} {
		if got := countdownWords(tc.left, agentCountdownPrefix, agentCountdownEnd); got != tc.want {
			t.Errorf("countdownWords(%v) = %q, want %q", tc.left, got, tc.want)
		}
	}
}
