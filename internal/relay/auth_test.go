package relay

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestASealedMessageOpensOnlyUnderItsKey: a notification opens under the keys it was sealed with;
// under another shared key, tampered with, cut or unsigned it does not (the reason says why), and
// nothing of the message can be read from it.
func TestASealedMessageOpensOnlyUnderItsKey(t *testing.T) {
	k, other := deriveKeys([]byte("key one")), deriveKeys([]byte("key two"))
	body := []byte(`{"o":"r1","s":"s-secret-session","e":{"type":"message_end","text":"DB_PASSWORD=hunter2"}}`)
	p := k.seal(body)
	if !strings.HasPrefix(p, "v1.") || strings.Contains(p, "secret") || strings.Contains(p, "hunter2") {
		t.Fatalf("sealed = %q: want v1. and nothing of the message readable", p)
	}
	if got, _, reason := k.open(p); reason != "" || string(got) != string(body) {
		t.Fatalf("open under its key = %q, %q", got, reason)
	}
	if k.seal(body) == p {
		t.Fatal("the same message sealed twice reads the same (a fixed IV)")
	}
	flip := []byte(p)
	flip[10] ^= 1
	for _, c := range []struct{ name, payload, want string }{
		{"another key", other.seal(body), RejectBadMAC},
		{"a flipped character", string(flip), RejectBadMAC},
		{"cut", p[:len(p)-5], RejectBadMAC},
		{"too short", "v1.AAAA", RejectBadMAC},
		{"unsigned JSON", string(body), RejectUnsigned},
		{"empty", "", RejectUnsigned},
	} {
		if _, _, reason := k.open(c.payload); reason != c.want {
			t.Errorf("%s: reason %q, want %q", c.name, reason, c.want)
		}
	}
}

// TestNotificationsFitPostgreSQLsLimit: the largest message sealed is under 8,000 bytes, and a
// stored event too large for it goes without its body (read from its row), a delta not at all.
func TestNotificationsFitPostgreSQLsLimit(t *testing.T) {
	r := &Relay{keys: deriveKeys([]byte("k")), id: "r"}
	if p := r.keys.seal(make([]byte, maxMessage)); p == "" || len(p) >= 8000 {
		t.Fatalf("a message of maxMessage (%d) bytes sealed to %d bytes", maxMessage, len(p))
	}
	if r.keys.seal(make([]byte, maxMessage+1)) != "" {
		t.Fatal("a message over maxMessage was sealed")
	}
	big := json.RawMessage(`"` + strings.Repeat("x", 9000) + `"`)
	p, ok := r.signed(message{Origin: "r", Session: "s", Seq: 3, Event: big})
	if !ok || len(p) >= 8000 {
		t.Fatalf("a large stored event: ok %v, %d bytes", ok, len(p))
	}
	body, _, _ := r.keys.open(p)
	var m message
	if err := json.Unmarshal(body, &m); err != nil || m.Seq != 3 || m.Event != nil {
		t.Fatalf("a large stored event's notification = %s (%v): want its number without its body", body, err)
	}
	if _, ok := r.signed(message{Origin: "r", Session: "s", Event: big}); ok {
		t.Fatal("a delta too large for a notification was sent")
	}
}

// TestAHeardMACIsRefusedAgain: a MAC is new once within the replay window; remembered ones are
// forgotten after it.
func TestAHeardMACIsRefusedAgain(t *testing.T) {
	var s seenMACs
	now := time.Now()
	if !s.add("a", now) || s.add("a", now.Add(time.Minute)) {
		t.Fatal("a MAC heard twice within the window was new twice")
	}
	s.add("b", now.Add(3*maxAge)) // prunes
	if _, kept := s.at["a"]; kept {
		t.Fatal("a MAC older than twice the window was kept")
	}
}
