package gate_test

import (
	"testing"

	"countersign/internal/gate"
)

func TestPersonKeyMakesLookAlikeNamesOnePerson(t *testing.T) {
	for _, name := range []string{"alice", "Alice", "\u0430lice", "ALİCE", "ᴀlice", "ａｌｉｃｅ", "álice"} {
		if !gate.SamePerson("alice", name) {
			t.Errorf("SamePerson(alice, %q) = false, want true (keys %q, %q)", name, gate.PersonKey("alice"), gate.PersonKey(name))
		}
	}
	for _, name := range []string{"bob", "alicia", "al ice2"} {
		if gate.SamePerson("alice", name) {
			t.Errorf("SamePerson(alice, %q) = true, want false", name)
		}
	}
}
