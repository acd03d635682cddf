package audit

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestUpgradeTimes: a rolling upgrade's moments come one after the other,
// the first soon after the start and the last by about 60% of the run, so
// every node is upgraded while input still flows.
func TestUpgradeTimes(t *testing.T) {
	total := 100 * time.Second
	for seed := range uint64(50) {
		ts := upgradeTimes(rand.New(rand.NewPCG(seed, 3)), total, 3)
		if len(ts) != 3 {
			t.Fatalf("%d times for 3 nodes", len(ts))
		}
		for i, at := range ts {
			if at < 5*time.Second || at > 63*time.Second {
				t.Errorf("seed %d: upgrade %d at %s, want within 5s..63s", seed, i, at)
			}
			if i > 0 && at <= ts[i-1] {
				t.Errorf("seed %d: upgrade %d at %s, not after %s", seed, i, at, ts[i-1])
			}
		}
	}
	if ts := upgradeTimes(rand.New(rand.NewPCG(1, 3)), total, 1); len(ts) != 1 || ts[0] > 11*time.Second {
		t.Errorf("one node: %v", ts)
	}
}

// TestDescribeBin: the commit build-prev records next to the binary names
// it in the audit's output.
func TestDescribeBin(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "turbinesql-prev")
	if got := describeBin(bin); got != "turbinesql-prev" {
		t.Errorf("no commit file: %q", got)
	}
	if err := os.WriteFile(bin+".commit", []byte("640cbccef400857a857639c61bce310c8cd08916\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := describeBin(bin); got != "turbinesql-prev (commit 640cbcc)" {
		t.Errorf("with a commit file: %q", got)
	}
}
