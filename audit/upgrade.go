package audit

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// This file is the audit's rolling upgrade (-upgrade-from PREV): every
// node starts on the previous release's binary; during the run the nodes
// are upgraded one at a time (a clean stop, a restart on the binary under
// test, then a wait until the node owns tasks again and no task is left
// without an owner) while input flows and the other faults go on. The
// cluster runs mixed releases for a good part of the run, each reading
// the other's changelogs, offsets' progress, catalog, barrier and control
// records; the audit at the end covers output written by both.

// upgrade is one node's move to the binary under test.
type upgrade struct {
	node       string
	fromRun    int
	toRun      int
	at         time.Duration // since the audit's start
	down       time.Duration // from SIGTERM until the new binary serves
	tasks      int           // the node's tasks once it owned some again
	settled    time.Duration // from the new binary serving until then
	eventAt    string        // input event time reached at the upgrade
	afterInput bool          // the producer had written every row
}

// upgradeTimes are the moments of n upgrades within total (the fault
// schedule's clock, which starts with the nodes' start-up): spread from 8%
// to 60% of it, each with a little jitter, so the cluster runs both
// releases for a good part of the input and the nodes are upgraded while
// input still flows (the faults are carried out one after the other, so a
// slow restart delays the next; the summary says which upgrades came
// after the input).
func upgradeTimes(rng *rand.Rand, total time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		share := 0.08
		if n > 1 {
			share += 0.52 * float64(i) / float64(n-1)
		}
		share += 0.04 * (rng.Float64() - 0.5)
		out[i] = time.Duration(min(max(share, 0.05), 0.9) * float64(total))
	}
	return out
}

// release names the binary node m runs, in logs of a rolling upgrade.
func (c *chaos) release(m *member) string {
	switch {
	case c.prevBin == "":
		return ""
	case m.cfg.bin == c.prevBin:
		return " (previous release)"
	}
	return " (new binary)"
}

// upgrade stops node m cleanly, restarts it on the binary under test and
// waits until its groups give it tasks again with none left unowned: the
// next node's upgrade then meets a settled cluster, as an operator's
// rolling upgrade would.
func (c *chaos) upgrade(ctx context.Context, m *member, afterInput bool) error {
	c.mu.Lock()
	s, run := m.cur, m.run
	m.cur = nil
	c.mu.Unlock()
	if m.cfg.bin == c.bin {
		return fmt.Errorf("%s is upgraded already", m.name())
	}
	u := upgrade{node: m.name(), fromRun: run, at: time.Since(c.start), eventAt: c.eventTime(), afterInput: afterInput}
	t0 := time.Now()
	c.stop(m, s, run, syscall.SIGTERM)
	// The upgraded run starts without injected crashes (-crash-after-txn):
	// its start restores and commits every task it is given, and crashes
	// there, each a restart of 10-20 s on a loaded machine, made one
	// upgrade last two minutes. The node's runs after its next fault
	// inject them again, as the other nodes' do meanwhile.
	c.mu.Lock()
	m.cfg.bin = c.bin
	crash := m.cfg.crashAfterTxn
	m.cfg.crashAfterTxn = 0
	c.mu.Unlock()
	err := c.restart(ctx, m)
	c.mu.Lock()
	m.cfg.crashAfterTxn = crash
	c.mu.Unlock()
	if err != nil {
		return err
	}
	u.toRun, u.down = m.run, time.Since(t0)
	t1 := time.Now()
	tasks, err := c.awaitOwning(ctx, m)
	if err != nil {
		return err
	}
	u.tasks, u.settled = tasks, time.Since(t1)
	c.upgrades = append(c.upgrades, u)
	c.logf("UPGRADE %s: run %d (previous release) stopped cleanly at input event time %s, run %d up on the new binary %s later, owning %d tasks %s after that",
		m.name(), run, u.eventAt, u.toRun, u.down.Round(time.Millisecond), u.tasks, u.settled.Round(time.Millisecond))
	return nil
}

// upgradeRest upgrades the nodes a rolling upgrade has not reached yet
// (the run's faults ended first): at the end every node runs the binary
// under test, whatever happened.
func (c *chaos) upgradeRest(ctx context.Context) error {
	if c.prevBin == "" {
		return nil
	}
	for _, m := range c.nodes {
		if m.cfg.bin != c.bin {
			if err := c.upgrade(ctx, m, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// awaitOwning waits until the group coordinators give node m tasks again
// and leave none without an owner (SHOW TASKS on m, or on any node that
// answers), restarting nodes that crashed themselves meanwhile (injected
// crashes are planned faults). A node that never gets tasks back fails
// the run: a rolling upgrade must not leave a node idle.
func (c *chaos) awaitOwning(ctx context.Context, m *member) (int, error) {
	deadline := time.Now().Add(3*c.sessionTimeout() + 60*time.Second)
	for {
		if err := c.ensureUp(ctx); err != nil {
			return 0, err
		}
		held, unowned, err := 0, 0, fmt.Errorf("no node answers")
		for _, n := range append([]*member{m}, c.others(m)...) {
			if held, unowned, err = c.tasksOf(ctx, n, m.cfg.nodeID); err == nil {
				break
			}
		}
		if err == nil && (held > 0 || len(c.nodes) == 1) && unowned == 0 {
			return held, nil
		}
		if time.Now().After(deadline) {
			return 0, engineFailure{fmt.Errorf("%s upgraded: it owns %d tasks and %d have no owner after %s (last error: %v)",
				m.name(), held, unowned, 3*c.sessionTimeout()+60*time.Second, err)}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// printUpgrades prints the rolling upgrade: when each node moved, how long
// it was down and how long until it owned tasks again, and which binary
// every node ran at the end.
func (c *chaos) printUpgrades(w io.Writer) {
	fmt.Fprintf(w, "rolling upgrade from %s to %s:\n", describeBin(c.prevBin), describeBin(c.bin))
	for _, u := range c.upgrades {
		when := "during the input"
		if u.afterInput {
			when = "after the input"
		}
		fmt.Fprintf(w, "  %s at %.1fs (%s, input event time %s): run %d -> run %d, down %s, owning %d tasks %s later\n",
			u.node, u.at.Seconds(), when, u.eventAt, u.fromRun, u.toRun, u.down.Round(time.Millisecond), u.tasks, u.settled.Round(time.Millisecond))
	}
	var ends []string
	for _, m := range c.nodes {
		ends = append(ends, fmt.Sprintf("%s run %d on %s", m.name(), m.run, filepath.Base(m.cfg.bin)))
	}
	fmt.Fprintf(w, "  at the end: %s\n", strings.Join(ends, ", "))
}

// describeBin names a binary and, when the Makefile recorded it next to
// the binary (build-prev writes PATH.commit), the commit it was built
// from.
func describeBin(path string) string {
	if b, err := os.ReadFile(path + ".commit"); err == nil {
		if commit := strings.TrimSpace(string(b)); len(commit) >= 7 {
			return fmt.Sprintf("%s (commit %s)", filepath.Base(path), commit[:7])
		}
	}
	return filepath.Base(path)
}
