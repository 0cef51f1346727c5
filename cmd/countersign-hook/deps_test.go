package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestTheHookLinksOnlyTheStandardLibrary: the hook runs for every tool call and must start in
// milliseconds (issue 30: 3 ms against curl's 6 ms here), so its only non-standard packages are
// itself and internal/hookclient. A new import of the server's packages (internal/hooks pulls
// jsonschema through internal/tool) fails here.
func TestTheHookLinksOnlyTheStandardLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	got := strings.Fields(string(out))
	slices.Sort(got)
	want := []string{"countersign/cmd/countersign-hook", "countersign/internal/hookclient"}
	if !slices.Equal(got, want) {
		t.Errorf("non-standard dependencies %q, want %q", got, want)
	}
}
