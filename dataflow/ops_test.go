package dataflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/types"
)

// These tests drive each operator alone, as a task would: batches in,
// watermarks in, commits, and what it produced read back.

// memOut collects what operators produce.
type memOut struct{ recs []*kafkaio.Record }

func (m *memOut) Produce(_ context.Context, r *kafkaio.Record) { m.recs = append(m.recs, r) }

func (m *memOut) ProduceOr(ctx context.Context, r *kafkaio.Record, _ func(*kafkaio.Record)) {
	m.Produce(ctx, r)
}

func (m *memOut) take() []*kafkaio.Record {
	out := m.recs
	m.recs = nil
	return out
}

// rig is one task's environment over a real Pebble store.
type rig struct {
	t     *testing.T
	store *state.Store
	out   *memOut
	env   *Env
	ops   []Op
	task  *task
	now   time.Time
	// changelog, when set, receives every change of the rig's commits,
	// as the task's changelog would.
	changelog *[]state.Change
}

func newRig(t *testing.T, store *state.Store, p int32, parts int, ops ...Op) *rig {
	t.Helper()
	return newRigIn(t, store, p, parts, state.Scope("s", p), ops...)
}

// newRigIn is newRig with the task's state under scope ("": the stream's
// name, unscoped).
func newRigIn(t *testing.T, store *state.Store, p int32, parts int, scope string, ops ...Op) *rig {
	t.Helper()
	if store == nil {
		var err error
		if store, err = state.Open(t.TempDir(), nil); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
	}
	r := &rig{t: t, store: store, out: &memOut{}, ops: ops, now: time.Unix(1000, 0)}
	metas, err := store.Partitions("s")
	if err != nil {
		t.Fatal(err)
	}
	r.env = &Env{Name: "s", State: "s", Scope: scope, Partition: p, Partitions: parts, Restored: metas[p], Store: store, Out: r.out,
		Metrics: NewMetrics(prometheus.NewRegistry()), Counts: &TaskCounts{}, Now: func() time.Time { return r.now },
		Log: slog.New(slog.DiscardHandler)}
	r.task = &task{ops: ops}
	for _, op := range ops {
		if err := op.Open(context.Background(), r.env); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// feed pushes records through the chain.
func (r *rig) feed(recs []*kafkaio.Record) {
	r.t.Helper()
	if err := r.task.push(context.Background(), 0, &Batch{Partition: r.env.Partition, Recs: recs}); err != nil {
		r.t.Fatal(err)
	}
}

// watermark gives every operator the watermark, as a commit does.
func (r *rig) watermark(wm int64, flush bool) {
	r.t.Helper()
	w := Watermark{WM: wm, Has: true, Flush: flush, Idle: flush, Now: r.now}
	for i, op := range r.ops {
		out, err := op.OnWatermark(context.Background(), w)
		if err != nil {
			r.t.Fatal(err)
		}
		if err := r.task.push(context.Background(), i+1, out); err != nil {
			r.t.Fatal(err)
		}
	}
}

// commit writes the operators' state, as the task's commit does.
func (r *rig) commit(next int64) *Commit {
	r.t.Helper()
	c := &Commit{State: r.store.NewScopedBatch("s", r.env.Partition), Offset: next}
	if r.env.Scope == "" {
		c.State = r.store.NewBatch("s")
	}
	defer c.State.Close()
	for _, op := range r.ops {
		if err := op.Commit(context.Background(), c); err != nil {
			r.t.Fatal(err)
		}
	}
	meta := state.PartitionMeta{Offset: c.Offset, Closed: c.Closed, HasClosed: c.HasClosed, Applied: c.Applied}
	if err := c.State.PutPartition(r.env.Partition, meta); err != nil {
		r.t.Fatal(err)
	}
	if r.changelog != nil {
		if err := c.State.EachChange(func(k, v []byte) error {
			*r.changelog = append(*r.changelog, state.Change{Key: bytes.Clone(k), Value: bytes.Clone(v)})
			return nil
		}); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := c.State.Commit(); err != nil {
		r.t.Fatal(err)
	}
	return c
}

var evSource = &catalog.Source{Name: "ev", Topic: "ev", PartitionKey: "k", OnError: "fail",
	Schema:    types.Schema{{Name: "k", Type: types.Text}, {Name: "u", Type: types.Text}, {Name: "v", Type: types.Int}, {Name: "ts", Type: types.Timestamp}},
	Watermark: &catalog.Watermark{Column: "ts"}}

func evRelation(src *catalog.Source) *catalog.Relation {
	return &catalog.Relation{Name: src.Name, Topic: src.Topic, Schema: src.Schema, PartitionKey: src.PartitionKey, Watermark: src.Watermark, Source: src}
}

type resolver map[string]*catalog.Relation

func (r resolver) Relation(name string) (*catalog.Relation, bool) { rel, ok := r[name]; return rel, ok }

// planOf plans a CREATE STREAM over evSource.
func planOf(t *testing.T, text, strategy string) *planner.Plan {
	t.Helper()
	stmt, err := sql.Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	cs := stmt.(*sql.CreateStream)
	p, err := planner.BuildStream(resolver{"ev": evRelation(evSource)}, cs.Query, text, strategy)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ev makes records of partition p from (k, u, v, second) rows, at
// offsets from off.
func ev(p int32, off int64, rows ...string) []*kafkaio.Record {
	var out []*kafkaio.Record
	for i, row := range rows {
		f := strings.Split(row, ",")
		var v, sec int64
		fmt.Sscan(f[2], &v)
		fmt.Sscan(f[3], &sec)
		val, _ := json.Marshal(map[string]any{"k": f[0], "u": f[1], "v": v, "ts": sec * 1000})
		out = append(out, &kafkaio.Record{Topic: "ev", Partition: p, Offset: off + int64(i), Key: []byte(f[0]), Value: val})
	}
	return out
}

// values decodes produced JSON values.
func values(t *testing.T, recs []*kafkaio.Record) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, r := range recs {
		var m map[string]any
		if err := json.Unmarshal(r.Value, &m); err != nil {
			t.Fatalf("%s: %v", r.Value, err)
		}
		out = append(out, m)
	}
	return out
}

const tumbleSQL = `CREATE STREAM s AS SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS total
	FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`

func aggChain(p *planner.Plan, late string, emitEvery time.Duration) []Op {
	schema := p.Output
	if emitEvery > 0 {
		schema = append(append(types.Schema{}, schema...), types.Field{Name: "is_final", Type: types.Bool})
	}
	return []Op{
		&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx, CountIn: true, DLQ: func(context.Context, string) int { return 1 }},
		&HashAgg{Plan: p, LateDataTopic: late, EmitEvery: emitEvery, DLQ: func(context.Context, string) int { return 1 }},
		&Project{Filter: p.Having, Exprs: p.Project, AddFinal: emitEvery > 0},
		&Sink{Topic: "out", Partitions: 4, Schema: schema},
	}
}

func TestSourceOnError(t *testing.T) {
	bad := &kafkaio.Record{Topic: "ev", Partition: 0, Offset: 2, Value: []byte(`{"k": "a", "v": "not a number"}`)}
	for _, policy := range []string{"fail", "skip", "dlq"} {
		src := *evSource
		src.OnError, src.DLQTopic = policy, "ev.dlq"
		op := &Source{Input: evRelation(&src), TimeIdx: 3, CountIn: true, DLQ: func(context.Context, string) int { return 1 }}
		r := newRig(t, nil, 0, 1, op)
		recs := append(ev(0, 0, "a,x,1,5", "b,y,2,7"), bad)
		out, err := op.Process(context.Background(), &Batch{Partition: 0, Recs: recs})
		switch policy {
		case "fail":
			if err == nil || !strings.Contains(err.Error(), "ev/0 offset 2") {
				t.Fatalf("fail: %v, want an error naming ev/0 offset 2", err)
			}
			continue
		case "skip":
			if r.env.Counts.Skipped.Load() != 1 || len(r.out.recs) != 0 {
				t.Fatalf("skip: skipped %d, produced %d", r.env.Counts.Skipped.Load(), len(r.out.recs))
			}
		case "dlq":
			dl := r.out.take()
			if len(dl) != 1 || dl[0].Topic != "ev.dlq" || string(dl[0].Value) != string(bad.Value) || r.env.Counts.DLQ.Load() != 1 {
				t.Fatalf("dlq: %d dead letters %+v", len(dl), dl)
			}
		}
		if err != nil || out.Data.N != 2 || !out.HasTime || out.MaxTime != 7000 || r.env.Counts.In.Load() != 3 {
			t.Fatalf("%s: %v, %d rows, max time %d/%v", policy, err, out.Data.N, out.MaxTime, out.HasTime)
		}
	}
}

func TestHashAggClosesOnWatermark(t *testing.T) {
	p := planOf(t, tumbleSQL, "auto")
	r := newRig(t, nil, 0, 1, aggChain(p, "", 0)...)
	r.feed(ev(0, 0, "a,x,1,1", "a,x,2,9", "b,x,5,3", "a,x,7,12"))
	r.watermark(9_000, false)
	if got := r.out.take(); len(got) != 0 {
		t.Fatalf("window [0,10) closed at watermark 9 s: %v", values(t, got))
	}
	r.watermark(10_000, false)
	got := values(t, r.out.take())
	if len(got) != 2 || got[0]["n"].(float64)+got[1]["n"].(float64) != 3 {
		t.Fatalf("panes at 10 s: %v", got)
	}
	// A row for a closed window is late: dropped and counted.
	r.feed(ev(0, 4, "a,x,1,2"))
	if r.env.Counts.Late.Load() != 1 {
		t.Fatalf("late rows %d, want 1", r.env.Counts.Late.Load())
	}
	r.watermark(10_000, false)
	if got := r.out.take(); len(got) != 0 {
		t.Fatalf("a late row made a pane: %v", values(t, got))
	}
}

func TestHashAggRestoresItsGroups(t *testing.T) {
	p := planOf(t, tumbleSQL, "auto")
	store, err := state.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	keys := map[int32][]string{}
	for i := 0; len(keys[0]) < 2 || len(keys[1]) < 2; i++ {
		k := fmt.Sprintf("key%d", i)
		q := state.PartitionFor([]byte(k), 2)
		keys[q] = append(keys[q], k)
	}
	// Two tasks of a 2-partition input write their own groups.
	for q := int32(0); q < 2; q++ {
		r := newRig(t, store, q, 2, aggChain(p, "", 0)...)
		r.feed(ev(q, 0, keys[q][0]+",x,1,1", keys[q][1]+",x,2,2"))
		r.watermark(5_000, false)
		r.commit(2)
	}
	// Restarted, task 1 restores only its own groups, and its window
	// closes with the restored counts.
	r := newRig(t, store, 1, 2, aggChain(p, "", 0)...)
	if r.env.Restored.Offset != 2 || !r.env.Restored.HasClosed || r.env.Restored.Closed != 5_000 {
		t.Fatalf("restored %+v", r.env.Restored)
	}
	r.feed(ev(1, 2, keys[1][0]+",x,10,3"))
	r.watermark(20_000, false)
	got := values(t, r.out.take())
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
	r := newRig(t, nil, 0, 1, aggChain(p, "late", 0)...)
	r.feed(ev(0, 0, "a,x,1,1"))
	r.watermark(15_000, false)
	r.out.take()
	r.feed(ev(0, 1, "a,x,1,3"))
	got := r.out.take()
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
	r := newRig(t, nil, 0, 1, aggChain(p, "", time.Second)...)
	agg := r.ops[1].(*HashAgg)
	r.feed(ev(0, 0, "a,x,1,1"))
	if agg.Due(r.now) {
		t.Fatal("an early fire is due at once")
	}
	r.now = r.now.Add(time.Second)
	if !agg.Due(r.now) {
		t.Fatal("no early fire due after the interval")
	}
	r.watermark(0, false)
	got := values(t, r.out.take())
	if len(got) != 1 || got[0]["is_final"] != false || got[0]["n"].(float64) != 1 {
		t.Fatalf("early fire %v", got)
	}
	r.watermark(10_000, false)
	got = values(t, r.out.take())
	if len(got) != 1 || got[0]["is_final"] != true {
		t.Fatalf("final pane %v", got)
	}
}

func TestHashAggUpsert(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT k, SUM(v) AS total FROM ev GROUP BY k HAVING SUM(v) > 2`, "auto")
	ops := []Op{&Source{Input: p.Input, TimeIdx: -1}, &HashAgg{Plan: p}, &Project{Filter: p.Having, Exprs: p.Project},
		&Sink{Topic: "out", Partitions: 3, Schema: p.Output}}
	r := newRig(t, nil, 0, 1, ops...)
	r.feed(ev(0, 0, "a,x,1,1", "b,x,5,1", "a,x,1,2"))
	r.watermark(0, false)
	got := r.out.take()
	if len(got) != 1 || string(got[0].Key) != "b" || got[0].Partition != state.PartitionFor([]byte("b"), 3) {
		t.Fatalf("upsert output %+v", got)
	}
	r.commit(3)
	r.feed(ev(0, 3, "a,x,1,3"))
	r.watermark(0, false)
	got = r.out.take()
	if len(got) != 1 || string(got[0].Key) != "a" || values(t, got)[0]["total"].(float64) != 3 {
		t.Fatalf("changed group a: %+v", got)
	}
}

func TestSinkPlacement(t *testing.T) {
	schema := types.Schema{{Name: "k", Type: types.Text}, {Name: "n", Type: types.Int}}
	for _, mk := range []string{"", "k"} {
		op := &Sink{Topic: "out", Partitions: 5, Schema: schema, MessageKey: mk}
		r := newRig(t, nil, 2, 4, op)
		rows := [][]any{{"a", int64(1)}, {nil, int64(2)}, {"c", int64(3)}}
		keys := [][]byte{[]byte("z"), nil, nil}
		if _, err := op.Process(context.Background(), &Batch{Rows: rows, Keys: keys}); err != nil {
			t.Fatal(err)
		}
		got := r.out.take()
		want := []string{"z", "", ""}
		if mk == "k" {
			want = []string{"a", "", "c"}
		}
		for i, rec := range got {
			if string(rec.Key) != want[i] {
				t.Fatalf("message_key %q row %d: key %q, want %q", mk, i, rec.Key, want[i])
			}
			if want[i] != "" && rec.Partition != state.PartitionFor(rec.Key, 5) {
				t.Fatalf("row %d on partition %d, murmur2 says %d", i, rec.Partition, state.PartitionFor(rec.Key, 5))
			}
		}
		if r.env.Counts.Out.Load() != 3 {
			t.Fatalf("records_out %d", r.env.Counts.Out.Load())
		}
	}
}

func TestExchangeRekeysAndMarks(t *testing.T) {
	src := *evSource
	ops := []Op{&Source{Input: evRelation(&src), TimeIdx: 3}, &Exchange{Topic: "rep", Partitions: 4, Col: 1}}
	r := newRig(t, nil, 1, 2, ops...)
	in := ev(1, 0, "a,u1,1,1", "b,u2,2,2")
	in = append(in, &kafkaio.Record{Topic: "ev", Partition: 1, Offset: 2, Value: []byte(`{"k": "c", "u": null, "v": 3, "ts": 3000}`)})
	r.feed(in)
	got := r.out.take()
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
	r.watermark(2_000, false)
	marks := r.out.take()
	if len(marks) != 4 {
		t.Fatalf("%d markers, want one per internal partition", len(marks))
	}
	for q, m := range marks {
		v, ok := markerOf(m)
		mk, err := shuffle.DecodeMarker(v)
		if !ok || err != nil || int(m.Partition) != q || mk.Source != 1 || mk.MaxTime != 2_000 || !mk.HasTime {
			t.Fatalf("marker %d: %+v %+v", q, m, mk)
		}
	}
}

func TestPartialAggShipsAndMerges(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT u, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS total
		FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '10' SECOND)`, "combine")
	pre := newRig(t, nil, 0, 1, &Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 2})
	pre.feed(ev(0, 0, "a,u1,1,1", "b,u1,2,2", "c,u2,3,12"))
	c := pre.commit(3)
	if c.Offset != 0 || c.Applied != 3 {
		t.Fatalf("restart offset %d (applied %d): the unshipped windows' rows must be read again", c.Offset, c.Applied)
	}
	pre.watermark(10_000, false)
	shipped := pre.out.take()
	var partials, marks []*kafkaio.Record
	for _, rec := range shipped {
		if _, ok := markerOf(rec); ok {
			marks = append(marks, rec)
		} else {
			partials = append(partials, rec)
		}
	}
	if len(partials) != 1 || len(marks) != 2 {
		t.Fatalf("%d partials and %d markers, want u1's [0,10) and a marker per internal partition", len(partials), len(marks))
	}
	if c := pre.commit(3); c.Offset != 2 {
		t.Fatalf("restart offset %d after shipping [0,10): want 2, u2's row in [10,20)", c.Offset)
	}
	// The merge side: the partial, then markers; a redelivered partial
	// after the close is dropped and counted as redelivered.
	q := partials[0].Partition
	merge := newRig(t, nil, q, 2, &Markers{Sources: 1}, &HashAgg{Plan: p, Merge: true},
		&Project{Exprs: p.Project}, &Sink{Topic: "out", Partitions: 1, Schema: p.Output})
	for i, rec := range append(partials, marks[q]) {
		rec.Offset = int64(i)
	}
	merge.feed(append(partials, marks[q]))
	wm, ok := merge.ops[0].(*Markers).Time()
	if !ok || wm != 10_000 {
		t.Fatalf("merge watermark %d/%v", wm, ok)
	}
	merge.watermark(wm, false)
	got := values(t, merge.out.take())
	if len(got) != 1 || got[0]["u"] != "u1" || got[0]["n"].(float64) != 2 || got[0]["total"].(float64) != 3 {
		t.Fatalf("merged panes %v", got)
	}
	merge.feed(partials)
	merge.watermark(wm, false)
	dropped := testutil.ToFloat64(merge.env.Metrics.CombineLatePartials.WithLabelValues("s"))
	if got := merge.out.take(); len(got) != 0 || dropped != 1 || merge.env.Counts.Late.Load() != 0 {
		t.Fatalf("a redelivered partial: %d panes, %v counted in turbine_combine_late_partials_total (want 1), %d late rows (want 0: it is a copy, not a late row)",
			len(got), dropped, merge.env.Counts.Late.Load())
	}
}

func TestProjectFiltersKeysAlong(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT k, v * 2 AS dbl FROM ev WHERE v > 1`, "auto")
	r := newRig(t, nil, 0, 1, &Source{Input: p.Input, TimeIdx: -1}, &Project{Filter: p.Filter, Exprs: p.Project},
		&Sink{Topic: "out", Partitions: 1, Schema: p.Output})
	r.feed(ev(0, 0, "a,x,1,1", "b,x,2,1", "c,x,3,1"))
	got := values(t, r.out.take())
	if len(got) != 2 || got[0]["dbl"].(float64) != 4 || got[1]["dbl"].(float64) != 6 {
		t.Fatalf("projected %v", got)
	}
}

// TestMarkersApplyEachSourceRecordOnce: copies a repartition hop writes
// again after a crash (same source partition and offset) are dropped, also
// after the reader itself restarts from its committed state.
func TestMarkersApplyEachSourceRecordOnce(t *testing.T) {
	store, err := state.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	copyOf := func(off int64, src int32, srcOff int64) *kafkaio.Record {
		return &kafkaio.Record{Topic: "rep", Partition: 0, Offset: off, Value: []byte(fmt.Sprint(srcOff)),
			Headers: []kafkaio.Header{{Key: SourceHeader, Value: EncodeSource(src, srcOff)}}}
	}
	m := &Markers{Sources: 2}
	r := newRig(t, store, 0, 1, m)
	out, err := m.Process(context.Background(), &Batch{Recs: []*kafkaio.Record{copyOf(0, 0, 10), copyOf(1, 1, 5), copyOf(2, 0, 11)}})
	if err != nil || len(out.Recs) != 3 {
		t.Fatalf("first copies: %v, %d passed", err, len(out.Recs))
	}
	r.commit(3)
	// The hop restarted from source offset 10 of partition 0: 10 and 11 come
	// again, then 12 is new.
	out, err = m.Process(context.Background(), &Batch{Recs: []*kafkaio.Record{copyOf(3, 0, 10), copyOf(4, 0, 11), copyOf(5, 0, 12)}})
	if err != nil || len(out.Recs) != 1 || string(out.Recs[0].Value) != "12" {
		t.Fatalf("after the hop's restart: %v, passed %v", err, out)
	}
	// The reader restarts from its commit (offset 3): the same holds.
	m2 := &Markers{Sources: 2}
	newRig(t, store, 0, 1, m2)
	out, err = m2.Process(context.Background(), &Batch{Recs: []*kafkaio.Record{copyOf(3, 0, 10), copyOf(4, 0, 11), copyOf(5, 0, 12), copyOf(6, 1, 5), copyOf(7, 1, 6)}})
	if err != nil || len(out.Recs) != 2 || string(out.Recs[0].Value) != "12" || string(out.Recs[1].Value) != "6" {
		t.Fatalf("after the reader's restart: %v, passed %d", err, len(out.Recs))
	}
}

// TestCombineShipsAgainAfterACrash: a pre-aggregation that shipped a
// window and crashed before committing ships it again after its restart;
// the merge stage, whose window is still open (another source partition is
// behind), keeps the latest partial of each source, so the pane counts
// each row once.
func TestCombineShipsAgainAfterACrash(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT u, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS total
		FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '10' SECOND)`, "combine")
	store, err := state.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	preChain := func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 1}}
	}
	merge := newRig(t, nil, 0, 1, &Markers{Sources: 2}, &HashAgg{Plan: p, Merge: true},
		&Project{Exprs: p.Project}, &Sink{Topic: "out", Partitions: 1, Schema: p.Output})
	off := int64(0)
	deliver := func(recs []*kafkaio.Record) {
		for _, r := range recs {
			r.Partition, r.Offset = 0, off
			off++
		}
		merge.feed(recs)
	}
	marker := func(src int32, wm int64) *kafkaio.Record {
		m := shuffle.Marker{Source: src, MaxTime: wm, HasTime: true}
		return &kafkaio.Record{Topic: "cmb", Headers: []kafkaio.Header{{Key: shuffle.MarkerHeader, Value: m.Encode(nil)}}}
	}
	deliver([]*kafkaio.Record{marker(1, 5_000)}) // source 1 is behind [0, 10)

	pre := newRig(t, store, 0, 1, preChain()...)
	pre.feed(ev(0, 0, "a,u1,1,1", "b,u1,2,2"))
	pre.commit(2) // [0, 10) not shipped: restart at 0, read up to 2
	pre.feed(ev(0, 2, "c,u1,4,12"))
	pre.watermark(12_000, false) // ships [0, 10), then crashes: no commit
	deliver(pre.out.take())

	again := newRig(t, store, 0, 1, preChain()...)
	again.feed(ev(0, 0, "a,u1,1,1", "b,u1,2,2", "c,u1,4,12"))
	again.watermark(12_000, false)
	deliver(again.out.take())

	deliver([]*kafkaio.Record{marker(1, 20_000)})
	wm, ok := merge.ops[0].(*Markers).Time()
	if !ok || wm != 12_000 {
		t.Fatalf("merge watermark %d/%v", wm, ok)
	}
	merge.watermark(wm, false)
	got := values(t, merge.out.take())
	if len(got) != 1 || got[0]["n"].(float64) != 2 || got[0]["total"].(float64) != 3 {
		t.Fatalf("pane %v, want u1 n 2 total 3: a repeated ship counted once", got)
	}
}

// A row without an event time (NULL, or the field missing) goes through
// on_error with 22004, under its own metric series; the rows around it
// keep their order and their record indexes.
func TestSourceNullEventTime(t *testing.T) {
	nullTS := &kafkaio.Record{Topic: "ev", Partition: 0, Offset: 1, Value: []byte(`{"k": "a", "u": "x", "v": 3, "ts": null}`)}
	noTS := &kafkaio.Record{Topic: "ev", Partition: 0, Offset: 2, Value: []byte(`{"k": "b", "u": "y", "v": 4}`)}
	for _, policy := range []string{"fail", "skip", "dlq"} {
		src := *evSource
		src.OnError, src.DLQTopic = policy, "ev.dlq"
		op := &Source{Input: evRelation(&src), TimeIdx: 3, NeedsSeq: true, CountIn: true, TimeRequired: true, TimeRequiredIdx: 3,
			DLQ: func(context.Context, string) int { return 1 }}
		r := newRig(t, nil, 0, 1, op)
		recs := []*kafkaio.Record{ev(0, 0, "a,x,1,5")[0], nullTS, noTS, ev(0, 3, "c,z,2,7")[0]}
		out, err := op.Process(context.Background(), &Batch{Partition: 0, Recs: recs})
		if policy == "fail" {
			var se *sql.Error
			if !errors.As(err, &se) || se.Code != CodeNullValueNotAllowed || !strings.Contains(err.Error(), "ev/0 offset 1") {
				t.Fatalf("fail: %v, want 22004 naming ev/0 offset 1", err)
			}
			continue
		}
		if err != nil || out.Data.N != 2 || out.Src[0] != 0 || out.Src[1] != 3 || out.Data.Cols[2].I[1] != 2 {
			t.Fatalf("%s: %v, rows %d, src %v", policy, err, out.Data.N, out.Src)
		}
		if seq := out.Data.Cols[len(out.Data.Cols)-1]; seq.I[1] != 3<<10 {
			t.Fatalf("%s: seq of the second row %d, want offset 3's", policy, seq.I[1])
		}
		got := testutil.ToFloat64(r.env.Metrics.NullEventTime.WithLabelValues("s", policy))
		decode := testutil.ToFloat64(r.env.Metrics.DecodeErrors.WithLabelValues("s", policy))
		if got != 2 || decode != 0 {
			t.Fatalf("%s: null_event_time %v, decode_errors %v", policy, got, decode)
		}
		switch policy {
		case "skip":
			if r.env.Counts.Skipped.Load() != 2 || len(r.out.recs) != 0 {
				t.Fatalf("skip: skipped %d, produced %d", r.env.Counts.Skipped.Load(), len(r.out.recs))
			}
		case "dlq":
			dl := r.out.take()
			if len(dl) != 2 || string(dl[0].Value) != string(nullTS.Value) || string(dl[1].Value) != string(noTS.Value) || r.env.Counts.DLQ.Load() != 2 {
				t.Fatalf("dlq: %d dead letters", len(dl))
			}
		}
	}
}

// A HOP pre-aggregation ships slices (gcd of slide and size) at the
// slice's end, and a row of a slice already shipped is late even while a
// later window holding that slice is open: shipping the slice again would
// replace, on the merge side, what was shipped with the late row alone.
func TestPartialAggHopShipsSlices(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT HOP_START(ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n
		FROM ev GROUP BY HOP(ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND)`, "auto")
	if p.Strategy != "combine" || p.Rule != "KeylessCombine" {
		t.Fatalf("plan %s (%s), want a keyless combine", p.Strategy, p.Rule)
	}
	pre := newRig(t, nil, 0, 1, &Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 1})
	pre.feed(ev(0, 0, "a,x,1,1", "b,x,1,2", "c,x,1,6"))
	pre.watermark(5_000, false)
	var slices []int64
	for _, rec := range pre.out.take() {
		if _, ok := markerOf(rec); ok {
			continue
		}
		_, _, w, _, err := DecodePartial(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		slices = append(slices, w)
	}
	if len(slices) != 1 || slices[0] != 0 {
		t.Fatalf("shipped slices %v at watermark 5 s, want [0]: slice [0,5) only, [5,10) is open", slices)
	}
	// 00:00:03 belongs to slice [0,5), shipped; window [0,10) is still open.
	pre.feed(ev(0, 3, "d,x,1,3"))
	if late := pre.env.Counts.Late.Load(); late != 1 {
		t.Fatalf("late rows %d, want 1", late)
	}
	pre.watermark(10_000, false)
	n := 0
	for _, rec := range pre.out.take() {
		if _, ok := markerOf(rec); !ok {
			_, _, w, _, _ := DecodePartial(rec.Value)
			if w != 5_000 {
				t.Fatalf("shipped slice %d at watermark 10 s, want only 5000", w)
			}
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d partials at watermark 10 s, want slice [5,10) once", n)
	}
}

// TestDeadLettersOfAnAbortedTransaction: a task claims a dead letter
// before its commit; if the commit does not happen (an exactly-once
// transaction aborts, an at-least-once task fails before Kafka
// acknowledged it), the claim is given back so the same record read again
// (the stage restarted from its state) is written, not lost; once a commit
// confirms it, the claim stands.
func TestDeadLettersOfAnAbortedTransaction(t *testing.T) {
	for _, exactlyOnce := range []bool{true, false} {
		t.Run(fmt.Sprint("exactly_once=", exactlyOnce), func(t *testing.T) {
			bad := &kafkaio.Record{Topic: "ev", Partition: 0, Offset: 2, Value: []byte(`{"k": "a", "v": "not a number"}`)}
			src := *evSource
			src.OnError, src.DLQTopic = "dlq", "ev.dlq"
			letters := NewDeadLetters()
			run := func() (*Source, *rig) {
				op := &Source{Input: evRelation(&src), TimeIdx: 3, DLQ: func(context.Context, string) int { return 1 }, Letters: letters}
				r := newRig(t, nil, 0, 1, op)
				r.env.ExactlyOnce = exactlyOnce
				if _, err := op.Process(context.Background(), &Batch{Partition: 0, Recs: []*kafkaio.Record{bad}}); err != nil {
					t.Fatal(err)
				}
				return op, r
			}
			op, r := run()
			if n := len(r.out.take()); n != 1 {
				t.Fatalf("first read: %d dead letters, want 1", n)
			}
			op.Abandoned()
			op, r = run()
			if n := len(r.out.take()); n != 1 {
				t.Fatalf("read again after the failed commit: %d dead letters, want 1 (the first may never have reached the topic)", n)
			}
			op.Confirmed()
			op.Abandoned() // nothing left to give back
			if _, r = run(); len(r.out.take()) != 0 {
				t.Fatal("a dead letter whose commit was confirmed was written again")
			}
		})
	}
}

// TestHashAggEarlyFiresOnlyChanged: EMIT EVERY writes a window again only
// when it changed since its last early fire; an unchanged one is not
// re-sent, and its final pane still comes at the close.
func TestHashAggEarlyFiresOnlyChanged(t *testing.T) {
	p := planOf(t, tumbleSQL, "auto")
	r := newRig(t, nil, 0, 1, aggChain(p, "", time.Second)...)
	fire := func() []map[string]any {
		t.Helper()
		r.now = r.now.Add(time.Second)
		r.watermark(0, false)
		return values(t, r.out.take())
	}
	r.feed(ev(0, 0, "a,x,1,1", "b,x,1,12"))
	if got := fire(); len(got) != 2 {
		t.Fatalf("first early fire: %v, want both windows", got)
	}
	if got := fire(); len(got) != 0 {
		t.Fatalf("nothing changed, yet the early fire wrote %v", got)
	}
	r.feed(ev(0, 2, "a,x,5,2"))
	got := fire()
	if len(got) != 1 || got[0]["k"] != "a" || got[0]["total"].(float64) != 6 || got[0]["is_final"] != false {
		t.Fatalf("after a row of [0,10): %v, want only that window, with a's new total", got)
	}
	r.watermark(10_000, false)
	got = values(t, r.out.take())
	if len(got) != 1 || got[0]["k"] != "a" || got[0]["is_final"] != true {
		t.Fatalf("close of [0,10): %v", got)
	}
	if got := fire(); len(got) != 0 {
		t.Fatalf("[10,20) did not change: %v", got)
	}
}

// TestMergeWaitsForIdleSourceWithoutTime scripts issue 38 on the operators
// of a combine: source partition 1 is idle before it ever had a row, so its
// pre-aggregation sends a marker without a time; then rows reach both
// source partitions together, and source 0's task ships [0, 10) and a
// marker past it first. The merge must not close [0, 10) on that: source
// 1's rows of the window are on their way. Once source 1 has read them
// and shipped, the pane holds both partitions' rows.
func TestMergeWaitsForIdleSourceWithoutTime(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS total
		FROM ev GROUP BY TUMBLE(ts, INTERVAL '10' SECOND)`, "combine")
	preOf := func(q int32) *rig {
		return newRig(t, nil, q, 2, &Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 1})
	}
	pre0, pre1 := preOf(0), preOf(1)
	merge := newRig(t, nil, 0, 1, &Markers{Sources: 2}, &HashAgg{Plan: p, Merge: true},
		&Project{Exprs: p.Project}, &Sink{Topic: "out", Partitions: 1, Schema: p.Output})
	off := int64(0)
	deliver := func(recs []*kafkaio.Record) {
		for _, r := range recs {
			r.Partition, r.Offset = 0, off
			off++
		}
		merge.feed(recs)
	}
	closeAt := func() []map[string]any {
		t.Helper()
		wm, ok := merge.ops[0].(*Markers).Time()
		if !ok {
			return nil
		}
		merge.watermark(wm, false)
		return values(t, merge.out.take())
	}
	// Source 1 idle without a time: what its task gives its operators then.
	for _, op := range pre1.ops {
		if _, err := op.OnWatermark(context.Background(), Watermark{Idle: true, Now: pre1.now}); err != nil {
			t.Fatal(err)
		}
	}
	deliver(pre1.out.take())
	pre0.feed(ev(0, 0, "a,u1,1,5", "b,u2,2,12"))
	pre0.watermark(12_000, false)
	deliver(pre0.out.take())
	if got := closeAt(); len(got) != 0 {
		t.Fatalf("the merge closed %v on source 0 alone, source 1 idle without a time", got)
	}
	// Source 1's rows, written with source 0's; then its watermark.
	pre1.feed(ev(1, 0, "c,u3,4,7", "d,u4,8,9"))
	pre1.watermark(12_000, false)
	deliver(pre1.out.take())
	got := closeAt()
	if len(got) != 1 || got[0]["n"].(float64) != 3 || got[0]["total"].(float64) != 13 {
		t.Fatalf("pane %v, want n 3 total 13: both partitions' rows of [0, 10)", got)
	}
	if late := testutil.ToFloat64(merge.env.Metrics.CombineLatePartials.WithLabelValues("s")); late != 0 {
		t.Fatalf("%v partials dropped at the merge", late)
	}
}

// TestMergeTellsLatePartialsFromCopies: a pre-aggregation ships [0, 10)
// and crashes before its commit, after reading a row of [0, 10) that came
// too late (dropped at the source). The merge stage closes [0, 10); the
// restarted pre-aggregation reads the three rows again and ships [0, 10)
// once more. u2's partial is a copy of what the pane holds: counted in
// turbine_combine_late_partials_total, not as late. u1's carries the row
// the pane never had: one late row (only that one: the rows it had read
// before are not new). Neither makes a pane. The merge stage remembers this
// across its own restart, and the same ship arriving again is a copy.
func TestMergeTellsLatePartialsFromCopies(t *testing.T) {
	p := planOf(t, `CREATE STREAM s AS SELECT u, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n
		FROM ev GROUP BY u, TUMBLE(ts, INTERVAL '10' SECOND)`, "combine")
	preStore, err := state.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer preStore.Close()
	mergeStore, err := state.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mergeStore.Close()
	preChain := func() []Op {
		return []Op{&Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 1}}
	}
	mergeChain := func() []Op {
		return []Op{&Markers{Sources: 2}, &HashAgg{Plan: p, Merge: true},
			&Project{Exprs: p.Project}, &Sink{Topic: "out", Partitions: 1, Schema: p.Output}}
	}
	merge := newRig(t, mergeStore, 0, 1, mergeChain()...)
	off := int64(0)
	deliverTo := func(r *rig, recs []*kafkaio.Record) {
		for _, rec := range recs {
			rec.Partition, rec.Offset = 0, off
			off++
		}
		r.feed(recs)
	}
	marker := func(src int32, wm int64) *kafkaio.Record {
		m := shuffle.Marker{Source: src, MaxTime: wm, HasTime: true}
		return &kafkaio.Record{Topic: "cmb", Headers: []kafkaio.Header{{Key: shuffle.MarkerHeader, Value: m.Encode(nil)}}}
	}
	lateRows := func(r *rig) float64 {
		return testutil.ToFloat64(r.env.Metrics.LateRows.WithLabelValues("s", "dropped"))
	}
	copies := func(r *rig) float64 {
		return testutil.ToFloat64(r.env.Metrics.CombineLatePartials.WithLabelValues("s"))
	}

	pre := newRig(t, preStore, 0, 1, preChain()...)
	pre.feed(ev(0, 0, "a,u1,1,1", "b,u2,1,2"))
	pre.commit(2) // nothing shipped: restart at 0, read up to 2
	pre.watermark(12_000, false)
	deliverTo(merge, pre.out.take())                       // [0, 10) of u1 and u2, marker 12 s
	pre.feed(ev(0, 2, "c,u1,1,3"))                         // too late at the source: dropped and counted
	deliverTo(merge, []*kafkaio.Record{marker(1, 20_000)}) // the crash: no commit
	merge.watermark(12_000, false)
	panes := values(t, merge.out.take())
	if len(panes) != 2 || panes[0]["n"].(float64) != 1 || panes[1]["n"].(float64) != 1 {
		t.Fatalf("panes %v, want u1 and u2 once each", panes)
	}
	if pre.env.Counts.Load().Late != 1 {
		t.Fatalf("the source counted %d late rows, want 1", pre.env.Counts.Load().Late)
	}

	again := newRig(t, preStore, 0, 1, preChain()...)
	again.feed(ev(0, 0, "a,u1,1,1", "b,u2,1,2", "c,u1,1,3"))
	again.watermark(12_000, false)
	reship := again.out.take()
	var reshipped []*kafkaio.Record
	for _, rec := range reship {
		reshipped = append(reshipped, &kafkaio.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Headers: rec.Headers})
	}
	deliverTo(merge, reship)
	merge.watermark(12_000, false)
	if got := merge.out.take(); len(got) != 0 {
		t.Fatalf("%d panes from partials of a closed window", len(got))
	}
	if late, cp := lateRows(merge), copies(merge); late != 1 || cp != 1 || merge.env.Counts.Load().Late != 1 {
		t.Fatalf("late rows %v (stats %d), copies %v: want u1's new row late, u2's partial a copy", late, merge.env.Counts.Load().Late, cp)
	}
	merge.commit(off)

	// The merge stage restarts from its commit: both are copies now.
	merge2 := newRig(t, mergeStore, 0, 1, mergeChain()...)
	deliverTo(merge2, reshipped)
	merge2.watermark(12_000, false)
	if late, cp := lateRows(merge2), copies(merge2); len(merge2.out.take()) != 0 || late != 0 || cp != 2 {
		t.Fatalf("after the merge stage's restart: late rows %v, copies %v; want 0 and 2", late, cp)
	}
}

// TestMergeUncoveredPartialsAreCopies: partials the previous release
// shipped carry no turbine.partial.cover header (a rolling upgrade). Such
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
	pre := newRig(t, nil, 0, 1, &Source{Input: p.Input, TimeIdx: p.Window.TimeIdx}, &PartialAgg{Plan: p, Topic: "cmb", Partitions: 1})
	pre.feed(ev(0, 0, "a,u1,1,1", "b,u1,1,2"))
	pre.watermark(12_000, false)
	var partial *kafkaio.Record
	for _, rec := range pre.out.take() {
		if _, ok := markerOf(rec); !ok {
			partial = rec
		}
	}
	v, ok := header(partial, CoverHeader)
	if !ok {
		t.Fatalf("partial headers %v: no %s", partial.Headers, CoverHeader)
	}
	if c, err := DecodeCover(v); err != nil || c != (PartialCover{Last: 1, Rows: 2}) {
		t.Fatalf("cover %+v, %v; want offsets up to 1, 2 rows", c, err)
	}
	if _, err := DecodeCover(v[:1]); err == nil {
		t.Fatal("a truncated cover header decoded")
	}
	if _, _, w, _, err := DecodePartial(partial.Value); err != nil || w != 0 || partial.Value[0] != partialFrom {
		t.Fatalf("partial value %x: want the previous release's form (0x%X, window 0): %v", partial.Value, partialFrom, err)
	}

	merge := newRig(t, nil, 0, 1, &Markers{Sources: 2}, &HashAgg{Plan: p, Merge: true},
		&Project{Exprs: p.Project}, &Sink{Topic: "out", Partitions: 1, Schema: p.Output})
	off := int64(0)
	send := func(recs ...*kafkaio.Record) {
		for _, rec := range recs {
			rec.Partition, rec.Offset = 0, off
			off++
		}
		merge.feed(recs)
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
	marker := func(src int32, wm int64) *kafkaio.Record {
		m := shuffle.Marker{Source: src, MaxTime: wm, HasTime: true}
		return &kafkaio.Record{Topic: "cmb", Headers: []kafkaio.Header{{Key: shuffle.MarkerHeader, Value: m.Encode(nil)}}}
	}
	// Source 0 ships [0, 10) the previous release's way; both sources pass it.
	send(from(0, nil), marker(0, 12_000), marker(1, 12_000))
	merge.watermark(12_000, false)
	if panes := values(t, merge.out.take()); len(panes) != 1 || panes[0]["n"].(float64) != 2 {
		t.Fatalf("panes %v, want u1's of 2", panes)
	}
	lateRows := func() float64 { return testutil.ToFloat64(merge.env.Metrics.LateRows.WithLabelValues("s", "dropped")) }
	copies := func() float64 { return testutil.ToFloat64(merge.env.Metrics.CombineLatePartials.WithLabelValues("s")) }
	send(from(0, &PartialCover{Last: 40, Rows: 3}), from(0, nil))
	if lateRows() != 0 || copies() != 2 {
		t.Fatalf("late rows %v, copies %v after two late partials of source 0: want 0 and 2", lateRows(), copies())
	}
	send(from(1, &PartialCover{Last: 7, Rows: 3}))
	if lateRows() != 3 || copies() != 2 || merge.env.Counts.Load().Late != 3 {
		t.Fatalf("late rows %v (counted %d), copies %v after source 1's late partial: want 3, 3 and 2", lateRows(), merge.env.Counts.Load().Late, copies())
	}
	if got := merge.out.take(); len(got) != 0 {
		t.Fatalf("%d panes from late partials", len(got))
	}
}
