package optest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/dataflow/optest"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/types"
)

// userFormat: rows of (user, amount, ts), keyed by user.
var userFormat = optest.Format{Key: "user", Schema: types.Schema{
	{Name: "user", Type: types.Text}, {Name: "amount", Type: types.Int}, {Name: "ts", Type: types.Timestamp}}}

func counting(t *testing.T, mods ...func(*optest.Config)) *optest.Harness {
	cfg := optest.Config{Input: userFormat, Watermarks: optest.Scripted,
		Ops: func(int32) []dataflow.Op { return []dataflow.Op{&counter{}} }}
	for _, m := range mods {
		m(&cfg)
	}
	return optest.New(t, cfg)
}

// counts is what o says of each key: its last count.
func counts(o optest.Output) map[string]string {
	out := map[string]string{}
	for _, r := range o.Topic("counts") {
		out[string(r.Key)] = string(r.Value)
	}
	return out
}

func TestParseRow(t *testing.T) {
	row, err := userFormat.ParseRow(" al , 7 , 1500ms")
	if err != nil || row[0] != "al" || row[1] != int64(7) || row[2].(interface{ UnixMilli() int64 }).UnixMilli() != 1500 {
		t.Fatalf("row %v, %v", row, err)
	}
	if row, err = userFormat.ParseRow("NULL,NULL,2026-01-01 00:00:05"); err != nil || row[0] != nil || row[1] != nil {
		t.Fatalf("row %v, %v", row, err)
	}
	if _, err := userFormat.ParseRow("al,seven,5"); err == nil || !strings.Contains(err.Error(), "amount") {
		t.Fatalf("a bad value: %v, want an error naming the column", err)
	}
	if _, err := userFormat.ParseRow("al,7"); err == nil {
		t.Fatal("a short row parsed")
	}
	recs, err := userFormat.Records("in", 2, 10, "al,1,1", "NULL,2,2", ",3,3")
	if err != nil || len(recs) != 3 || string(recs[0].Key) != "al" || recs[1].Key != nil || recs[2].Key == nil || len(recs[2].Key) != 0 ||
		recs[2].Offset != 12 || recs[0].Partition != 2 || string(recs[0].Value) != `{"user":"al","amount":1,"ts":"1970-01-01T00:00:01Z"}` {
		t.Fatalf("records %v, %v", recs, err)
	}
}

// TestLoseDiskRestoresFromTheChangelog: a restart on an empty disk finds
// the task's state in the changelog its commits wrote.
func TestLoseDiskRestoresFromTheChangelog(t *testing.T) {
	for _, exactlyOnce := range []bool{false, true} {
		h := counting(t, func(c *optest.Config) { c.ExactlyOnce = exactlyOnce })
		task := h.Task(0)
		task.Push(0, "al,1,1", "bo,1,1", "al,1,2")
		task.Advance(2_000)
		h.LoseDisk()
		h.Restart()
		if got := task.Env().Restored.Offset; got != 3 {
			t.Fatalf("exactly_once=%v: restored at offset %d, want 3", exactlyOnce, got)
		}
		if n := testutil.ToFloat64(h.Metrics().RestoredRecords.WithLabelValues("s")); n == 0 {
			t.Fatalf("exactly_once=%v: nothing restored from the changelog", exactlyOnce)
		}
		task.Push(3, "al,1,3")
		task.Advance(3_000)
		if got := counts(task.Take()); got["al"] != "3" {
			t.Fatalf("exactly_once=%v: after the move %v, want al=3 (2 restored from the changelog)", exactlyOnce, got)
		}
	}
}

// TestExactlyOnceCommitsWhole: an exactly-once task's outputs appear with
// its commit, and a commit that fails shows nothing of it; the batch, read
// again after the crash, is counted once.
func TestExactlyOnceCommitsWhole(t *testing.T) {
	h := counting(t, func(c *optest.Config) { c.ExactlyOnce = true })
	task := h.Task(0)
	task.Push(0, "al,1,1", "bo,1,1")
	task.SetWatermark(1_000)
	if got := task.Take(); len(got) != 0 {
		t.Fatalf("visible before the commit: %v", got)
	}
	task.Commit()
	if got := counts(task.Take()); got["al"] != "1" || got["bo"] != "1" {
		t.Fatalf("first commit: %v", got)
	}
	if c := h.Kafka().Committed(h.Group(), "in", 0); c.Offset != 2 || !strings.HasPrefix(c.Metadata, "turbine1 wm=1000") {
		t.Fatalf("the group's offset %+v, want 2 with the commit's progress", c)
	}
	task.Push(2, "bo,1,2")
	task.SetWatermark(2_000)
	h.Kafka().FailCommit(errors.New("coordinator moved"))
	var aborted *dataflow.TxnAborted
	if err := task.TryCommit(); !errors.As(err, &aborted) {
		t.Fatalf("failed commit: %v, want a TxnAborted", err)
	}
	if got := task.Take(); len(got) != 0 {
		t.Fatalf("an aborted transaction's records are visible: %v", got)
	}
	h.Crash()
	task.Poll()
	task.Advance(2_000)
	if got := counts(task.Take()); len(got) != 1 || got["bo"] != "2" {
		t.Fatalf("after the crash: %v, want bo=2 once", got)
	}
}

// TestAZombieIsFenced: a second process opening the same partition fences
// the first, whose next commit fails as migrated and shows nothing.
func TestAZombieIsFenced(t *testing.T) {
	k := optest.NewKafka()
	shared := func(c *optest.Config) { c.Kafka, c.ExactlyOnce = k, true }
	zombie := counting(t, shared).Task(0)
	zombie.Push(0, "al,1,1")
	counting(t, shared).Task(0)
	var migrated *dataflow.TaskMigrated
	if err := zombie.TryCommit(); !errors.As(err, &migrated) || !errors.Is(err, kafkaio.ErrFenced) {
		t.Fatalf("the zombie's commit: %v, want TaskMigrated (fenced)", err)
	}
	if got := k.ReadAll("counts"); len(got) != 0 {
		t.Fatalf("the zombie's output is visible: %v", got)
	}
}

// TestEventTimeWatermark: without a script, the watermark is the event
// time read minus the delay; an idle partition says so; a FLUSH marks
// its commit.
func TestEventTimeWatermark(t *testing.T) {
	h := optest.New(t, optest.Config{Input: userFormat, Delay: 1_000, Partitions: 2,
		Ops: func(int32) []dataflow.Op {
			return []dataflow.Op{&timed{}}
		}})
	task := h.Task(0)
	task.Push(0, "al,1,5", "al,1,3")
	task.Commit()
	if w := task.Watermark(); !w.Has || w.WM != 4_000 || w.Idle {
		t.Fatalf("watermark %+v, want 4 s, not idle", w)
	}
	task.Idle()
	if w := task.Watermark(); !w.Idle || w.WM != 4_000 {
		t.Fatalf("after the idle timeout: %+v, want idle at 4 s (no peer to follow)", w)
	}
	task.Push(2, "al,1,9")
	h.Flush()
	if w := task.Watermark(); !w.Flush || !w.Idle || w.WM != 8_000 || task.Next() != 3 {
		t.Fatalf("after a FLUSH: %+v at offset %d", w, task.Next())
	}
}

// timed is an operator that gives its batches the records' event time
// (their ts), so that the task's own watermark moves as a source's does.
type timed struct{ counter }

func (t *timed) Process(_ context.Context, b *dataflow.Batch) (*dataflow.Batch, error) {
	out := &dataflow.Batch{Partition: b.Partition}
	for _, r := range b.Recs {
		var row struct{ TS time.Time }
		if err := json.Unmarshal(r.Value, &row); err != nil {
			return nil, err
		}
		if ms := row.TS.UnixMilli(); !out.HasTime || ms > out.MaxTime {
			out.MaxTime, out.HasTime = ms, true
		}
	}
	return out, nil
}

// TestPartialsDecode: Output.Partials reads a combine's partials, with
// their cover header or without it, leaves the markers out, and refuses a
// cover header the pre-aggregation did not write.
func TestPartialsDecode(t *testing.T) {
	cover := kafkaio.Header{Key: dataflow.CoverHeader, Value: dataflow.EncodeCover(dataflow.PartialCover{Last: 7, Rows: 2})}
	marker := shuffle.Marker{Source: 3, MaxTime: 10_000, HasTime: true}
	o := optest.Output{
		{Topic: "cmb", Key: []byte("u1"), Value: dataflow.EncodePartial(3, 10_000, []byte{1}), Headers: []kafkaio.Header{cover}},
		{Topic: "cmb", Headers: []kafkaio.Header{{Key: shuffle.MarkerHeader, Value: marker.Encode(nil)}}},
		{Topic: "cmb", Key: []byte("u2"), Value: dataflow.EncodePartial(1, 0, []byte{2})},
	}
	ps, err := o.Partials()
	if err != nil || len(ps) != 2 {
		t.Fatalf("partials %+v, %v; want 2", ps, err)
	}
	if p := ps[0]; p.Source != 3 || !p.Named || p.Window != 10_000 || !p.HasCover || p.Cover != (dataflow.PartialCover{Last: 7, Rows: 2}) || string(p.Record.Key) != "u1" {
		t.Fatalf("first partial %+v", p)
	}
	if p := ps[1]; p.Source != 1 || p.Window != 0 || p.HasCover {
		t.Fatalf("second partial %+v, want no cover", p)
	}
	o[0].Headers[0].Value = cover.Value[:1]
	if _, err := o.Partials(); err == nil || !strings.Contains(err.Error(), "cmb/0") {
		t.Fatalf("a truncated cover header: %v, want an error naming the record", err)
	}
}
