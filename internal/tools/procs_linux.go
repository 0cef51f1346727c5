//go:build linux

package tools

import "syscall"

// childAttr returns the attributes of a process a tool starts: its own process group (Setpgid),
// so that one signal to -pgid ends it and whatever it started there (killGroup: when the call is
// cancelled, times out or returns), and the parent-death signal SIGKILL (Pdeathsig,
// prctl(2) PR_SET_PDEATHSIG), so that it dies with the server: a crash or a kill -9 ends it
// rather than leaving it to run on after the restart has recorded its call as interrupted.
//
// Go's caveat (syscall.SysProcAttr.Pdeathsig): Linux sends the signal when the thread that
// started the process exits, not the process. The Go runtime ends a thread only when a goroutine
// locked to it (runtime.LockOSThread) exits still locked; nothing in this server does that
// today, but a library may. So the goroutine that starts the process locks itself to its thread
// from before Start until Wait has returned, and unlocks then: no other goroutine can run on the
// thread meanwhile, so none can end it while the process lives; the goroutine itself returns
// unlocked, so the thread is not ended afterwards either. The cost is that the thread waits with
// the goroutine, which Wait's blocking wait4(2) does already.
//
// The signal reaches the process only, not what it starts (the kernel clears it in a child):
// those are in its process group unless they left it (setsid), and carry the call's marker
// (callEnv), by which a restarted server finds and kills them (internal/orphans). Go's
// fork checks that the parent did not die before the child set the signal.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
