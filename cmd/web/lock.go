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

// lockDatabase takes the exclusive locks that make one server per database (issue 15 item 4),
// held until release (or until the process ends, when the kernel drops them: a killed server
// leaves no stale lock):
//
//   - an flock(2) on the database file itself, created 0600 when missing. A lock on the file is a
//     lock on its inode, so every name of the database (the path as typed, a symlink, a hard
//     link, a path through a symlinked folder) meets it;
//   - an flock(2) on "<db>.lock" beside the database's real path (symlinks resolved), created
//     0600, which holds the holder's pid for the message a second start gets (and is what servers
//     before this one locked).
//
// Why before anything else: a second start that opened the database first used to run recovery
// and write "Interrupted by server restart" into the first server's live run before failing to
// listen. Errors: another holder ("another Countersign server is using DB (lock REAL.lock held by
// pid N)", or, when the database is reached through a hard link, "… (its database file is locked
// by another process …)"), or the files cannot be created or locked.
//
// Why the flock cannot disturb SQLite: on Linux flock(2) locks and the POSIX fcntl(2) locks
// SQLite takes are independent (a local filesystem; over NFS flock is emulated with fcntl locks,
// and SQLite's WAL mode is not supported there anyway). SQLite's caveat is that closing any
// descriptor of the database drops every fcntl lock the process holds on it: ours is opened
// before SQLite opens the file and closed only by release, which run defers so that it runs
// after the database is closed, at exit.
func lockDatabase(db string) (release func(), err error) {
	abs, err := filepath.Abs(db)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
		return nil, err
	}
	dbf, err := os.OpenFile(abs, os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the database to lock it: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		dbf.Close()
		return nil, err
	}
	path := real + ".lock"
	if err := syscall.Flock(int(dbf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		dbf.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			if pid := lockHolder(path); pid > 0 {
				return nil, inUse(db, path, pid)
			}
			return nil, fmt.Errorf("another Countersign server is using %s (its database file is locked by another process, which may reach it by another name: a hard link); stop it or choose another -db", db)
		}
		return nil, fmt.Errorf("locking %s: %w", real, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		dbf.Close()
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		dbf.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, inUse(db, path, lockHolder(path))
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
		dbf.Close() // after store's Close (see above); the flock goes with it
	}, nil
}

// lockHolder is the pid a lock file names, or 0.
func lockHolder(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// inUse is a second start's error: another server holds the lock file path of database db.
func inUse(db, path string, pid int) error {
	holder := "another process"
	if pid > 0 {
		holder = "pid " + strconv.Itoa(pid)
	}
	return fmt.Errorf("another Countersign server is using %s (lock %s held by %s); stop it or choose another -db", db, path, holder)
}
