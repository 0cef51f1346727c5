package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockDatabase takes the exclusive lock that makes one server per database (issue 15 item 4): an
// flock(2) on "<db>.lock" beside the database, created 0600 with its folder, held until release
// (or until the process ends, when the kernel drops it: a killed server leaves no stale lock).
// The lock file holds the holder's pid, for the message a second start gets.
//
// Why before anything else: a second start that opened the database first used to run recovery
// and write "Interrupted by server restart" into the first server's live run before failing to
// listen. Errors: another holder ("another Countersign server is using DB (lock DB.lock held by
// pid N)"), or the file cannot be created or locked.
func lockDatabase(db string) (release func(), err error) {
	path := db + ".lock"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if b, err := os.ReadFile(path); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
					holder = "pid " + strconv.Itoa(pid)
				}
			}
			return nil, fmt.Errorf("another Countersign server is using %s (lock %s held by %s); stop it or choose another -db", db, path, holder)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	// Ours now: say who holds it. A failure here loses only the pid in a second start's message.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		// The pid is cleared before the lock goes, so a later reader never names a dead holder;
		// the file stays (removing it could race with a new holder's open).
		_ = f.Truncate(0)
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
