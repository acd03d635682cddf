package dataflow

import (
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/state"
)

// TestStateTTL: an upsert stream with state_ttl forgets a group not
// changed for the TTL, writes a tombstone for its key, and counts it
// afresh when it comes back; a group changed meanwhile stays, also across
// a restart (the time stamps are stored with the groups).
func TestStateTTL(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k`, "auto")
	store, err := state.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	now := time.Unix(1000, 0)
	open := func() *rig {
		r := newRig(t, store, 0, 1, &Source{Input: p.Input, TimeIdx: -1}, &HashAgg{Plan: p, StateTTL: 10 * time.Second},
			&Project{Filter: p.Having, Exprs: p.Project, Tombstones: true}, &Sink{Topic: "out", Partitions: 1, Schema: p.Output})
		r.now = now
		return r
	}
	step := func(r *rig, d time.Duration, off int64) map[string]string {
		now = now.Add(d)
		r.now = now
		r.watermark(0, false)
		r.commit(off)
		out := map[string]string{}
		for _, rec := range r.out.take() {
			out[string(rec.Key)] = string(rec.Value)
		}
		return out
	}
	r := open()
	r.feed(ev(0, 0, "a,x,1,1", "b,x,1,1"))
	if got := step(r, 0, 2); len(got) != 2 {
		t.Fatalf("first changes %v", got)
	}
	r.feed(ev(0, 2, "a,x,1,2"))
	if got := step(r, 6*time.Second, 3); len(got) != 1 || got["a"] == "" {
		t.Fatalf("a changed: %v", got)
	}
	for _, op := range r.ops {
		op.Close()
	}
	r = open() // restart: b's stamp is 6 s old, a's fresh
	if got := step(r, 5*time.Second, 3); len(got) != 1 || got["b"] != "" {
		t.Fatalf("b (11 s unchanged) should be a tombstone alone, got %v", got)
	} else if _, ok := got["b"]; !ok {
		t.Fatalf("no tombstone for b: %v", got)
	}
	r.feed(ev(0, 3, "b,x,1,3", "a,x,1,3"))
	got := step(r, time.Second, 5)
	if got["b"] != `{"k":"b","n":1}` || got["a"] != `{"k":"a","n":3}` {
		t.Fatalf("b counted afresh, a kept: %v", got)
	}
	if got := step(r, 11*time.Second, 5); len(got) != 2 || got["a"] != "" || got["b"] != "" {
		t.Fatalf("both expire: %v", got)
	}
	n := 0
	if err := store.Accs("s", func(uint16, []byte, int64, []byte) error { n++; return nil }); err != nil || n != 0 {
		t.Fatalf("old layout holds %d groups (%v)", n, err)
	}
	ws, err := store.GroupWindows("s")
	if err != nil || len(ws) != 0 {
		t.Fatalf("state still holds groups of windows %v (%v)", ws, err)
	}
}
