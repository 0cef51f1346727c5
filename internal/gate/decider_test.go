package gate

import (
	"testing"

	"countersign/internal/apperr"
)

// TestDeciderPermit: the owner may do everything; a reviewer only what their link's rights
// allow, refused with apperr.Forbidden naming the right (SPEC §7, issue 15 item 1).
func TestDeciderPermit(t *testing.T) {
	via := &LinkRef{LinkID: "l1", Label: "x"}
	for _, tc := range []struct {
		name   string
		d      Decider
		scope  Scope
		edited bool
		want   apperr.Code
	}{
		{"owner approves once", Owner(), Once, false, ""},
		{"owner edits and approves for the session", Owner(), Session, true, ""},
		{"reviewer without rights approves once", Decider{Name: "a", Via: via}, Once, false, ""},
		{"reviewer without rights edits", Decider{Name: "a", Via: via}, Once, true, apperr.Forbidden},
		{"reviewer without rights approves for the session", Decider{Name: "a", Via: via}, Session, false, apperr.Forbidden},
		{"reviewer with Edit edits", Decider{Name: "a", Via: via, Rights: Rights{Edit: true}}, Once, true, ""},
		{"reviewer with Edit approves for the session", Decider{Name: "a", Via: via, Rights: Rights{Edit: true}}, Session, false, apperr.Forbidden},
		{"reviewer with Remember approves for the session", Decider{Name: "a", Via: via, Rights: Rights{Remember: true}}, Session, false, ""},
		{"reviewer with Remember edits", Decider{Name: "a", Via: via, Rights: Rights{Remember: true}}, Session, true, apperr.Forbidden},
		{"nobody", Decider{}, Once, false, apperr.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := apperr.CodeOf(tc.d.Permit(tc.scope, tc.edited)); got != tc.want {
				t.Errorf("Permit(%s, edited %v) = %q, want %q", tc.scope, tc.edited, got, tc.want)
			}
		})
	}
}
