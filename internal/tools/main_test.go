package tools

import (
	"os"
	"testing"
)

// TestMain makes this package's test binary a codemode worker when it is started as one (the
// default CodemodeConfig.Command runs /proc/self/exe, here the test binary, with
// CodemodeWorkerArg), or one of the misbehaving workers of the protocol tests, or a stand-in for
// a server (procsServer).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case CodemodeWorkerArg:
			os.Exit(ServeCodemodeWorker(os.Stdin, os.Stdout))
		case fakeWorkerArg:
			os.Exit(fakeWorker(os.Args[2:]))
		case procsServerArg:
			os.Exit(procsServer(os.Args[2:]))
		}
	}
	os.Exit(m.Run())
}
