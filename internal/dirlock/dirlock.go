// Package dirlock keeps one server per data dir: an exclusive lock on a
// file in the dir, holding the owner's pid and addresses, so a second
// server started on the same dir can say who holds it instead of failing
// later on Pebble's own lock with "resource temporarily unavailable".
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// FileName is the lock file in the data dir.
const FileName = "turbine.pid"

// Lock is a held data-dir lock.
type Lock struct{ f *os.File }

// HeldError says the dir is locked by another process; Owner is what that
// process wrote (pid and addresses), empty when it wrote nothing yet.
type HeldError struct {
	Dir   string
	Owner string
}

func (e *HeldError) Error() string {
	who := "another TurbineSQL server"
	if e.Owner != "" {
		who += " (" + e.Owner + ")"
	}
	return fmt.Sprintf("data dir %s is in use by %s: stop it, or pass another --data-dir", e.Dir, who)
}

// Acquire takes the lock of dir without waiting, and writes this
// process's pid into the file.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := os.ReadFile(path)
			return nil, &HeldError{Dir: dir, Owner: strings.Join(strings.Fields(string(b)), " ")}
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	l := &Lock{f: f}
	if err := l.Describe(); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// Describe rewrites the file: "pid N" and the given "name addr" pairs
// (the addresses the server listens on, once it knows them).
func (l *Lock) Describe(pairs ...string) error {
	s := fmt.Sprintf("pid %d", os.Getpid())
	for i := 0; i+1 < len(pairs); i += 2 {
		s += fmt.Sprintf(", %s %s", pairs[i], pairs[i+1])
	}
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("write data dir lock: %w", err)
	}
	if _, err := l.f.WriteAt([]byte(s+"\n"), 0); err != nil {
		return fmt.Errorf("write data dir lock: %w", err)
	}
	return nil
}

// Release empties the file and drops the lock.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = l.f.Close() // closing the descriptor drops the flock
	l.f = nil
}
