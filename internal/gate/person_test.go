package gate_test

import (
	"testing"

	"countersign/internal/gate"
)

func TestPersonKeyMakesLookAlikeNamesOnePerson(t *testing.T) {
	for _, name := range []string{"alice", "Alice", "\u0430lice", "ALİCE", "ᴀlice", "ａｌｉｃｅ", "álice", "al\u200bice", " alice\u202e "} {
		if !gate.SamePerson("alice", name) {
			t.Errorf("SamePerson(alice, %q) = false, want true (keys %q, %q)", name, gate.PersonKey("alice"), gate.PersonKey(name))
		}
	}
	for _, pair := range [][2]string{{"", ""}, {"\u200b", ""}, {"\u200b", "\u200b"}} {
		if gate.SamePerson(pair[0], pair[1]) {
			t.Errorf("SamePerson(%q, %q) = true: a name with nothing visible is no one", pair[0], pair[1])
		}
	}
	for _, name := range []string{"bob", "alicia", "al ice2"} {
		if gate.SamePerson("alice", name) {
			t.Errorf("SamePerson(alice, %q) = true, want false", name)
		}
	}
}

func TestCheckQuorumRefusesLookAlikeReviewersAsOnePersonListedTwice(t *testing.T) {
	r := gate.Rule{Effect: gate.Ask, Approvers: 2, Reviewers: []string{"alice", "\u0430lice"}}
	err := r.CheckQuorum()
	if err == nil || err.Error() != `reviewers "alice" and "аlice" are one person (the names look alike)` {
		t.Fatalf("CheckQuorum = %v, want the look-alike names refused", err)
	}
	r.Reviewers = []string{"alice", "\u200b"}
	if err := r.CheckQuorum(); err == nil || err.Error() != "a reviewer's name is empty" {
		t.Errorf("CheckQuorum(a zero-width space) = %v, want it refused as empty", err)
	}
	r.Reviewers = []string{"alice", "bob"}
	if err := r.CheckQuorum(); err != nil {
		t.Fatalf("alice, bob: %v", err)
	}
}
