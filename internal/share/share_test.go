package share_test

import (
	"strings"
	"testing"

	"countersign/internal/apperr"
	"countersign/internal/gate"
	"countersign/internal/share"
)

// TestNormalizeNameRefusesLookAlikesOfReservedNames: every name the audit uses for the owner or
// for an automatic decision is refused however it is dressed up (fullwidth, invisible or bidi
// characters, case, spaces); other names are recorded cleaned (SPEC §7, issue 15 item 8).
func TestNormalizeNameRefusesLookAlikesOfReservedNames(t *testing.T) {
	refused := []string{
		"Ｏｗｎｅｒ", "own\u200ber", "\u202eowner", " owner ", "SYSTEM", "Policy", "timeout", "TIME\u200cOUT",
		"session grant", "Session\u00a0 Grant", "tool_call handler", "tool_call \u00adhandler ", "\ufeffowner",
		"o\u034fwner", "owner\ufe0f", "\u2066owner\u2069", "\u200eowner\u200f", "ｓｙｓｔｅｍ", "own\u2060er", "\u180eowner",
		// Look-alikes (found by a reviewer): Cyrillic о, small capitals, a zero, an accent, a
		// Cyrillic а and і in other reserved names.
		"\u043ewner", "ᴏᴡɴᴇʀ", "0wner", "öwner", "ÓWNER", "p\u043elicy", "session gr\u0430nt", "t\u0456meout",
		// Punctuation and spaces around or inside, and a digit for a letter (a second review).
		"owner.", "owner_", "owner-", "o w n e r", "pol1cy", "-owner-", "sys.tem", "time-out",
	}
	for _, reserved := range gate.ReservedNames() {
		refused = append(refused, reserved, strings.ToUpper(reserved), "\u202a"+reserved+"\u202c")
	}
	for _, name := range refused {
		got, err := share.NormalizeName(name)
		if apperr.CodeOf(err) != apperr.Invalid || !strings.Contains(apperr.MessageOf(err), "give your own name") {
			t.Errorf("NormalizeName(%+q) = %q, %v; want refused as a reserved name", name, got, err)
		}
		if share.ValidName(name) {
			t.Errorf("ValidName(%+q) = true", name)
		}
	}
	for _, name := range []string{"", "   ", "\u200b\u200d\u2060", "\u202e\u202c", strings.Repeat("é", share.MaxName+1)} {
		if got, err := share.NormalizeName(name); apperr.CodeOf(err) != apperr.Invalid || !strings.Contains(apperr.MessageOf(err), "1 to 60 characters") {
			t.Errorf("NormalizeName(%+q) = %q, %v; want refused for its length", name, got, err)
		}
	}
	for typed, want := range map[string]string{
		"Ada Lovelace":                     "Ada Lovelace",
		"  Ada \t\n Lovelace  ":            "Ada Lovelace",
		"\u202eAda\u200b Love\u00adlace":   "Ada Lovelace",
		"Ｂｏｂ":                              "Bob",
		"Zoe\u0308":                        "Zoë", // composed by NFKC
		"ownership":                        "ownership",
		"the owner":                        "the owner",
		"Ｏｗｎｅｒ ２":                          "Owner 2",
		"李小龍":                              "李小龍",
		strings.Repeat("é", share.MaxName): strings.Repeat("é", share.MaxName),
	} {
		got, err := share.NormalizeName(typed)
		if err != nil || got != want {
			t.Errorf("NormalizeName(%+q) = %q, %v; want %q", typed, got, err, want)
		}
		if !share.ValidName(want) {
			t.Errorf("ValidName(%q) = false for a normalised name", want)
		}
		if typed != want && share.ValidName(typed) {
			t.Errorf("ValidName(%+q) = true for a name that is not normalised", typed)
		}
	}
}

// TestLinkRightsAndDecider: a link's rights are those it was created with, only for an approver
// link; its decider carries the reviewer's name, the link's id and label and those rights.
func TestLinkRightsAndDecider(t *testing.T) {
	l := share.Link{ID: "l1", Role: share.Approver, Label: "Design review", CanEdit: true}
	d := l.Decider("alice")
	if d.Name != "alice" || d.Via == nil || *d.Via != (gate.LinkRef{LinkID: "l1", Label: "Design review"}) ||
		d.Rights != (gate.Rights{Edit: true}) {
		t.Errorf("Decider = %+v (via %+v)", d, d.Via)
	}
	viewer := share.Link{ID: "l2", Role: share.Viewer, CanEdit: true, CanRemember: true}
	if viewer.Rights() != (gate.Rights{}) {
		t.Errorf("a viewer link has rights %+v", viewer.Rights())
	}
}

// TestNormalizeNameRefusesCharactersPagesUseAroundNames: a name is letters, digits, spaces and
// a little punctuation, so it cannot carry "(link: … · id …)" to fake which link decided, nor
// markup or a replacement character from invalid UTF-8 (found by a reviewer).
func TestNormalizeNameRefusesCharactersPagesUseAroundNames(t *testing.T) {
	for _, name := range []string{"bob (link: remember · id mnf5q5yxnx3kw2p3)", "bob · id x", "<b>bob</b>",
		"a/b", "bad\xffbyte", "alice: approved", "eve\u2800"} {
		if got, err := share.NormalizeName(name); apperr.CodeOf(err) != apperr.Invalid || !strings.Contains(apperr.MessageOf(err), "letters, digits, spaces") {
			t.Errorf("NormalizeName(%+q) = %q, %v; want refused for its characters", name, got, err)
		}
	}
	for _, name := range []string{"Mary-Jane O'Neil", "j.doe@example.com", "dev_ops 2"} {
		if got, err := share.NormalizeName(name); err != nil || got != name {
			t.Errorf("NormalizeName(%q) = %q, %v; want it kept", name, got, err)
		}
	}
}

// TestALinkMadeForAPersonDecidesAsThem: whatever name is passed, a link made for alice decides
// as alice (a fixed name); an unnamed link decides with the name given, marked as chosen (it never
// counts as a listed reviewer, SPEC §15).
func TestALinkMadeForAPersonDecidesAsThem(t *testing.T) {
	tests := []struct {
		name      string
		link      share.Link
		given     string
		want      string
		choseName bool
	}{
		{"made for alice", share.Link{ID: "l1", Role: share.Approver, For: "alice"}, "mallory", "alice", false},
		{"unnamed", share.Link{ID: "l2", Role: share.Approver}, "mallory", "mallory", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.link.Decider(tc.given)
			if d.Name != tc.want || d.ChoseName != tc.choseName || d.Via == nil || d.Via.LinkID != tc.link.ID {
				t.Fatalf("decider %+v, want %s (chose name %v) through %s", d, tc.want, tc.choseName, tc.link.ID)
			}
		})
	}
}
