package dirlock

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// A second Acquire of a held dir fails naming the holder's pid and
// addresses; after Release the dir can be taken again. flock locks are per
// open file description, so a second open in the same process conflicts
// like another process would.
func TestSecondAcquireNamesTheHolder(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Describe("pgwire", "127.0.0.1:5433", "http", "127.0.0.1:8081"); err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir)
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second Acquire: %v, want a HeldError", err)
	}
	want := fmt.Sprintf("pid %d, pgwire 127.0.0.1:5433, http 127.0.0.1:8081", os.Getpid())
	if held.Owner != want || !strings.Contains(err.Error(), "in use by another TurbineSQL server ("+want+")") {
		t.Fatalf("error %q (owner %q), want the owner %q", err, held.Owner, want)
	}
	l.Release()
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	l2.Release()
}
