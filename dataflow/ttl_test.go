package dataflow_test

import (
	"testing"
	"time"

	. "github.com/turbinesql/turbinesql/dataflow"
)

// TestStateTTL: an upsert stream with state_ttl forgets a group not
// changed for the TTL, writes a tombstone for its key, and counts it
// afresh when it comes back; a group changed meanwhile stays, also across
// a restart (the time stamps are stored with the groups).
func TestStateTTL(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k`, "auto")
	h := evHarness(t, 1, chain(func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: -1}, &HashAgg{Plan: p, StateTTL: 10 * time.Second},
			&Project{Filter: p.Having, Exprs: p.Project, Tombstones: true}, &Sink{Topic: "out", Partitions: 1, Schema: p.Output}}
	}))
	task := h.Task(0)
	step := func(d time.Duration) map[string]string {
		t.Helper()
		h.Elapse(d)
		task.Advance(0)
		out := map[string]string{}
		for _, rec := range task.Take() {
			out[string(rec.Key)] = string(rec.Value)
		}
		return out
	}
	task.Push(0, "a,x,1,1", "b,x,1,1")
	if got := step(0); len(got) != 2 {
		t.Fatalf("first changes %v", got)
	}
	task.Push(2, "a,x,1,2")
	if got := step(6 * time.Second); len(got) != 1 || got["a"] == "" {
		t.Fatalf("a changed: %v", got)
	}
	h.Restart() // b's stamp is 6 s old, a's fresh
	if got := step(5 * time.Second); len(got) != 1 || got["b"] != "" {
		t.Fatalf("b (11 s unchanged) should be a tombstone alone, got %v", got)
	} else if _, ok := got["b"]; !ok {
		t.Fatalf("no tombstone for b: %v", got)
	}
	task.Push(3, "b,x,1,3", "a,x,1,3")
	got := step(time.Second)
	if got["b"] != `{"k":"b","n":1}` || got["a"] != `{"k":"a","n":3}` {
		t.Fatalf("b counted afresh, a kept: %v", got)
	}
	if got := step(11 * time.Second); len(got) != 2 || got["a"] != "" || got["b"] != "" {
		t.Fatalf("both expire: %v", got)
	}
	n := 0
	if err := h.Store().Accs("s", func(uint16, []byte, int64, []byte) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("old layout holds %d groups (%v)", n, err)
	}
	ws, err := h.Store().GroupWindows("s")
	if err != nil || len(ws) != 0 {
		t.Fatalf("state still holds groups of windows %v (%v)", ws, err)
	}
}
