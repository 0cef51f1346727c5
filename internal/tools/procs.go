package tools

import (
	"countersign/internal/procenv"
	"countersign/internal/tool"
)

// What every process a tool starts gets, so that none outlives the server unrecorded (SPEC §8: a
// call the server was running when it died is recorded as "Interrupted by server restart" and
// never runs again; issue 28): its own process group and the parent-death signal (childAttr),
// and the call's marker in its environment (callEnv), by which a restarted server finds and
// kills what its interrupted calls left running before it records them (internal/orphans).
//
// A process started for a call, whichever code starts it (process.run, codemode's worker,
// run_command's interpreter), is started like this:
//
//	runtime.LockOSThread() // until the process has been waited for: see childAttr
//	defer runtime.UnlockOSThread()
//	cmd.SysProcAttr = childAttr()
//	cmd.Env = callEnv(env, cfg) // cfg from cfg.forCall(tc), in the tool's Execute
//	err := cmd.Start()
//	…
//	err = cmd.Wait()

// forCall returns cfg for one call of a tool, the one tc runs: the processes the call starts
// are marked with it (callEnv; environ does it for the commands it builds the environment of).
// Each tool that starts processes calls it first in its Execute.
func (cfg Config) forCall(tc tool.Context) Config {
	cfg.call = procenv.Call{Store: cfg.StoreID, SessionID: tc.SessionID(), ToolCallID: tc.ToolCallID()}
	return cfg
}

// callEnv returns env ("NAME=value" entries, as exec.Cmd.Env takes them) for a process of the
// call cfg was made for (forCall), marked with the call: procenv.CallVar (then OwnerVar) set last, replacing any
// entry of that name (a configured one, a script's own). Given to each program that
// run_command's interpreter starts (its exec handler), it marks every one of them whatever the
// script did to its variables (`unset COUNTERSIGN_CALL`); what those programs start inherits it
// unless they drop it (env -i: see internal/orphans). Beside it, procenv.OwnerVar names this
// server: another replica taking the session over kills them only once this server is gone
// (issue 33). With a cfg that was not made for a call (tests calling a tool's function) env is returned as it is. The result is never nil, which
// exec.Cmd would take as the server's whole environment ([]string{} for a nil env then); it is a
// new slice when it differs from env.
func callEnv(env []string, cfg Config) []string {
	if cfg.call == (procenv.Call{}) {
		if env == nil {
			return []string{}
		}
		return env
	}
	return procenv.WithOwner(procenv.WithCall(env, cfg.call))
}
