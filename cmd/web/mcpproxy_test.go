package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMCPProxySubcommandIsDispatchedBeforeTheServer: `countersign mcp-proxy` is the proxy, not
// the server with an unknown argument: without its token variable it says what is missing and
// exits 2, having started nothing.
func TestMCPProxySubcommandIsDispatchedBeforeTheServer(t *testing.T) {
	bin := serverBinary(t)
	cmd := exec.Command(bin, "mcp-proxy", "--", "true")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 {
		t.Fatalf("exit %v, want 2; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "--connection-token-env NAME is required") {
		t.Errorf("output %q, want the missing flag named", out)
	}
	cmd = exec.Command(bin, "mcp-proxy", "--connection-token-env", "NOPE", "--", "true")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, _ = cmd.CombinedOutput()
	if !strings.Contains(string(out), "$NOPE is empty") {
		t.Errorf("output %q, want the empty variable named", out)
	}
}
