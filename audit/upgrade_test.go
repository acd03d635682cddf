package audit

import (
	"math/rand/v2"
	"os"
	"os/exec"
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

// TestCrashedOthers: the nodes a failed FLUSH may have waited for are
// those whose run exited by a crash it injected (exit 77), not one that
// runs, nor one that exited otherwise, nor the node the FLUSH ran on.
func TestCrashedOthers(t *testing.T) {
	exited := func(code string) *server {
		s := &server{exited: make(chan struct{})}
		s.err = exec.Command("sh", "-c", "exit "+code).Run()
		close(s.exited)
		return s
	}
	running := &server{exited: make(chan struct{})}
	nodes := []*member{
		{cfg: serverConfig{nodeID: "node1"}, cur: exited("77")},
		{cfg: serverConfig{nodeID: "node2"}, cur: exited("77")},
		{cfg: serverConfig{nodeID: "node3"}, cur: exited("1")},
		{cfg: serverConfig{nodeID: "node4"}, cur: running},
		{cfg: serverConfig{nodeID: "node5"}},
	}
	c := &chaos{nodes: nodes}
	if got := c.crashedOthers(nodes[0]); len(got) != 1 || got[0] != "node2" {
		t.Errorf("crashedOthers(node1) = %v, want [node2]", got)
	}
	if got := c.crashedOthers(nodes[3]); len(got) != 2 {
		t.Errorf("crashedOthers(node4) = %v, want [node1 node2]", got)
	}
}
