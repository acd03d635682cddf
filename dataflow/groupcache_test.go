package dataflow_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	. "github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/dataflow/optest"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/types"
)

// eventSeconds is the event time the metamorphic test's rows span.
const eventSeconds = 30

// TestGroupCacheMetamorphic runs the same seeded input through an
// aggregation twice, with a 1 MB group cache and with an unlimited one,
// across a crash (uncommitted input replayed) and a clean restart, and
// requires the same panes: the cache may change where groups live, never
// what is emitted. A cached run must really have evicted groups.
func TestGroupCacheMetamorphic(t *testing.T) {
	queries := map[string]string{
		"tumble": tumbleSQL,
		"hop": `CREATE STREAM s AS SELECT k, HOP_START(ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS total
			FROM ev GROUP BY k, HOP(ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND)`,
		"session": `CREATE STREAM s AS SELECT k, SESSION_START(ts, INTERVAL '4' SECOND) AS ss, COUNT(*) AS n, SUM(v) AS total
			FROM ev GROUP BY k, SESSION(ts, INTERVAL '4' SECOND)`,
		"upsert": `CREATE STREAM s AS SELECT k, COUNT(*) AS n, SUM(v) AS total FROM ev GROUP BY k HAVING SUM(v) % 7 <> 3`,
	}
	rows := metamorphicRows(40000, 40000)
	queries["tumble_emit_every"] = tumbleSQL
	queries["session_emit_every"] = queries["session"]
	for name, q := range queries {
		t.Run(name, func(t *testing.T) {
			var every time.Duration
			if strings.HasSuffix(name, "_emit_every") {
				every = 2 * time.Second
			}
			session := strings.HasPrefix(name, "session")
			rows := rows
			if name == "session_emit_every" {
				// Its early fires read every stored session twice at each
				// commit: half the input keeps it as quick as the others.
				rows = rows[:len(rows)/2]
			}
			// The 1 MB run's clean restart is on another node: an empty
			// disk, restored from the changelog of its commits.
			small, smallMax, deltas := runCached(t, q, rows, NewCacheBudget(1), runCachedOnly, every, true)
			full, fullMax, _ := runCached(t, q, rows, nil, runCachedOnly, every, false)
			eager, _, _ := runCached(t, q, rows, nil, runEager, every, false)
			if name == "session" || name == "tumble" {
				// State written by a task without the cache (an earlier
				// version), then taken up by one with it: groups moved to
				// the cached layout, sessions indexed by end, at its start.
				// (HOP and upsert move as TUMBLE does: one run fewer each
				// under -race.)
				upgraded, _, _ := runCached(t, q, rows, NewCacheBudget(1), runEagerFirst, every, false)
				if !slices.Equal(upgraded, eager) {
					t.Fatalf("no cache, then a 1 MB cache after a restart: %d records, no cache: %d; differences %s", len(upgraded), len(eager), firstDiff(upgraded, eager))
				}
			}
			if !slices.Equal(full, eager) {
				t.Fatalf("unlimited cache: %d records, no cache: %d; differences %s", len(full), len(eager), firstDiff(full, eager))
			}
			if len(full) == 0 {
				t.Fatal("no output")
			}
			if !slices.Equal(small, full) {
				t.Fatalf("1 MB cache: %d records, unlimited: %d; first difference %s", len(small), len(full), firstDiff(small, full))
			}
			// The 1 MB cache holds about 6,400 groups: at its peak the
			// unlimited run holds half as many again or more (a fifth
			// fewer in memory shows keys left it; sessions, which close
			// as the watermark passes, a quarter fewer).
			if evicted := !session && smallMax*5 <= fullMax*4 || session && smallMax*4 <= fullMax*3; !evicted {
				t.Fatalf("1 MB cache held up to %d groups, unlimited %d: nothing was evicted", smallMax, fullMax)
			}
			// COUNT(*) and SUM(BIGINT) merge exactly: windowed runs write
			// blind (partials), the upsert stream reads.
			if blind := !session && name != "upsert"; blind != (deltas > 0) {
				t.Fatalf("1 MB cache stored %d partials (blind writes expected: %v)", deltas, blind)
			}
			if session || name == "upsert" {
				return
			}
			// A 64 MB cache holds every group, but windows go cold past 50
			// (HotWindowGroups), as past 2^17 at scale: their rows are held
			// and stored as partials, and the panes do not change.
			capped := NewCacheBudget(64)
			capped.HotWindowGroups = 50
			got, cappedMax, _ := runCached(t, q, rows, capped, runCachedOnly, every, true)
			if !slices.Equal(got, full) {
				t.Fatalf("windows cold past 50 groups: %d records, unlimited: %d; first difference %s", len(got), len(full), firstDiff(got, full))
			}
			if cappedMax*5 > fullMax*4 {
				t.Fatalf("windows cold past 50 groups held up to %d groups, unlimited %d: none went cold", cappedMax, fullMax)
			}
		})
	}
}

// TestLargeCommitsMetamorphic: commits of very different sizes one after
// another (one of 40,000 rows, then nineteen of 500), so that a commit's
// writes and held rows are bucketed by key group before their sort and
// the next ones are not, with 100,000 keys, across a crash and a move,
// with a 1 MB cache and with a large one whose windows go cold past 1,000
// groups: the panes are those of an unlimited cache.
func TestLargeCommitsMetamorphic(t *testing.T) {
	rows := metamorphicRows(100000, 120000)
	in := inputOf(tumbleSQL, ev(0, 0, rows...))
	in.commitAfter = func(b int64) bool { return b%100 >= 80 }
	full, fullMax, _ := runCachedOn(t, in, nil, runCachedOnly, 0, false)
	if len(full) == 0 {
		t.Fatal("no output")
	}
	capped := NewCacheBudget(64)
	capped.HotWindowGroups = 1000
	for name, budget := range map[string]*CacheBudget{"1 MB cache": NewCacheBudget(1), "64 MB cache, windows cold past 1,000 groups": capped} {
		got, maxGroups, _ := runCachedOn(t, in, budget, runCachedOnly, 0, true)
		if !slices.Equal(got, full) {
			t.Fatalf("%s: %d records, unlimited: %d; first difference %s", name, len(got), len(full), firstDiff(got, full))
		}
		if maxGroups*2 > fullMax {
			t.Fatalf("%s held up to %d groups, unlimited %d: its windows' rows were not held", name, maxGroups, fullMax)
		}
	}
}

// TestSessionColdCloseMetamorphic: sessions of a 1-hour gap stay open
// through the input, and those of keys not seen again after the restart
// are only in the store when the last watermark closes them all: with a
// 64 MB cache the close reads their keys 32,768 at a time (closeReadKeys)
// and hands their sessions on 4,096 a batch; with a 1 MB one, 4,096 at a
// time. Both give the unlimited cache's panes.
func TestSessionColdCloseMetamorphic(t *testing.T) {
	q := `CREATE STREAM s AS SELECT k, SESSION_START(ts, INTERVAL '1' HOUR) AS ss, COUNT(*) AS n, SUM(v) AS total
		FROM ev GROUP BY k, SESSION(ts, INTERVAL '1' HOUR)`
	rows := metamorphicRows(40000, 40000)
	full, _, _ := runCached(t, q, rows, nil, runCachedOnly, 0, false)
	if len(full) < 20000 {
		t.Fatalf("%d sessions closed", len(full))
	}
	for _, mb := range []int{64, 1} {
		if got, _, _ := runCached(t, q, rows, NewCacheBudget(mb), runCachedOnly, 0, true); !slices.Equal(got, full) {
			t.Fatalf("%d MB cache: %d records, unlimited: %d; first difference %s", mb, len(got), len(full), firstDiff(got, full))
		}
	}
}

// TestSessionColdCloseEarlyFire: a watermark whose cold close reads more
// than 4,096 due keys in one pass (closeReadKeys: 32,768 at 64 MB) and
// fires EMIT EVERY at once, between the close's first batch and the rest.
// The early pane holds each open session once, and a second fire with
// nothing changed sends nothing. (The pass's keys once stayed in memory
// with only their due sessions: the fire took them for keys wholly in
// memory and missed, or later sent again, their open ones; kept in
// memory whole, they were sent twice, from memory and, once released,
// from the store. Found by a review.)
func TestSessionColdCloseEarlyFire(t *testing.T) {
	for _, inMemory := range []bool{false, true} {
		t.Run(fmt.Sprint("open session in memory ", inMemory), func(t *testing.T) {
			q := `CREATE STREAM s AS SELECT k, SESSION_START(ts, INTERVAL '10' SECOND) AS ss, COUNT(*) AS n, SUM(v) AS total
		FROM ev GROUP BY k, SESSION(ts, INTERVAL '10' SECOND)`
			p := planOf(t, q, "auto")
			const keys = 10000
			var rows []string
			for k := 0; k < keys; k++ {
				rows = append(rows, fmt.Sprintf("k%d,u,1,0", k)) // session [0 s, 10 s)
			}
			for k := 0; k < keys; k++ {
				rows = append(rows, fmt.Sprintf("k%d,u,2,100", k)) // session [100 s, 110 s): stays open
			}
			h := evHarness(t, 1, chain(func() []Op {
				agg := &HashAgg{Plan: p, Cache: NewCacheBudget(64), EmitEvery: time.Second}
				schema := append(append(types.Schema{}, p.Output...), types.Field{Name: "is_final", Type: types.Bool})
				return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, agg,
					&Project{Filter: p.Having, Exprs: p.Project, AddFinal: true}, &Sink{Topic: "out", Partitions: 4, Schema: schema}}
			}))
			task := h.Task(0)
			task.Push(0, rows...)
			task.Advance(5_000) // closes nothing
			task.Take()
			h.Restart() // nothing in memory
			// A row of a key never stored (its Process sets the cache share,
			// so closeReadKeys is 32,768): closed at 60 s, or open.
			zz := "zz,u,1,0"
			if inMemory {
				zz = "zz,u,1,100"
			}
			task.Push(int64(len(rows)), zz)
			h.Elapse(time.Minute) // EMIT EVERY due
			task.Advance(60_000)  // closes the 10,000 stored sessions [0 s, 10 s)
			final, early := map[string]int{}, map[string]int{}
			for _, v := range values(t, task.Take()) {
				if k := v["k"].(string); v["is_final"].(bool) {
					final[k]++
				} else {
					early[k]++
				}
			}
			if len(final) < keys {
				t.Fatalf("%d sessions closed, want %d", len(final), keys)
			}
			missing := 0
			for k := 0; k < keys; k++ {
				if early[fmt.Sprintf("k%d", k)] != 1 {
					missing++
				}
			}
			if missing > 0 {
				t.Fatalf("early pane: %d of %d open sessions not there once", missing, keys)
			}
			h.Elapse(time.Minute)
			task.Advance(61_000) // nothing changed
			if n := len(task.Take()); n > 0 {
				t.Fatalf("an early fire with nothing changed sent %d rows", n)
			}
		})
	}
}

// metamorphicRows is the metamorphic tests' seeded input: events rows
// over eventSeconds of event time, a little out of order (up to 5 s behind,
// as the watermark is, so a window gets rows until it closes), on keys of
// which a fifth are a hot share that comes back to a window after leaving
// memory (so a group meets its stored self).
func metamorphicRows(keys, events int) []string {
	rng := rand.New(rand.NewPCG(7, 13))
	rows := make([]string, events)
	for i := range rows {
		sec := max(int64(i)*eventSeconds/int64(events)-rng.Int64N(5), 0)
		k := rng.IntN(keys)
		if rng.IntN(5) == 0 {
			k = rng.IntN(400)
		}
		rows[i] = fmt.Sprintf("k%d,u,%d,%d", k, rng.IntN(100), sec)
	}
	return rows
}

// TestMergeStageCacheMetamorphic is TestGroupCacheMetamorphic for a
// combine's merge stage: the same partials (three source partitions'
// pre-aggregations of the seeded rows, a tenth of them delivered twice, as
// a source that shipped and crashed before its commit ships again) through
// a 1 MB cache, an unlimited one and none, across a crash and a clean
// restart on another node, give the same panes. A partial replaces its
// source's last one of the group, so a group that left memory must be read
// back before one is applied (a blind write would count a second delivery
// twice, and one missing its other sources would drop their rows).
func TestMergeStageCacheMetamorphic(t *testing.T) {
	queries := map[string]string{
		"tumble": tumbleSQL,
		"hop": `CREATE STREAM s AS SELECT k, HOP_START(ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS total
			FROM ev GROUP BY k, HOP(ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND)`,
	}
	rows := metamorphicRows(16000, 24000)
	for name, q := range queries {
		t.Run(name, func(t *testing.T) {
			// (Early fires read a window as its close does: the other
			// metamorphic test covers them.)
			const every = 0
			in := combinePartials(t, q, rows, 3)
			small, smallMax, deltas := runCachedOn(t, in, NewCacheBudget(1), runCachedOnly, every, true)
			full, fullMax, _ := runCachedOn(t, in, nil, runCachedOnly, every, false)
			eager, _, _ := runCachedOn(t, in, nil, runEager, every, false)
			if len(eager) == 0 {
				t.Fatal("no output")
			}
			if !slices.Equal(full, eager) {
				t.Fatalf("unlimited cache: %d records, no cache: %d; differences %s", len(full), len(eager), firstDiff(full, eager))
			}
			if !slices.Equal(small, full) {
				t.Fatalf("1 MB cache: %d records, unlimited: %d; differences %s", len(small), len(full), firstDiff(small, full))
			}
			t.Logf("groups in memory at most: %d with 1 MB, %d unlimited", smallMax, fullMax)
			if smallMax*5 > fullMax*4 {
				t.Fatalf("1 MB cache held up to %d groups, unlimited %d: nothing was evicted", smallMax, fullMax)
			}
			if deltas != 0 {
				t.Fatalf("the merge stage stored %d blind partials: it must read its misses", deltas)
			}
			// Across versions: a node without the cache (or of the
			// previous release, which reads the accumulator entries only)
			// before, after, and between runs with it, restored from the
			// changelog where the run moves.
			for _, m := range []struct {
				name string
				mode runMode
				move bool
			}{{"no cache, then a 1 MB cache", runEagerFirst, false}, {"a 1 MB cache, then none on another node", runCachedFirst, true}, {"a 1 MB cache, none from the crash, a 1 MB cache on another node", runEagerBetween, true}} {
				if got, _, _ := runCachedOn(t, in, NewCacheBudget(1), m.mode, every, m.move); !slices.Equal(got, eager) {
					t.Fatalf("%s: %d records, no cache: %d; differences %s", m.name, len(got), len(eager), firstDiff(got, eager))
				}
			}
		})
	}
}

// combinePartials runs rows through sources pre-aggregations (row i on
// source partition i % sources), in batches of 500 a source, and returns
// what they ship (markers left out) as a merge stage's input, with a
// watermark that lets no partial be late.
func combinePartials(t *testing.T, q string, rows []string, sources int) cachedInput {
	p := planOf(t, q, "combine")
	ph := evHarness(t, sources, chain(func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 1}}
	}))
	pres := make([]*optest.Task, sources)
	for i := range pres {
		pres[i] = ph.Task(int32(i))
	}
	var recs, again []*kafkaio.Record
	deliver := func(rec *kafkaio.Record) {
		c := *rec
		c.Topic, c.Partition, c.Offset = "cmb", 0, int64(len(recs))
		recs = append(recs, &c)
	}
	const batch = 500
	mine := make([][]string, sources)
	for i, row := range rows {
		mine[i%sources] = append(mine[i%sources], row)
	}
	for off := 0; off < len(mine[0]); off += batch {
		for src, pre := range pres {
			end := min(off+batch, len(mine[src]))
			if off >= end {
				continue
			}
			pre.Push(int64(off), mine[src][off:end]...)
			// The source's watermark: 5 s behind the time its rows reached.
			pre.Advance((int64(end)*eventSeconds/int64(len(mine[src])) - 5) * 1000)
			for _, rec := range pre.Take().Data() {
				deliver(rec)
				if len(recs)%10 == 0 {
					again = append(again, rec)
				}
			}
		}
		for _, rec := range again { // shipped again by a source's restart
			deliver(rec)
		}
		again = again[:0]
	}
	for _, pre := range pres {
		pre.SetWatermark(1 << 40)
	}
	ph.Flush()
	for _, pre := range pres {
		for _, rec := range pre.Take().Data() {
			deliver(rec)
		}
	}
	// The merge's watermark after offset off: below the end of every window
	// a partial still to come belongs to.
	spec := p.Window.Spec
	safe := make([]int64, len(recs)+1)
	safe[len(recs)] = 1 << 40
	for i := len(recs) - 1; i >= 0; i-- {
		_, _, w, _, err := DecodePartial(recs[i].Value)
		if err != nil {
			t.Fatal(err)
		}
		safe[i] = min(safe[i+1], spec.LastWindowEnd(w)-1)
	}
	return cachedInput{q: q, recs: recs, wmAt: func(off int64) int64 { return safe[off] }, merge: true}
}

// firstDiff names a few records only one of two sorted lists holds.
func firstDiff(a, b []string) string {
	count := map[string]int{}
	for _, x := range a {
		count[x]++
	}
	for _, x := range b {
		count[x]--
	}
	var only []string
	for x, n := range count {
		if n != 0 && len(only) < 6 {
			only = append(only, fmt.Sprintf("%+d %s", n, x))
		}
	}
	slices.Sort(only)
	return fmt.Sprint(only)
}

// runMode is how runCached's task keeps its groups.
type runMode int

const (
	runCachedOnly   runMode = iota // in the group cache (bounded by its budget)
	runEager                       // all in memory, restored whole (no cache)
	runEagerFirst                  // without the cache until the clean restart, with it after
	runCachedFirst                 // with the cache until the clean restart, without it after
	runEagerBetween                // without the cache only from the crash to the clean restart
)

// runCached feeds rows in batches of 500, committing every 4 batches with
// the watermark 5 s behind, crashes once (the input since the last commit
// is read again) and restarts cleanly once (move: on another store,
// rebuilt from the changelog of every commit before), then flushes. It
// returns every record produced, sorted, the most groups held in memory
// and how many partials of blind groups the runs stored or lost in the
// crash.
func runCached(t *testing.T, q string, rows []string, budget *CacheBudget, mode runMode, every time.Duration, move bool) (out []string, maxGroups int, deltas uint64) {
	return runCachedOn(t, inputOf(q, ev(0, 0, rows...)), budget, mode, every, move)
}

// inputOf is recs (spread evenly over eventSeconds) under q, with the
// watermark 5 s behind the event time reached.
func inputOf(q string, recs []*kafkaio.Record) cachedInput {
	n := int64(len(recs))
	return cachedInput{q: q, recs: recs, wmAt: func(off int64) int64 { return (off*eventSeconds/n - 5) * 1000 }}
}

// cachedInput is what runCachedOn feeds: the stream's query, its input
// records (partition 0, offsets from 0), and the watermark after the
// records before offset off. merge: the input is a combine's partials.
type cachedInput struct {
	q     string
	recs  []*kafkaio.Record
	wmAt  func(off int64) int64
	merge bool
	// commitAfter reports whether the task commits after batch b (of 500
	// records; nil: after every fourth).
	commitAfter func(b int64) bool
}

// runCachedOn is runCached on any input.
func runCachedOn(t *testing.T, in cachedInput, budget *CacheBudget, mode runMode, every time.Duration, move bool) (out []string, maxGroups int, deltas uint64) {
	strategy := "auto"
	if in.merge {
		strategy = "combine"
	}
	p := planOf(t, in.q, strategy)
	timeIdx := -1
	if p.Window != nil {
		timeIdx = p.Window.TimeIdx
	}
	var agg *HashAgg // the task's, since its last open
	crashed, restarted := false, false
	topic := "ev"
	if in.merge {
		topic = "cmb"
	}
	// Commits of 256 partials or more ingest them as runs, fewer write
	// them in the batch: the close merges both kinds. A window's partials
	// are folded into one run when it has two (runfold.go).
	h := optest.New(t, optest.Config{Topic: topic, Input: evFormat, Watermarks: optest.Scripted,
		Store: state.Options{MinRunPartials: 256, MaxWindowRuns: 2},
		Ops: func(int32) []Op {
			eager := mode == runEager || mode == runEagerFirst && !restarted || mode == runCachedFirst && restarted ||
				mode == runEagerBetween && crashed && !restarted
			agg = &HashAgg{Plan: p, Cache: budget, EmitEvery: every, Merge: in.merge}
			agg.SetEager(eager)
			schema := p.Output
			if every > 0 {
				schema = append(append(types.Schema{}, schema...), types.Field{Name: "is_final", Type: types.Bool})
			}
			ops := []Op{agg, &Project{Filter: p.Having, Exprs: p.Project, Tombstones: p.Window == nil, AddFinal: every > 0}, &Sink{Topic: "out", Partitions: 4, Schema: schema}}
			if !in.merge {
				ops = append([]Op{&Source{Input: p.Input, TimeIdx: timeIdx, NeedsSeq: p.NeedsSeq}}, ops...)
			}
			return ops
		}})
	task := h.Task(0)
	opened := func() {
		if n := agg.Aggregator().Table.Len(); n != 0 && agg.Cached() {
			t.Fatalf("%d groups loaded at start: the restore is not lazy", n)
		}
	}
	opened()
	stopping := func() {
		if agg.Cached() {
			deltas += agg.BlindPartials()
		}
	}
	collect := func() {
		for _, rec := range task.Take() {
			// Unkeyed panes are spread over partitions in emission order,
			// which the cache may change; keyed records (upsert) are placed
			// by key.
			part := rec.Partition
			if rec.Key == nil {
				part = -1
			}
			out = append(out, fmt.Sprintf("%d|%s|%s", part, rec.Key, rec.Value))
		}
	}
	const batch = 500
	committed := int64(0)
	rows := in.recs
	for off := int64(0); off < int64(len(rows)); {
		end := min(off+batch, int64(len(rows)))
		task.PushRecords(rows[off:end]...)
		maxGroups = max(maxGroups, agg.Aggregator().Table.Len())
		off = end
		commit := (off/batch)%4 == 0
		if in.commitAfter != nil {
			commit = in.commitAfter(off/batch - 1)
		}
		if !commit && off < int64(len(rows)) {
			if !crashed && off > int64(len(rows))/3 {
				// Crash: what was fed since the last commit is lost and
				// read again.
				crashed = true
				stopping()
				h.Crash()
				opened()
				off = committed
			}
			continue
		}
		h.Elapse(time.Second)
		task.Advance(in.wmAt(off))
		collect()
		committed = off
		if !restarted && off > 2*int64(len(rows))/3 {
			restarted = true
			stopping()
			if move {
				h.LoseDisk() // restored from the changelog of every commit before
			}
			h.Restart()
			opened()
		}
	}
	task.SetWatermark(1 << 40)
	h.Flush()
	collect()
	stopping()
	if p.Window != nil {
		// Every window (session) has closed: nothing of them may be
		// left in the state (a session's index entries included).
		left := 0
		kinds := map[string]int{}
		if err := h.Store().EachScopeKey("s", 0, func(key, _ []byte) error {
			if sk, err := state.ParseStateKey("s", key); err == nil {
				kinds[fmt.Sprint(sk.Kind)]++
			}
			// (A task without the cache that ran last leaves a merge
			// stage's group-layout copies: they are not its state.)
			copies := in.merge && mode == runCachedFirst
			if sk, err := state.ParseStateKey("s", key); err == nil && (sk.Kind == state.KindAcc || sk.Kind == state.KindGroup && !copies) {
				left++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if left > 0 {
			t.Fatalf("%d state entries left after every window closed (mode %d, budget %v): %v", left, mode, budget != nil, kinds)
		}
	}
	slices.Sort(out)
	return out, maxGroups, deltas
}

// TestHopReclosesOnlyItsOwnWindows: two tasks share a store; one closes a
// HOP window and commits, the other has not reached it. Restarted, the
// first must not close that window again: the slice its close removed
// still exists in the store, but only with the other task's groups. (It
// did: the pane, re-closed from the window's later slices alone, was
// wrong and smaller.)
func TestHopReclosesOnlyItsOwnWindows(t *testing.T) {
	q := `CREATE STREAM s AS SELECT k, HOP_START(ts, INTERVAL '5' SECOND, INTERVAL '20' SECOND) AS ws, COUNT(*) AS n
		FROM ev GROUP BY k, HOP(ts, INTERVAL '5' SECOND, INTERVAL '20' SECOND)`
	p := planOf(t, q, "auto")
	keyOf := func(part int32) string {
		for i := 0; ; i++ {
			if k := fmt.Sprintf("k%d", i); state.OwnerOf(state.KeyGroup([]byte(k)), 2) == part {
				return k
			}
		}
	}
	h := evHarness(t, 2, chain(func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &HashAgg{Plan: p},
			&Project{Filter: p.Having, Exprs: p.Project}, &Sink{Topic: "out", Partitions: 1, Schema: p.Output}}
	}))
	var rows [2][]string
	for part := range rows {
		k := keyOf(int32(part))
		for sec := 0; sec < 40; sec++ {
			rows[part] = append(rows[part], fmt.Sprintf("%s,u,1,%d", k, sec))
		}
	}
	r0, r1 := h.Task(0), h.Task(1)
	r0.Push(0, rows[0]...)
	r1.Push(0, rows[1]...)
	// Task 0 closes [0 s, 20 s) (and the HOP windows before it), removing
	// slice [0 s, 5 s); task 1 stays behind.
	r0.Advance(20_000)
	closed := values(t, r0.Take())
	r1.Advance(5_000)
	if len(closed) == 0 {
		t.Fatal("task 0 closed no window")
	}
	h.Restart()
	r0.Advance(20_000)
	if again := values(t, r0.Take()); len(again) != 0 {
		t.Fatalf("windows closed before the restart closed again: %v (first time: %v)", again, closed)
	}
	r0.Advance(25_000)
	next := values(t, r0.Take())
	if len(next) != 1 || next[0]["n"] != float64(20) {
		t.Fatalf("window [5 s, 25 s) after the restart: %v, want one pane of 20 rows", next)
	}
}

// TestBlindWritesOnlyWhereExact: a cached aggregation writes blind only
// when it has windows and every aggregate merges exactly; others read.
func TestBlindWritesOnlyWhereExact(t *testing.T) {
	cases := []struct {
		q    string
		want bool
	}{
		{tumbleSQL, true},
		{`CREATE STREAM s AS SELECT k, HOP_START(ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND) AS ws, MAX(v) AS m, AVG(v) AS a
			FROM ev GROUP BY k, HOP(ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND)`, true},
		{`CREATE STREAM s AS SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(DISTINCT u) AS n
			FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`, false},
		{`CREATE STREAM s AS SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v * 0.5) AS half
			FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`, false},
		{`CREATE STREAM s AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k`, false},
	}
	for _, c := range cases {
		h := &HashAgg{Plan: planOf(t, c.q, "auto"), Cache: NewCacheBudget(1)}
		evHarness(t, 1, chain(func() []Op { return []Op{h} })).Task(0)
		if got := h.Aggregator().BlindWrites(); got != c.want {
			t.Errorf("%s: blind writes %v, want %v", c.q, got, c.want)
		}
	}
}

// TestEarlyFireOfColdWindowIsChunked: an early fire of a window whose
// groups left memory hands its rows on a chunk at a time, as the close
// does, instead of reading the whole window into memory first; an
// unchanged window is not fired again.
func TestEarlyFireOfColdWindowIsChunked(t *testing.T) {
	p := planOf(t, tumbleSQL, "auto")
	h := &HashAgg{Plan: p, Cache: NewCacheBudget(1), EmitEvery: time.Second}
	rig := evHarness(t, 1, chain(func() []Op { return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, h} }))
	task := rig.Task(0)
	const keys = 20000
	rows := make([]string, keys)
	for i := range rows {
		rows[i] = fmt.Sprintf("k%d,u,1,1", i)
	}
	for off := 0; off < keys; off += 1000 {
		task.Push(int64(off), rows[off:off+1000]...)
	}
	if !h.Aggregator().Cold(0) {
		t.Fatal("window [0,10) kept every group in memory: the test needs it cold")
	}
	// The batches the operator hands on, as the task's loop takes them
	// from it, one at a time.
	fire := func() (first, total int, lazy bool) {
		t.Helper()
		rig.Elapse(2 * time.Second)
		task.Advance(0)
		bs := task.Batches()
		if len(bs) == 0 {
			return 0, 0, false
		}
		first, lazy = bs[0].Data.N, bs[0].More != nil
		for _, b := range bs {
			total += b.Data.N
		}
		return first, total, lazy
	}
	first, total, lazy := fire()
	if !lazy || first > 4096 || total != keys {
		t.Fatalf("early fire: first batch %d rows (lazy: %v), %d in all; want at most 4,096, more to follow, %d in all", first, lazy, total, keys)
	}
	if _, total, _ := fire(); total != 0 {
		t.Fatalf("nothing changed, yet the early fire wrote %d rows", total)
	}
}

// TestHeldRowsAndRunsCounted: a windowed aggregation whose keys do not
// fit its cache share counts the rows it held (turbine_held_rows_total)
// and the runs its commits wrote (turbine_state_runs_total); with every
// group in memory, neither moves.
func TestHeldRowsAndRunsCounted(t *testing.T) {
	// (A window's partials are folded at 2 runs: folds are counted too.)
	rows := metamorphicRows(40000, 20000)
	for _, budget := range []*CacheBudget{NewCacheBudget(1), nil} {
		p := planOf(t, tumbleSQL, "auto")
		h := evHarness(t, 1, func(c *optest.Config) { c.Store = state.Options{MinRunPartials: 2, MaxWindowRuns: 2} }, chain(func() []Op {
			return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &HashAgg{Plan: p, Cache: budget}}
		}))
		task := h.Task(0)
		recs := ev(0, 0, rows...)
		for off := 0; off < len(recs); off += 500 {
			task.PushRecords(recs[off : off+500]...)
			task.Advance(int64(off*eventSeconds/len(recs)-5) * 1000)
		}
		held := testutil.ToFloat64(h.Metrics().HeldRows.WithLabelValues("s"))
		runs := testutil.ToFloat64(h.Metrics().StateRuns.WithLabelValues("s"))
		folds := testutil.ToFloat64(h.Metrics().StateFolds.WithLabelValues("s"))
		switch {
		case budget != nil && (held == 0 || held > float64(len(rows)) || runs == 0 || folds == 0):
			t.Fatalf("1 MB cache: %v rows held of %d, %v runs written, %v windows folded: want some of each", held, len(rows), runs, folds)
		case budget == nil && (held != 0 || runs != 0 || folds != 0):
			t.Fatalf("unlimited cache: %v rows held, %v runs written, %v windows folded: want none", held, runs, folds)
		}
	}
}

// TestHopSlicesShareTheRunBound: a HOP window's close reads the runs of
// all its slices, so each slice gets the window's bound on runs divided
// among them, down to minSliceRuns; a TUMBLE window keeps it whole.
func TestHopSlicesShareTheRunBound(t *testing.T) {
	hop := func(slices int) string {
		return fmt.Sprintf(`CREATE STREAM s AS SELECT k, HOP_START(ts, INTERVAL '5' SECOND, INTERVAL '%d' SECOND) AS ws, COUNT(*) AS n
		FROM ev GROUP BY k, HOP(ts, INTERVAL '5' SECOND, INTERVAL '%d' SECOND)`, 5*slices, 5*slices)
	}
	for q, want := range map[string]int{tumbleSQL: state.MaxWindowRuns, hop(3): state.MaxWindowRuns / 3, hop(60): MinSliceRuns} {
		h := &HashAgg{Plan: planOf(t, q, "auto"), Cache: NewCacheBudget(1)}
		evHarness(t, 1, chain(func() []Op { return []Op{h} })).Task(0)
		if got := h.SliceRuns(); got != want {
			t.Errorf("%s: a slice takes up to %d runs, want %d", h.Plan.Window.Kind(), got, want)
		}
	}
}

// TestUnreadChunksClosedWithTheTask: a task whose commit failed (an
// operator after the aggregation failed) after a cold window's close was
// handed on but not read closes the window's store cursors with the
// operator, so the store then closes (Pebble panics on a close with tables
// still referenced).
func TestUnreadChunksClosedWithTheTask(t *testing.T) {
	h := &HashAgg{Plan: planOf(t, tumbleSQL, "auto"), Cache: NewCacheBudget(1)}
	p := h.Plan
	broken := &failing{}
	rig := evHarness(t, 1, func(c *optest.Config) { c.Store = state.Options{MinRunPartials: 16} }, chain(func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, h, broken}
	}))
	task := rig.Task(0)
	recs := ev(0, 0, metamorphicRows(40000, 20000)...)
	for off := 0; off < len(recs); off += 2000 {
		task.PushRecords(recs[off : off+2000]...)
		task.Commit()
	}
	broken.armed = true
	task.SetWatermark(1 << 40)
	if err := task.TryCommit(); err == nil {
		t.Fatal("the commit did not fail")
	}
	if b := broken.got; b == nil || b.More == nil {
		t.Fatal("no window closed a chunk at a time: nothing went cold")
	}
	defer func() {
		if e := recover(); e != nil {
			t.Fatalf("the store's close panicked: %v", e)
		}
	}()
	rig.Crash() // the operators close, then the store
}

// failing is an operator that fails the first batch it is handed once
// armed, so its task's commit fails with the batches behind it unread.
type failing struct {
	armed bool
	got   *Batch
}

func (f *failing) Open(context.Context, *Env) error { return nil }

func (f *failing) Process(_ context.Context, b *Batch) (*Batch, error) {
	if !f.armed {
		return nil, nil
	}
	f.got = b
	return nil, errors.New("the output is gone")
}

func (f *failing) OnWatermark(context.Context, Watermark) (*Batch, error) { return nil, nil }
func (f *failing) Commit(context.Context, *Commit) error                  { return nil }
func (f *failing) Close()                                                 {}
