package dataflow_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	. "github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/dataflow/optest"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/streamplan"
	"github.com/turbinesql/turbinesql/types"
)

func TestSourceOnError(t *testing.T) {
	for _, policy := range []string{"fail", "skip", "dlq"} {
		bad := &kafkaio.Record{Offset: 2, Value: []byte(`{"k": "a", "v": "not a number"}`)}
		src := *evSource
		src.OnError, src.DLQTopic = onErrorOf(t, policy), "ev.dlq"
		h := evHarness(t, 1, chain(func() []Op {
			return []Op{&Source{Input: evRelation(&src), TimeIdx: 3, CountIn: true, DLQ: dlqOne}}
		}))
		task := h.Task(0)
		err := task.TryPush(append(ev(0, 0, "a,x,1,5", "b,y,2,7"), bad)...)
		switch policy {
		case "fail":
			if err == nil || !strings.Contains(err.Error(), "ev/0 offset 2") {
				t.Fatalf("fail: %v, want an error naming ev/0 offset 2", err)
			}
			continue
		}
		task.Commit() // what it produced reaches Kafka
		switch policy {
		case "skip":
			if n := task.Counts().Skipped; n != 1 || len(task.Take()) != 0 {
				t.Fatalf("skip: skipped %d, produced something", n)
			}
		case "dlq":
			dl := task.Take()
			if len(dl) != 1 || dl[0].Topic != "ev.dlq" || string(dl[0].Value) != string(bad.Value) || task.Counts().DLQ != 1 {
				t.Fatalf("dlq: %d dead letters %+v", len(dl), dl)
			}
		}
		outs := task.Batches()
		if err != nil || len(outs) != 1 {
			t.Fatalf("%s: %v, %d batches out", policy, err, len(outs))
		}
		if out := outs[0]; out.Data.N != 2 || !out.HasTime || out.MaxTime != 7000 || task.Counts().In != 3 {
			t.Fatalf("%s: %d rows, max time %d/%v, %d in", policy, out.Data.N, out.MaxTime, out.HasTime, task.Counts().In)
		}
	}
}

func TestHashAggClosesOnWatermark(t *testing.T) {
	p := planOf(t, tumbleSQL, "auto")
	task := evHarness(t, 1, chain(func() []Op { return aggChain(p, "", 0) })).Task(0)
	task.Push(0, "a,x,1,1", "a,x,2,9", "b,x,5,3", "a,x,7,12")
	task.Advance(9_000)
	if got := task.Take(); len(got) != 0 {
		t.Fatalf("window [0,10) closed at watermark 9 s: %v", values(t, got))
	}
	task.Advance(10_000)
	got := values(t, task.Take())
	if len(got) != 2 || got[0]["n"].(float64)+got[1]["n"].(float64) != 3 {
		t.Fatalf("panes at 10 s: %v", got)
	}
	// A row for a closed window is late: dropped and counted.
	task.Push(4, "a,x,1,2")
	if late := task.Counts().Late; late != 1 {
		t.Fatalf("late rows %d, want 1", late)
	}
	task.Advance(10_000)
	if got := task.Take(); len(got) != 0 {
		t.Fatalf("a late row made a pane: %v", values(t, got))
	}
}

// keysOf finds two keys of each of parts partitions (murmur2).
func keysOf(parts int) map[int32][]string {
	keys := map[int32][]string{}
	for i := 0; ; i++ {
		k := fmt.Sprintf("key%d", i)
		q := state.PartitionFor([]byte(k), parts)
		keys[q] = append(keys[q], k)
		done := true
		for p := range parts {
			done = done && len(keys[int32(p)]) >= 2
		}
		if done {
			return keys
		}
	}
}

func TestHashAggRestoresItsGroups(t *testing.T) {
	p := planOf(t, tumbleSQL, "auto")
	h := evHarness(t, 2, chain(func() []Op { return aggChain(p, "", 0) }))
	keys := keysOf(2)
	// Two tasks of a 2-partition input write their own groups.
	for q := int32(0); q < 2; q++ {
		task := h.Task(q)
		task.Push(0, keys[q][0]+",x,1,1", keys[q][1]+",x,2,2")
		task.Advance(5_000)
	}
	// Restarted, task 1 restores only its own groups, and its window
	// closes with the restored counts.
	h.Restart()
	task := h.Task(1)
	if r := task.Env().Restored; r.Offset != 2 || !r.HasClosed || r.Closed != 5_000 {
		t.Fatalf("restored %+v", r)
	}
	task.Push(2, keys[1][0]+",x,10,3")
	task.Advance(20_000)
	got := values(t, task.Take())
	if len(got) != 2 {
		t.Fatalf("task 1 emitted %v, want its 2 keys only", got)
	}
	for _, m := range got {
		if m["k"] == keys[1][0] && (m["n"].(float64) != 2 || m["total"].(float64) != 11) {
			t.Fatalf("pane %v, want n 2 total 11", m)
		}
	}
}

func TestHashAggLateRowsRouted(t *testing.T) {
	p := planOf(t, tumbleSQL, "auto")
	task := evHarness(t, 1, chain(func() []Op { return aggChain(p, "late", 0) })).Task(0)
	task.Push(0, "a,x,1,1")
	task.Advance(15_000)
	task.Take()
	task.Push(1, "a,x,1,3")
	task.Commit()
	got := task.Take()
	if len(got) != 1 || got[0].Topic != "late" {
		t.Fatalf("late routing produced %+v", got)
	}
	h := map[string]string{}
	for _, x := range got[0].Headers {
		h[x.Key] = string(x.Value)
	}
	if h["turbine.window"] != "1970-01-01 00:00:00/1970-01-01 00:00:10" || h["turbine.source.offset"] != "1" || h["turbine.stream"] != "s" {
		t.Fatalf("late headers %v", h)
	}
}

func TestHashAggEarlyFires(t *testing.T) {
	p := planOf(t, tumbleSQL, "auto")
	h := evHarness(t, 1, chain(func() []Op { return aggChain(p, "", time.Second) }))
	task := h.Task(0)
	agg := task.Ops()[1].(*HashAgg)
	task.Push(0, "a,x,1,1")
	if agg.Due(h.Now()) {
		t.Fatal("an early fire is due at once")
	}
	h.Elapse(time.Second)
	if !agg.Due(h.Now()) {
		t.Fatal("no early fire due after the interval")
	}
	task.Advance(0)
	got := values(t, task.Take())
	if len(got) != 1 || got[0]["is_final"] != false || got[0]["n"].(float64) != 1 {
		t.Fatalf("early fire %v", got)
	}
	task.Advance(10_000)
	got = values(t, task.Take())
	if len(got) != 1 || got[0]["is_final"] != true {
		t.Fatalf("final pane %v", got)
	}
}

func TestHashAggUpsert(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT k, SUM(v) AS total FROM ev GROUP BY k HAVING SUM(v) > 2`, "auto")
	task := evHarness(t, 1, chain(func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: -1}, &HashAgg{Plan: p}, &Project{Filter: p.Having, Exprs: p.Project},
			&Sink{Topic: "out", Partitions: 3, Schema: p.Output}}
	})).Task(0)
	task.Push(0, "a,x,1,1", "b,x,5,1", "a,x,1,2")
	task.Advance(0)
	got := task.Take()
	if len(got) != 1 || string(got[0].Key) != "b" || got[0].Partition != state.PartitionFor([]byte("b"), 3) {
		t.Fatalf("upsert output %+v", got)
	}
	task.Push(3, "a,x,1,3")
	task.Advance(0)
	got = task.Take()
	if len(got) != 1 || string(got[0].Key) != "a" || values(t, got)[0]["total"].(float64) != 3 {
		t.Fatalf("changed group a: %+v", got)
	}
}

func TestSinkPlacement(t *testing.T) {
	schema := types.Schema{{Name: "k", Type: types.Text}, {Name: "n", Type: types.Int}}
	for _, mk := range []string{"", "k"} {
		task := evHarness(t, 4, chain(func() []Op {
			return []Op{&Sink{Topic: "out", Partitions: 5, Schema: schema, MessageKey: mk}}
		})).Task(2)
		rows := [][]any{{"a", int64(1)}, {nil, int64(2)}, {"c", int64(3)}}
		keys := [][]byte{[]byte("z"), nil, nil}
		task.Process(&Batch{Rows: rows, Keys: keys})
		task.Commit()
		got := task.Take()
		want := []string{"z", "", ""}
		if mk == "k" {
			want = []string{"a", "", "c"}
		}
		if len(got) != 3 {
			t.Fatalf("message_key %q: %d records, want 3", mk, len(got))
		}
		for i, rec := range got {
			if string(rec.Key) != want[i] {
				t.Fatalf("message_key %q row %d: key %q, want %q", mk, i, rec.Key, want[i])
			}
			if want[i] != "" && rec.Partition != state.PartitionFor(rec.Key, 5) {
				t.Fatalf("row %d on partition %d, murmur2 says %d", i, rec.Partition, state.PartitionFor(rec.Key, 5))
			}
		}
		if out := task.Counts().Out; out != 3 {
			t.Fatalf("records_out %d", out)
		}
	}
}

func TestExchangeRekeysAndMarks(t *testing.T) {
	src := *evSource
	task := evHarness(t, 2, chain(func() []Op {
		return []Op{&Source{Input: evRelation(&src), TimeIdx: 3}, &Exchange{Topic: "rep", Partitions: 4, Col: 1}}
	})).Task(1)
	task.Take() // what its first commit sent (markers without a time)
	in := ev(1, 0, "a,u1,1,1", "b,u2,2,2")
	in = append(in, &kafkaio.Record{Offset: 2, Value: []byte(`{"k": "c", "u": null, "v": 3, "ts": 3000}`)})
	task.PushRecords(in...)
	task.Commit() // before the scripted watermark has a time
	out := task.Take()
	if early, err := out.Markers(); err != nil || len(early) != 4 || early[0].HasTime {
		t.Fatalf("markers of the commit before the watermark: %+v (%v), want 4 without a time", early, err)
	}
	got := out.Data()
	if len(got) != 3 {
		t.Fatalf("%d records re-emitted", len(got))
	}
	for i, rec := range got[:2] {
		if string(rec.Value) != string(in[i].Value) || rec.Partition != state.PartitionFor(rec.Key, 4) || string(rec.Key) != []string{"u1", "u2"}[i] {
			t.Fatalf("record %d re-emitted as %+v", i, rec)
		}
	}
	if got[2].Key != nil || got[2].Partition != 0 {
		t.Fatalf("a NULL key goes unkeyed to partition 0: %+v", got[2])
	}
	task.Advance(2_000)
	marks, err := task.Take().Markers()
	if err != nil || len(marks) != 4 {
		t.Fatalf("%d markers (%v), want one per internal partition", len(marks), err)
	}
	for q, m := range marks {
		if int(m.Partition) != q || m.Source != 1 || m.MaxTime != 2_000 || !m.HasTime {
			t.Fatalf("marker %d: %+v", q, m)
		}
	}
}

// combineSQL is a combine's stream over ev.
const combineSQL = `CREATE STREAM s AS SELECT u, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS total
		FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '10' SECOND)`

// mergeHarness runs a combine's merge stage over topic cmb of k (parts
// partitions), its sources reporting.
func mergeHarness(t testing.TB, p *planner.Plan, k *optest.Kafka, parts, sources int) *optest.Harness {
	return optest.New(t, optest.Config{Name: "s", Topic: "cmb", Partitions: parts, Kafka: k, Ops: func(int32) []Op {
		return []Op{&Markers{Sources: sources}, &HashAgg{Plan: p, Merge: true}, &Project{Exprs: p.Project},
			&Sink{Topic: "out", Partitions: 1, Schema: p.Output}}
	}})
}

func TestPartialAggShipsAndMerges(t *testing.T) {
	p := planOf(t, combineSQL, "combine")
	k := optest.NewKafka()
	pre := evHarness(t, 1, func(c *optest.Config) { c.Name, c.Kafka = "pre", k }, chain(func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 2}}
	})).Task(0)
	pre.Push(0, "a,u1,1,1", "b,u1,2,2", "c,u2,3,12")
	pre.Commit()
	if c := pre.Committed(); c.Offset != 0 || c.Applied != 3 {
		t.Fatalf("restart offset %d (applied %d): the unshipped windows' rows must be read again", c.Offset, c.Applied)
	}
	pre.Take() // markers without a time
	pre.Advance(10_000)
	shipped := pre.Take()
	partials, marks := shipped.Data(), len(shipped)-len(shipped.Data())
	if len(partials) != 1 || marks != 2 {
		t.Fatalf("%d partials and %d markers, want u1's [0,10) and a marker per internal partition", len(partials), marks)
	}
	if c := pre.Committed(); c.Offset != 2 {
		t.Fatalf("restart offset %d after shipping [0,10): want 2, u2's row in [10,20)", c.Offset)
	}
	// The merge side: the partial, then markers; a redelivered partial
	// after the close is dropped and counted as redelivered.
	q := partials[0].Partition
	mh := mergeHarness(t, p, k, 2, 1)
	merge := mh.Task(q)
	merge.Poll()
	merge.Commit()
	if wm := merge.Watermark(); !wm.Has || wm.WM != 10_000 {
		t.Fatalf("merge watermark %+v", wm)
	}
	got := values(t, merge.Take())
	if len(got) != 1 || got[0]["u"] != "u1" || got[0]["n"].(float64) != 2 || got[0]["total"].(float64) != 3 {
		t.Fatalf("merged panes %v", got)
	}
	k.Append(partials...)
	merge.Poll()
	merge.Commit()
	dropped := testutil.ToFloat64(mh.Metrics().CombineLatePartials.WithLabelValues("s"))
	if got := merge.Take(); len(got) != 0 || dropped != 1 || merge.Counts().Late != 0 {
		t.Fatalf("a redelivered partial: %d panes, %v counted in turbine_combine_late_partials_total (want 1), %d late rows (want 0: it is a copy, not a late row)",
			len(got), dropped, merge.Counts().Late)
	}
}

func TestProjectFiltersKeysAlong(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT k, v * 2 AS dbl FROM ev WHERE v > 1`, "auto")
	task := evHarness(t, 1, chain(func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: -1}, &Project{Filter: p.Filter, Exprs: p.Project},
			&Sink{Topic: "out", Partitions: 1, Schema: p.Output}}
	})).Task(0)
	task.Push(0, "a,x,1,1", "b,x,2,1", "c,x,3,1")
	task.Commit()
	got := values(t, task.Take())
	if len(got) != 2 || got[0]["dbl"].(float64) != 4 || got[1]["dbl"].(float64) != 6 {
		t.Fatalf("projected %v", got)
	}
}

// TestMarkersApplyEachSourceRecordOnce: copies a repartition hop writes
// again after a crash (same source partition and offset) are dropped, also
// after the reader itself restarts from its committed state.
func TestMarkersApplyEachSourceRecordOnce(t *testing.T) {
	copyOf := func(off int64, src int32, srcOff int64) *kafkaio.Record {
		return &kafkaio.Record{Offset: off, Value: []byte(fmt.Sprint(srcOff)),
			Headers: []kafkaio.Header{{Key: SourceHeader, Value: EncodeSource(src, srcOff)}}}
	}
	h := optest.New(t, optest.Config{Topic: "rep", Ops: func(int32) []Op { return []Op{&Markers{Sources: 2}} }})
	task := h.Task(0)
	passed := func() []string {
		t.Helper()
		var out []string
		for _, b := range task.Batches() {
			for _, r := range b.Recs {
				out = append(out, string(r.Value))
			}
		}
		return out
	}
	task.PushRecords(copyOf(0, 0, 10), copyOf(1, 1, 5), copyOf(2, 0, 11))
	if got := passed(); len(got) != 3 {
		t.Fatalf("first copies: passed %v", got)
	}
	task.Commit()
	// The hop restarted from source offset 10 of partition 0: 10 and 11 come
	// again, then 12 is new.
	task.PushRecords(copyOf(3, 0, 10), copyOf(4, 0, 11), copyOf(5, 0, 12))
	if got := passed(); len(got) != 1 || got[0] != "12" {
		t.Fatalf("after the hop's restart: passed %v", got)
	}
	// The reader crashes and restarts from its commit (offset 3): the same
	// holds.
	h.Crash()
	task.PushRecords(copyOf(3, 0, 10), copyOf(4, 0, 11), copyOf(5, 0, 12), copyOf(6, 1, 5), copyOf(7, 1, 6))
	if got := passed(); len(got) != 2 || got[0] != "12" || got[1] != "6" {
		t.Fatalf("after the reader's restart: passed %v", got)
	}
}

// marker is a watermark marker of source partition src, to partition 0 of
// topic cmb.
func marker(src int32, wm int64) *kafkaio.Record {
	m := shuffle.Marker{Source: src, MaxTime: wm, HasTime: true}
	return &kafkaio.Record{Topic: "cmb", Headers: []kafkaio.Header{{Key: shuffle.MarkerHeader, Value: m.Encode(nil)}}}
}

// TestCombineShipsAgainAfterACrash: a pre-aggregation that shipped a
// window and crashed before committing ships it again after its restart;
// the merge stage, whose window is still open (another source partition is
// behind), keeps the latest partial of each source, so the pane counts
// each row once.
func TestCombineShipsAgainAfterACrash(t *testing.T) {
	p := planOf(t, combineSQL, "combine")
	k := optest.NewKafka()
	merge := mergeHarness(t, p, k, 1, 2).Task(0)
	k.Append(marker(1, 5_000)) // source 1 is behind [0, 10)

	ph := evHarness(t, 1, func(c *optest.Config) { c.Name, c.Kafka = "pre", k }, chain(func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 1}}
	}))
	pre := ph.Task(0)
	pre.Push(0, "a,u1,1,1", "b,u1,2,2")
	pre.Commit() // [0, 10) not shipped: restart at 0, read up to 2
	pre.Push(2, "c,u1,4,12")
	// Ships [0, 10), then crashes: Kafka has the partials, the state does
	// not know.
	k.FailCommit(errors.New("crash"))
	if err := func() error { ph.Elapse(0); return tryAdvance(pre, 12_000) }(); err == nil {
		t.Fatal("the commit did not fail")
	}
	if shipped := pre.Take().Data(); len(shipped) != 1 {
		t.Fatalf("%d partials shipped before the crash, want [0, 10)'s", len(shipped))
	}
	ph.Crash()
	pre.Poll() // from offset 0 again
	pre.Advance(12_000)
	if again := pre.Take().Data(); len(again) != 1 {
		t.Fatalf("%d partials shipped after the restart, want [0, 10)'s again", len(again))
	}

	k.Append(marker(1, 20_000))
	merge.Poll()
	merge.Commit()
	if wm := merge.Watermark(); !wm.Has || wm.WM != 12_000 {
		t.Fatalf("merge watermark %+v", wm)
	}
	got := values(t, merge.Take())
	if len(got) != 1 || got[0]["n"].(float64) != 2 || got[0]["total"].(float64) != 3 {
		t.Fatalf("pane %v, want u1 n 2 total 3: a repeated ship counted once", got)
	}
}

// tryAdvance sets a scripted watermark and commits, returning the failure.
func tryAdvance(task *optest.Task, wm int64) error {
	task.SetWatermark(wm)
	return task.TryCommit()
}

// partials decodes the partials in o (markers left out).
func partials(t *testing.T, o optest.Output) []optest.Partial {
	t.Helper()
	ps, err := o.Partials()
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// groupOf is a partial's group: its key's one TEXT value.
func groupOf(t *testing.T, p optest.Partial) string {
	t.Helper()
	v, err := exec.VecOf(types.Text, []any{""})
	if err == nil {
		err = exec.DecodeKeyInto(p.Record.Key, []types.Type{types.Text}, []*exec.Vec{v}, 0)
	}
	if err != nil {
		t.Fatalf("partial key %x: %v", p.Record.Key, err)
	}
	return v.S[0]
}

// covers is what each partial covers, by its group.
func covers(t *testing.T, ps []optest.Partial) map[string]PartialCover {
	t.Helper()
	out := map[string]PartialCover{}
	for _, p := range ps {
		out[groupOf(t, p)] = p.Cover
	}
	return out
}

// TestMergeTellsLatePartialsFromCopies: a pre-aggregation ships [0, 10)
// and crashes before its commit: Kafka has the partials, its state does
// not know. The merge stage closes [0, 10). A row of [0, 10), c, reached
// the source partition meanwhile; the restarted pre-aggregation reads the
// two rows it had read again, and c, and ships [0, 10) once more. u2's
// partial is a copy of what the pane holds: counted in
// turbine_combine_late_partials_total, not as late. u1's carries the row
// the pane never had: one late row (only that one: the rows it had read
// before are not new). Neither makes a pane. The merge stage remembers
// this across its own restart, and the same ship arriving again (the
// pre-aggregation crashed before its commit once more) is a copy.
//
// (In the task loop a pre-aggregation ships at a commit, and a commit that
// fails ends the process's life: a process reads nothing after a ship its
// state does not record. So c is first read after the restart, where it is
// not late, rather than dropped at the source before the crash.)
func TestMergeTellsLatePartialsFromCopies(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT u, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n
		FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '10' SECOND)`, "combine")
	k := optest.NewKafka()
	mh := mergeHarness(t, p, k, 1, 2)
	merge := mh.Task(0)
	ph := evHarness(t, 1, func(c *optest.Config) { c.Name, c.Kafka = "pre", k }, chain(func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 1}}
	}))
	pre := ph.Task(0)
	// mergeRead has the merge stage read what reached it, and commit.
	mergeRead := func() optest.Output {
		t.Helper()
		merge.Poll()
		merge.Commit()
		return merge.Take()
	}
	// Each process's life has its own metrics.
	lateRows := func() float64 { return testutil.ToFloat64(mh.Metrics().LateRows.WithLabelValues("s", "dropped")) }
	copies := func() float64 { return testutil.ToFloat64(mh.Metrics().CombineLatePartials.WithLabelValues("s")) }
	// shipAndCrash has the pre-aggregation ship [0, 10) at a commit that
	// fails once Kafka acknowledged the partials, then restart from its
	// store; it returns what it shipped.
	shipAndCrash := func() []optest.Partial {
		t.Helper()
		k.FailCommit(errors.New("crash"))
		if err := tryAdvance(pre, 12_000); err == nil {
			t.Fatal("the pre-aggregation's commit did not fail")
		}
		shipped := partials(t, pre.Take())
		ph.Crash()
		return shipped
	}

	pre.Push(0, "a,u1,1,1", "b,u2,1,2")
	pre.Commit() // nothing shipped: restart at 0, read up to 2
	first := shipAndCrash()
	if c := covers(t, first); len(first) != 2 || c["u1"] != (PartialCover{Last: 0, Rows: 1}) || c["u2"] != (PartialCover{Last: 1, Rows: 1}) {
		t.Fatalf("first ship %+v, want u1's and u2's partials of one row each", first)
	}
	k.Append(ev(0, 2, "c,u1,1,3")...) // c, after the ship: the pane will not have it
	k.Append(marker(1, 20_000))
	panes := values(t, mergeRead())
	if len(panes) != 2 || panes[0]["n"].(float64) != 1 || panes[1]["n"].(float64) != 1 {
		t.Fatalf("panes %v, want u1 and u2 once each", panes)
	}

	pre.Poll() // a and b again, and c
	reship := shipAndCrash()
	if late := pre.Counts().Late; late != 0 {
		t.Fatalf("the restarted source counted %d late rows, want 0: c is not late where it is read, a and b are read again", late)
	}
	if c := covers(t, reship); len(reship) != 2 || c["u1"] != (PartialCover{Last: 2, Rows: 1}) || c["u2"] != (PartialCover{Last: 1, Rows: 0}) {
		t.Fatalf("re-ship %+v, want u1's with c new, u2's with nothing new", reship)
	}
	if got := mergeRead(); len(got) != 0 {
		t.Fatalf("%d panes from partials of a closed window", len(got))
	}
	if late, cp := lateRows(), copies(); late != 1 || cp != 1 || merge.Counts().Late != 1 {
		t.Fatalf("late rows %v (stats %d), copies %v: want u1's new row late, u2's partial a copy", late, merge.Counts().Late, cp)
	}

	// The merge stage restarts from its commit; the pre-aggregation,
	// restarted once more, ships the same partials again: both are copies
	// now.
	mh.Crash()
	pre.Poll()
	again := shipAndCrash()
	if len(again) != len(reship) {
		t.Fatalf("shipped %d partials again, want the %d of the re-ship", len(again), len(reship))
	}
	for i, a := range again {
		if r := reship[i].Record; string(a.Record.Key) != string(r.Key) || string(a.Record.Value) != string(r.Value) || a.Cover != reship[i].Cover {
			t.Fatalf("partial %d shipped again as %+v, the re-ship had %+v", i, a, reship[i])
		}
	}
	panes = values(t, mergeRead())
	if late, cp := lateRows(), copies(); len(panes) != 0 || late != 0 || cp != 2 {
		t.Fatalf("after the merge stage's restart: %d panes, late rows %v, copies %v; want none, 0 and 2", len(panes), late, cp)
	}
	// What it remembers is what it merged, not that [0, 10) closed: a
	// partial of it from source 1, which shipped none, carries new rows.
	u1 := again[0].Record
	if groupOf(t, again[0]) != "u1" {
		u1 = again[1].Record
	}
	_, _, w, enc, err := DecodePartial(u1.Value)
	if err != nil {
		t.Fatal(err)
	}
	k.Append(&kafkaio.Record{Topic: "cmb", Key: u1.Key, Value: EncodePartial(1, w, enc),
		Headers: []kafkaio.Header{{Key: CoverHeader, Value: EncodeCover(PartialCover{Last: 4, Rows: 2})}}})
	if panes := values(t, mergeRead()); len(panes) != 0 || lateRows() != 2 || copies() != 2 {
		t.Fatalf("source 1's partial after the merge stage's restart: %d panes, late rows %v, copies %v; want none, 2 and 2", len(panes), lateRows(), copies())
	}
}

// TestMergeUncoveredPartialsAreCopies: partials the previous release
// shipped carry no cover header (CoverHeader) (a rolling upgrade). Such
// a partial merged while its window is open may cover any row of its
// source's window, so a later partial of the window from that source,
// arriving after the close with a header, is taken for a copy; one from a
// source that shipped nothing for the window carries rows the pane never
// had. A late partial without the header is a copy too. The header's
// value is the one EncodeCover writes, and DecodeCover refuses a
// truncated one.
func TestMergeUncoveredPartialsAreCopies(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT u, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n
		FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '10' SECOND)`, "combine")
	pre := evHarness(t, 1, chain(func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 1}}
	})).Task(0)
	pre.Push(0, "a,u1,1,1", "b,u1,1,2")
	pre.Advance(12_000)
	shipped := pre.Take().Data()
	if len(shipped) != 1 {
		t.Fatalf("%d partials shipped, want u1's of [0, 10)", len(shipped))
	}
	partial := shipped[0]
	v, ok := HeaderOf(partial, CoverHeader)
	if !ok {
		t.Fatalf("partial headers %v: no %s", partial.Headers, CoverHeader)
	}
	if c, err := DecodeCover(v); err != nil || c != (PartialCover{Last: 1, Rows: 2}) {
		t.Fatalf("cover %+v, %v; want offsets up to 1, 2 rows", c, err)
	}
	if _, err := DecodeCover(v[:1]); err == nil {
		t.Fatal("a truncated cover header decoded")
	}
	if _, _, w, _, err := DecodePartial(partial.Value); err != nil || w != 0 || partial.Value[0] != PartialFrom {
		t.Fatalf("partial value %x: want the previous release's form (0x%X, window 0): %v", partial.Value, PartialFrom, err)
	}

	mh := mergeHarness(t, p, nil, 1, 2)
	merge := mh.Task(0)
	// send has the merge stage read records of cmb's partition 0.
	send := func(recs ...*kafkaio.Record) {
		t.Helper()
		mh.Kafka().Append(recs...)
		merge.Poll()
	}
	from := func(src int32, cover *PartialCover) *kafkaio.Record {
		r := &kafkaio.Record{Topic: "cmb", Key: partial.Key}
		_, _, w, enc, _ := DecodePartial(partial.Value)
		r.Value = EncodePartial(src, w, enc)
		if cover != nil {
			r.Headers = []kafkaio.Header{{Key: CoverHeader, Value: EncodeCover(*cover)}}
		}
		return r
	}
	// Source 0 ships [0, 10) the previous release's way; both sources pass it.
	send(from(0, nil), marker(0, 12_000), marker(1, 12_000))
	merge.Commit()
	if panes := values(t, merge.Take()); len(panes) != 1 || panes[0]["n"].(float64) != 2 {
		t.Fatalf("panes %v, want u1's of 2", panes)
	}
	lateRows := func() float64 { return testutil.ToFloat64(mh.Metrics().LateRows.WithLabelValues("s", "dropped")) }
	copies := func() float64 { return testutil.ToFloat64(mh.Metrics().CombineLatePartials.WithLabelValues("s")) }
	send(from(0, &PartialCover{Last: 40, Rows: 3}), from(0, nil))
	if lateRows() != 0 || copies() != 2 {
		t.Fatalf("late rows %v, copies %v after two late partials of source 0: want 0 and 2", lateRows(), copies())
	}
	send(from(1, &PartialCover{Last: 7, Rows: 3}))
	if lateRows() != 3 || copies() != 2 || merge.Counts().Late != 3 {
		t.Fatalf("late rows %v (counted %d), copies %v after source 1's late partial: want 3, 3 and 2", lateRows(), merge.Counts().Late, copies())
	}
	merge.Commit()
	if got := merge.Take(); len(got) != 0 {
		t.Fatalf("%d panes from late partials", len(got))
	}
}

// A row without an event time (NULL, or the field missing) goes through
// on_error with 22004, under its own metric series; the rows around it
// keep their order and their record indexes.
func TestSourceNullEventTime(t *testing.T) {
	for _, policy := range []string{"fail", "skip", "dlq"} {
		nullTS := &kafkaio.Record{Offset: 1, Value: []byte(`{"k": "a", "u": "x", "v": 3, "ts": null}`)}
		noTS := &kafkaio.Record{Offset: 2, Value: []byte(`{"k": "b", "u": "y", "v": 4}`)}
		src := *evSource
		src.OnError, src.DLQTopic = onErrorOf(t, policy), "ev.dlq"
		h := evHarness(t, 1, chain(func() []Op {
			return []Op{&Source{Input: evRelation(&src), TimeIdx: 3, NeedsSeq: true, CountIn: true, TimeRequired: true, TimeRequiredIdx: 3, DLQ: dlqOne}}
		}))
		task := h.Task(0)
		err := task.TryPush(ev(0, 0, "a,x,1,5")[0], nullTS, noTS, ev(0, 3, "c,z,2,7")[0])
		if policy == "fail" {
			var se *sql.Error
			if !errors.As(err, &se) || se.Code != CodeNullValueNotAllowed || !strings.Contains(err.Error(), "ev/0 offset 1") {
				t.Fatalf("fail: %v, want 22004 naming ev/0 offset 1", err)
			}
			continue
		}
		outs := task.Batches()
		if err != nil || len(outs) != 1 {
			t.Fatalf("%s: %v, %d batches", policy, err, len(outs))
		}
		out := outs[0]
		if out.Data.N != 2 || out.Src[0] != 0 || out.Src[1] != 3 || out.Data.Cols[2].I[1] != 2 {
			t.Fatalf("%s: rows %d, src %v", policy, out.Data.N, out.Src)
		}
		if seq := out.Data.Cols[len(out.Data.Cols)-1]; seq.I[1] != 3<<10 {
			t.Fatalf("%s: seq of the second row %d, want offset 3's", policy, seq.I[1])
		}
		got := testutil.ToFloat64(h.Metrics().NullEventTime.WithLabelValues("s", policy))
		decode := testutil.ToFloat64(h.Metrics().DecodeErrors.WithLabelValues("s", policy))
		if got != 2 || decode != 0 {
			t.Fatalf("%s: null_event_time %v, decode_errors %v", policy, got, decode)
		}
		task.Commit()
		switch policy {
		case "skip":
			if n := task.Counts().Skipped; n != 2 || len(task.Take()) != 0 {
				t.Fatalf("skip: skipped %d, or produced something", n)
			}
		case "dlq":
			dl := task.Take()
			if len(dl) != 2 || string(dl[0].Value) != string(nullTS.Value) || string(dl[1].Value) != string(noTS.Value) || task.Counts().DLQ != 2 {
				t.Fatalf("dlq: %d dead letters", len(dl))
			}
		}
	}
}

// partialWindows decodes the windows of the partials in o (markers left
// out).
func partialWindows(t *testing.T, o optest.Output) []int64 {
	t.Helper()
	var out []int64
	for _, p := range partials(t, o) {
		out = append(out, p.Window)
	}
	return out
}

// A HOP pre-aggregation ships slices (gcd of slide and size) at the
// slice's end, and a row of a slice already shipped is late even while a
// later window holding that slice is open: shipping the slice again would
// replace, on the merge side, what was shipped with the late row alone.
func TestPartialAggHopShipsSlices(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT HOP_START(ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n
		FROM ev GROUP BY HOP(ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND)`, "auto")
	if p.Strategy != streamplan.StrategyCombine || p.Rule != "KeylessCombine" {
		t.Fatalf("plan %s (%s), want a keyless combine", p.Strategy, p.Rule)
	}
	pre := evHarness(t, 1, chain(func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 1}}
	})).Task(0)
	pre.Push(0, "a,x,1,1", "b,x,1,2", "c,x,1,6")
	pre.Advance(5_000)
	if slices := partialWindows(t, pre.Take()); len(slices) != 1 || slices[0] != 0 {
		t.Fatalf("shipped slices %v at watermark 5 s, want [0]: slice [0,5) only, [5,10) is open", slices)
	}
	// 00:00:03 belongs to slice [0,5), shipped; window [0,10) is still open.
	pre.Push(3, "d,x,1,3")
	if late := pre.Counts().Late; late != 1 {
		t.Fatalf("late rows %d, want 1", late)
	}
	pre.Advance(10_000)
	if slices := partialWindows(t, pre.Take()); len(slices) != 1 || slices[0] != 5_000 {
		t.Fatalf("shipped slices %v at watermark 10 s, want slice [5,10) once", slices)
	}
}

// TestDeadLettersOfAnAbortedTransaction: a task claims a dead letter
// before its commit; if the commit does not happen (an exactly-once
// transaction aborts, an at-least-once task fails before Kafka
// acknowledged it), the claim is given back so the same record read again
// (the stage restarted from its state) is written, not lost; once a commit
// confirms it (an at-least-once task's is confirmed when Kafka
// acknowledged it, even if the commit then fails), the claim stands, and
// the record is dead-lettered once.
func TestDeadLettersOfAnAbortedTransaction(t *testing.T) {
	for _, exactlyOnce := range []bool{true, false} {
		for _, fault := range []string{"flush", "commit"} {
			t.Run(fmt.Sprintf("exactly_once=%v/%s fails", exactlyOnce, fault), func(t *testing.T) {
				bad := &kafkaio.Record{Offset: 0, Value: []byte(`{"k": "a", "v": "not a number"}`)}
				src := *evSource
				src.OnError, src.DLQTopic = streamplan.OnErrorDLQ, "ev.dlq"
				letters := NewDeadLetters()
				run := func() *optest.Harness {
					return evHarness(t, 1, func(c *optest.Config) { c.ExactlyOnce = exactlyOnce }, chain(func() []Op {
						return []Op{&Source{Input: evRelation(&src), TimeIdx: 3, DLQ: dlqOne, Letters: letters}}
					}))
				}
				h := run()
				task := h.Task(0)
				task.PushRecords(bad)
				if fault == "flush" {
					h.Kafka().FailFlush(errors.New("the broker went away"))
				} else {
					h.Kafka().FailCommit(errors.New("the broker went away"))
				}
				if err := task.TryCommit(); err == nil {
					t.Fatal("the commit did not fail")
				}
				first := len(task.Take().Topic("ev.dlq"))
				// Only an at-least-once commit failing after its flush had
				// the dead letter acknowledged.
				acked := !exactlyOnce && fault == "commit"
				if want := map[bool]int{true: 1, false: 0}[acked]; first != want {
					t.Fatalf("first read: %d dead letters in Kafka, want %d", first, want)
				}
				h.Crash()
				task.Poll() // the record, read again from the state's offset
				task.Commit()
				again := len(task.Take().Topic("ev.dlq"))
				if first+again != 1 {
					t.Fatalf("read again after the failed commit: %d dead letters, %d before: want the record once (the first may never have reached the topic)", again, first)
				}
				// Another stage reading the same record, after a commit
				// confirmed the claim: nothing more.
				other := run().Task(0)
				other.PushRecords(bad)
				other.Commit()
				if n := len(other.Take()); n != 0 {
					t.Fatalf("a dead letter whose commit was confirmed was written again (%d)", n)
				}
			})
		}
	}
}

// TestHashAggEarlyFiresOnlyChanged: EMIT EVERY writes a window again only
// when it changed since its last early fire; an unchanged one is not
// re-sent, and its final pane still comes at the close.
func TestHashAggEarlyFiresOnlyChanged(t *testing.T) {
	p := planOf(t, tumbleSQL, "auto")
	h := evHarness(t, 1, chain(func() []Op { return aggChain(p, "", time.Second) }))
	task := h.Task(0)
	fire := func() []map[string]any {
		t.Helper()
		h.Elapse(time.Second)
		task.Advance(0)
		return values(t, task.Take())
	}
	task.Push(0, "a,x,1,1", "b,x,1,12")
	if got := fire(); len(got) != 2 {
		t.Fatalf("first early fire: %v, want both windows", got)
	}
	if got := fire(); len(got) != 0 {
		t.Fatalf("nothing changed, yet the early fire wrote %v", got)
	}
	task.Push(2, "a,x,5,2")
	got := fire()
	if len(got) != 1 || got[0]["k"] != "a" || got[0]["total"].(float64) != 6 || got[0]["is_final"] != false {
		t.Fatalf("after a row of [0,10): %v, want only that window, with a's new total", got)
	}
	task.Advance(10_000)
	got = values(t, task.Take())
	if len(got) != 1 || got[0]["k"] != "a" || got[0]["is_final"] != true {
		t.Fatalf("close of [0,10): %v", got)
	}
	if got := fire(); len(got) != 0 {
		t.Fatalf("[10,20) did not change: %v", got)
	}
}

// TestMergeWaitsForIdleSourceWithoutTime scripts issue 38 on the stages
// of a combine, their watermarks their own: source partition 1 is idle
// before it ever had a row, so its pre-aggregation sends a marker without
// a time; then rows reach both source partitions together, and source 0's
// task ships [0, 10) and a marker past it first. The merge must not close
// [0, 10) on that: source 1's rows of the window are on their way. Once
// source 1 has read them and, idle again, followed source 0 past the
// window, the pane holds both partitions' rows.
func TestMergeWaitsForIdleSourceWithoutTime(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS total
		FROM ev GROUP BY TUMBLE(ts, INTERVAL '10' SECOND)`, "combine")
	k := optest.NewKafka()
	ph := evHarness(t, 2, func(c *optest.Config) { c.Name, c.Kafka, c.Watermarks = "pre", k, optest.EventTime }, chain(func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 1}}
	}))
	mh := mergeHarness(t, p, k, 1, 2)
	merge := mh.Task(0)
	closeAt := func() []map[string]any {
		t.Helper()
		merge.Poll()
		merge.Commit()
		return values(t, merge.Take())
	}
	// Source 1 idle without a time.
	pre1 := ph.Task(1)
	pre1.Idle()
	if w := pre1.Watermark(); !w.Idle || w.Has {
		t.Fatalf("source 1's watermark %+v, want idle without a time", w)
	}
	pre0 := ph.Task(0)
	pre0.Push(0, "a,u1,1,5", "b,u2,2,12")
	pre0.Commit()
	if got := closeAt(); len(got) != 0 {
		t.Fatalf("the merge closed %v on source 0 alone, source 1 idle without a time", got)
	}
	// Source 1's rows, written with source 0's; then it is idle again,
	// and follows source 0's watermark.
	pre1.Push(0, "c,u3,4,7", "d,u4,8,9")
	pre1.Idle()
	pre1.Tick(3 * time.Second)
	if w := pre1.Watermark(); w.WM != 12_000 {
		t.Fatalf("source 1's watermark %+v, want 12 s: idle, it follows source 0", w)
	}
	got := closeAt()
	if len(got) != 1 || got[0]["n"].(float64) != 3 || got[0]["total"].(float64) != 13 {
		t.Fatalf("pane %v, want n 3 total 13: both partitions' rows of [0, 10)", got)
	}
	if late := testutil.ToFloat64(mh.Metrics().CombineLatePartials.WithLabelValues("s")); late != 0 {
		t.Fatalf("%v partials dropped at the merge", late)
	}
}
