package dataflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/dataflow/optest"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/types"
)

// paneIdentity is a pane record's identity as a downstream consumer reads
// it, "turbine.key start end key=<record key> n=<COUNT(*)>": the group key
// header ("-" when absent, NULL when its value is null), the window
// headers, the record key (NULL: unkeyed) and the pane's count. It checks
// what every pane must have: the stream header, and a keyed record on the
// partition murmur2 gives its key.
func paneIdentity(t *testing.T, rec *kafkaio.Record, parts int) string {
	t.Helper()
	h := map[string][]byte{}
	for _, x := range rec.Headers {
		if _, dup := h[x.Key]; dup {
			t.Fatalf("header %s twice: %v", x.Key, rec.Headers)
		}
		h[x.Key] = x.Value
	}
	if string(h[HeaderStream]) != "s" {
		t.Fatalf("%s header %q, want the stream's name s (headers %v)", HeaderStream, h[HeaderStream], rec.Headers)
	}
	text := func(b []byte, present bool) string {
		switch {
		case !present:
			return "-"
		case b == nil:
			return "NULL"
		}
		return string(b)
	}
	gk, hasGK := h[HeaderKey]
	start, hasStart := h[HeaderWindowStart]
	end, hasEnd := h[HeaderWindowEnd]
	if !hasStart || !hasEnd {
		t.Fatalf("a pane without its window headers: %v", rec.Headers)
	}
	if rec.Key != nil && rec.Partition != state.PartitionFor(rec.Key, parts) {
		t.Fatalf("key %q on partition %d of %d; murmur2 puts it on %d", rec.Key, rec.Partition, parts, state.PartitionFor(rec.Key, parts))
	}
	var v map[string]any
	if err := json.Unmarshal(rec.Value, &v); err != nil {
		t.Fatalf("%s: %v", rec.Value, err)
	}
	return fmt.Sprintf("%s %s %s key=%s n=%v", text(gk, hasGK), start, end, text(rec.Key, true), v["n"])
}

// TestPaneIdentity: every pane record names its stream, its window (start
// and end, epoch ms) and its group key in headers, whatever the select list
// outputs, and is keyed by its group key (a keyless window's by its window
// start; message_key overrides), for each window kind. HAVING dropping
// some panes leaves each kept pane with its own identity.
func TestPaneIdentity(t *testing.T) {
	for _, tc := range []struct {
		name, sql  string
		messageKey string
		recs       []*kafkaio.Record
		wm         int64
		want       []string
	}{{
		name: "TUMBLE without the window in the select list, HAVING",
		sql: `CREATE STREAM s AS SELECT k, COUNT(*) AS n FROM ev
			GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND) HAVING COUNT(*) > 1`,
		recs: ev(0, 0, "a,x,1,1", "b,x,1,3", "a,x,1,2", "c,x,1,4", "c,x,1,5", "a,x,1,12", "a,x,1,13", "b,x,1,14"),
		wm:   20_000,
		want: []string{"a 0 10000 key=a n=2", "c 0 10000 key=c n=2", "a 10000 20000 key=a n=2"},
	}, {
		name: "HOP: each window instance",
		sql: `CREATE STREAM s AS SELECT k, HOP_END(ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) AS we, COUNT(*) AS n FROM ev
			GROUP BY k, HOP(ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND)`,
		recs: ev(0, 0, "a,x,1,1", "a,x,1,7"),
		wm:   30_000,
		want: []string{"a -5000 5000 key=a n=1", "a 0 10000 key=a n=2", "a 5000 15000 key=a n=1"},
	}, {
		name: "SESSION: the session's bounds",
		sql:  `CREATE STREAM s AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k, SESSION(ts, INTERVAL '5' SECOND)`,
		recs: ev(0, 0, "a,x,1,1", "b,x,1,2", "a,x,1,3", "a,x,1,20"),
		wm:   40_000,
		want: []string{"a 1000 8000 key=a n=2", "b 2000 7000 key=b n=1", "a 20000 25000 key=a n=1"},
	}, {
		name: "keyless: keyed by the window start, no group key header",
		sql:  `CREATE STREAM s AS SELECT COUNT(*) AS n FROM ev GROUP BY TUMBLE(ts, INTERVAL '10' SECOND)`,
		recs: ev(0, 0, "a,x,1,1", "b,x,1,2", "c,x,1,15"),
		wm:   20_000,
		want: []string{"- 0 10000 key=0 n=2", "- 10000 20000 key=10000 n=1"},
	}, {
		name: "several keys: a JSON array",
		sql: `CREATE STREAM s AS SELECT k, v, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n FROM ev
			GROUP BY k, v, TUMBLE(ts, INTERVAL '10' SECOND)`,
		recs: ev(0, 0, "a,x,1,1", "a,x,1,2", "a,x,2,3", "b,x,1,3", "NULL,x,1,5"),
		wm:   10_000,
		want: []string{`["a",1] 0 10000 key=["a",1] n=2`, `["a",2] 0 10000 key=["a",2] n=1`, `["b",1] 0 10000 key=["b",1] n=1`,
			`[null,1] 0 10000 key=[null,1] n=1`},
	}, {
		name: "a NULL group key: unkeyed, the header's value null",
		sql:  `CREATE STREAM s AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`,
		recs: ev(0, 0, "a,x,1,1", ",x,1,2", "NULL,x,1,3", "NULL,x,1,4"),
		wm:   10_000,
		want: []string{"a 0 10000 key=a n=1", " 0 10000 key= n=1", "NULL 0 10000 key=NULL n=2"},
	}, {
		name: "message_key: the record key is the column, the header the group key",
		sql: `CREATE STREAM s AS SELECT k, u, COUNT(*) AS n FROM ev
			GROUP BY k, u, TUMBLE(ts, INTERVAL '10' SECOND)`,
		messageKey: "u",
		recs:       ev(0, 0, "a,x,1,1", "b,x,1,2", "b,y,1,3"),
		wm:         10_000,
		want:       []string{`["a","x"] 0 10000 key=x n=1`, `["b","x"] 0 10000 key=x n=1`, `["b","y"] 0 10000 key=y n=1`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p := planOf(t, tc.sql, "auto")
			task := evHarness(t, 1, chain(func() []Op {
				ops := aggChain(p, "", 0)
				ops[len(ops)-1].(*Sink).MessageKey = tc.messageKey
				return ops
			})).Task(0)
			task.PushRecords(tc.recs...)
			task.Advance(tc.wm)
			var got []string
			for _, rec := range task.Take() {
				got = append(got, paneIdentity(t, rec, 4))
			}
			slices.Sort(got)
			slices.Sort(tc.want)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("panes:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// TestPaneIdentityEarlyFires: EMIT EVERY's early fires carry the identity
// of the window's final pane (a later pane of a window replaces an earlier
// one downstream); is_final in the value tells them apart.
func TestPaneIdentityEarlyFires(t *testing.T) {
	p := planOf(t, tumbleSQL, "auto")
	h := evHarness(t, 1, chain(func() []Op { return aggChain(p, "", time.Second) }))
	task := h.Task(0)
	task.Push(0, "a,x,1,1", "b,x,1,2")
	h.Elapse(time.Second)
	task.Advance(0)
	early := task.Take()
	task.Push(2, "a,x,1,3")
	task.Advance(10_000)
	final := task.Take()
	ids := func(recs optest.Output, isFinal bool) []string {
		var out []string
		for i, rec := range recs {
			if f := values(t, recs)[i]["is_final"]; f != isFinal {
				t.Fatalf("is_final %v, want %v", f, isFinal)
			}
			id := paneIdentity(t, rec, 4)
			out = append(out, id[:strings.Index(id, " n=")])
		}
		slices.Sort(out)
		return out
	}
	want := []string{"a 0 10000 key=a", "b 0 10000 key=b"}
	if e, f := ids(early, false), ids(final, true); !slices.Equal(e, want) || !slices.Equal(f, want) {
		t.Fatalf("early fires %v, final panes %v: want both %v", e, f, want)
	}
}

// TestSinkRowsAreNotPanes: a stateless stream's and an upsert stream's
// records carry no pane headers.
func TestSinkRowsAreNotPanes(t *testing.T) {
	for _, q := range []string{
		`CREATE STREAM s AS SELECT k, v FROM ev`,
		`CREATE STREAM s AS SELECT k, SUM(v) AS total FROM ev GROUP BY k`,
	} {
		p := planOf(t, q, "auto")
		ops := []Op{&Source{Input: p.Input, TimeIdx: -1}, &Project{Filter: p.Filter, Exprs: p.Project},
			&Sink{Topic: "out", Partitions: 2, Schema: p.Output}}
		if p.Aggregate {
			ops = []Op{&Source{Input: p.Input, TimeIdx: -1}, &HashAgg{Plan: p}, &Project{Filter: p.Having, Exprs: p.Project},
				&Sink{Topic: "out", Partitions: 2, Schema: p.Output}}
		}
		task := evHarness(t, 1, chain(func() []Op { return ops })).Task(0)
		task.Push(0, "a,x,1,1")
		task.Advance(0)
		got := task.Take()
		if len(got) != 1 || len(got[0].Headers) != 0 {
			t.Fatalf("%s: %+v: want one record, no headers", q, got)
		}
	}
}

// BenchmarkSinkPanes: what the identity headers add to writing a pane
// (Keys alone: the record keyed, as before the headers).
func BenchmarkSinkPanes(b *testing.B) {
	schema := types.Schema{{Name: "k", Type: types.Text}, {Name: "ws", Type: types.Timestamp}, {Name: "n", Type: types.Int}}
	const n = 1024
	rows, keys, panes := make([][]any, n), make([][]byte, n), make([]Pane, n)
	for i := range rows {
		k := fmt.Sprintf("key-%05d", i)
		rows[i] = []any{k, time.UnixMilli(1767225600000).UTC(), int64(i)}
		keys[i], panes[i] = []byte(k), Pane{Start: 1767225600000, End: 1767225610000}
	}
	for _, withPanes := range []bool{false, true} {
		b.Run(fmt.Sprintf("headers=%v", withPanes), func(b *testing.B) {
			op := &Sink{Topic: "out", Partitions: 4, Schema: schema}
			// The harness opens the sink; the timer covers its Process
			// alone, not the commit that has Kafka acknowledge its records.
			task := optest.New(b, optest.Config{Ops: func(int32) []Op { return []Op{op} }}).Task(0)
			ctx := context.Background()
			batch := &Batch{Rows: rows, Keys: keys}
			if withPanes {
				batch.Panes = panes
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := op.Process(ctx, batch); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				task.Commit()
				task.Take()
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pane")
		})
	}
}
