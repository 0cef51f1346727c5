// Package orphans ends what a tool call left running when the server that ran it died (SPEC §8:
// a call that was executing when the process died is never re-run, and gets the result
// "Interrupted by server restart"; that record must be true, so nothing of the call may run on
// after it).
//
// Every process a tool starts has the parent-death signal and its own process group, so a crash
// kills it, but not what it started: those live on, re-parented, and a `sleep 30; touch x` in a
// subshell would still touch x after the restart. They carry the call's marker in their
// environment (procenv.CallVar, inherited by whatever they start), by which Kill finds them:
// on Linux by reading /proc/<pid>/environ, which also works for a process that left the call's
// process group or session (setsid). A process that dropped the marker from its environment
// (env -i) is found only through its process group, when a marked process is left in it; one
// whose group has no marked process left, or that also left the group, is out of its reach.
//
// The package imports only procenv, so the agent's recovery can use it without the tools.
package orphans

import (
	"fmt"
	"time"
)

// KillWait bounds how long Kill waits for the processes it killed to be gone. SIGKILL cannot be
// caught, so only a process stuck in the kernel (uninterruptible sleep, on a hung NFS mount say)
// outlives it; it runs none of its own code again.
const KillWait = 5 * time.Second

// pollEvery is how often Kill looks again for the call's processes.
const pollEvery = 10 * time.Millisecond

// SurvivedError is Kill's error when some of the call's processes were still there KillWait after
// they were sent SIGKILL.
type SurvivedError struct {
	PIDs []int
}

func (e *SurvivedError) Error() string {
	return fmt.Sprintf("processes %v were still there %v after SIGKILL", e.PIDs, KillWait)
}
