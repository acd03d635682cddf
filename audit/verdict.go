package audit

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// pane is one output record as the audit reads it.
type pane struct {
	id    paneID
	v     value
	final bool // EMIT EVERY: is_final; true for every other kind
}

// verdict is one stream's audit.
type verdict struct {
	spec                                         streamSpec
	records                                      int // output records read
	audited, lost, wrong, dup, unexpected, early int
	late                                         int64 // SHOW STREAMS late_rows, the largest seen (it survives restarts)
	lateMetric                                   int64 // turbine_late_rows_total, summed over server runs
	redelivered                                  int64 // turbine_combine_late_partials_total, likewise
	lateTopic                                    int64 // records in the late-data topic; -1: the stream has none
	status                                       string
	examples                                     []string
}

func (v verdict) failed() bool {
	if v.spec.guarantee == "exactly_once" && (v.dup > 0 || v.redelivered > 0) {
		return true // exactly-once writes every pane, and ships every partial, once
	}
	return v.lost > 0 || v.wrong > 0 || v.unexpected > 0 || v.late > 0 || v.lateMetric > 0 || v.lateTopic > 0 || v.status != "running"
}

// audit compares what a stream emitted with what it must have. Records of
// one key share an output partition (message_key), read in offset order,
// so the last pane of a (key, window) is the one a compacted topic or an
// upsert table keeps; at-least-once may repeat a pane, but its last value
// must be exact.
func audit(s streamSpec, got []pane, want map[paneID]value) verdict {
	v := verdict{spec: s, records: len(got), audited: len(want), lateTopic: -1}
	seen := map[paneID][]value{}
	for _, p := range got {
		if !p.final {
			v.early++
			continue
		}
		seen[p.id] = append(seen[p.id], p.v)
	}
	note := func(format string, args ...any) {
		if len(v.examples) < 6 {
			v.examples = append(v.examples, fmt.Sprintf(format, args...))
		}
	}
	ids := make([]paneID, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, comparePanes)
	for _, id := range ids {
		w := want[id]
		vals, ok := seen[id]
		switch {
		case !ok:
			v.lost++
			note("lost       %s: want %s", s.describe(id), w)
		case vals[len(vals)-1] != w:
			v.wrong++
			note("wrong      %s: want %s, emitted %s", s.describe(id), w, valuesText(vals))
		}
		// An upsert stream writes a key at every commit that changed it:
		// repeats are its design, not duplicates.
		if ok && len(vals) > 1 && s.kind != upsert {
			v.dup++
		}
	}
	var extra []paneID
	for id := range seen {
		if _, ok := want[id]; !ok {
			extra = append(extra, id)
		}
	}
	slices.SortFunc(extra, comparePanes)
	v.unexpected = len(extra)
	for _, id := range extra {
		note("unexpected %s: emitted %s", s.describe(id), valuesText(seen[id]))
	}
	return v
}

func comparePanes(a, b paneID) int {
	if c := strings.Compare(a.key, b.key); c != 0 {
		return c
	}
	if c := cmp.Compare(a.start, b.start); c != 0 {
		return c
	}
	return cmp.Compare(a.end, b.end)
}

func (x value) String() string { return fmt.Sprintf("(n=%d sum=%d)", x.n, x.total) }

// valuesText lists a pane's emitted values, the last few when there are
// many (an upsert key is written at every commit).
func valuesText(vs []value) string {
	var b strings.Builder
	if len(vs) > 4 {
		fmt.Fprintf(&b, "%d times, the last: ... ", len(vs))
		vs = vs[len(vs)-3:]
	}
	for i, x := range vs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x.String())
	}
	return b.String()
}

func (s streamSpec) describe(id paneID) string {
	if s.kind == upsert {
		return id.key
	}
	f := func(ms int64) string { return time.UnixMilli(ms).UTC().Format("15:04:05.000") }
	return fmt.Sprintf("%s [%s, %s)", id.key, f(id.start), f(id.end))
}

// checkIdentity checks what the record of pane p says of its identity in
// its headers against its value, as a consumer deduping on them reads
// them (README: the turbine.stream, turbine.window.start and .end, and
// turbine.key headers): a pane written twice after a kill must carry the
// same identity, and an upsert stream's records carry none.
func checkIdentity(s streamSpec, p pane, r *kgo.Record) error {
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	if s.kind == upsert {
		if len(h) > 0 {
			return fmt.Errorf("output record %s: an upsert stream's record has headers %v", r.Value, h)
		}
		return nil
	}
	want := map[string]string{
		"turbine.stream":       s.name,
		"turbine.window.start": strconv.FormatInt(p.id.start, 10),
		"turbine.window.end":   strconv.FormatInt(p.id.end, 10),
		"turbine.key":          p.id.key,
	}
	if len(h) != len(want) {
		return fmt.Errorf("output record %s: headers %v, want %v", r.Value, h, want)
	}
	for k, v := range want {
		if h[k] != v {
			return fmt.Errorf("output record %s: header %s is %q, want %q (headers %v)", r.Value, k, h[k], v, h)
		}
	}
	return nil
}

// parsePane decodes one output record of s (JSON; timestamps as RFC 3339
// text).
func parsePane(s streamSpec, b []byte) (pane, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return pane{}, fmt.Errorf("output record %q: %w", b, err)
	}
	p := pane{final: true}
	var err error
	k, ok := m[s.keyCol()].(string)
	if !ok {
		return pane{}, fmt.Errorf("output record %s: no text %s", b, s.keyCol())
	}
	p.id.key = k
	num := func(f string) int64 {
		n, ok := m[f].(json.Number)
		if !ok {
			err = errors.Join(err, fmt.Errorf("output record %s: %s is not a number", b, f))
			return 0
		}
		i, e := n.Int64()
		err = errors.Join(err, e)
		return i
	}
	ts := func(f string) int64 {
		t, e := time.Parse(time.RFC3339Nano, fmt.Sprint(m[f]))
		err = errors.Join(err, e)
		return t.UnixMilli()
	}
	p.v = value{n: num("n"), total: num("total")}
	switch s.kind {
	case tumble, emit:
		p.id.start = ts("ws")
		p.id.end = p.id.start + tumbleMs
	case hop:
		p.id.start = ts("ws")
		p.id.end = p.id.start + hopSize
	case session:
		p.id.start, p.id.end = ts("ws"), ts("we")
	}
	if s.kind == emit {
		f, ok := m["is_final"].(bool)
		if !ok {
			err = errors.Join(err, fmt.Errorf("output record %s: no BOOLEAN is_final", b))
		}
		p.final = f
	}
	return p, err
}

// readTopic reads every record of topic, from its start to its end now,
// in offset order within each partition. A topic that does not exist has
// none.
func readTopic(ctx context.Context, brokers string, topic string) ([]*kgo.Record, error) {
	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		return nil, err
	}
	ends, err := kadm.NewClient(admCl).ListCommittedOffsets(ctx, topic)
	admCl.Close()
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	var missing error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			missing = o.Err
		}
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	if errors.Is(missing, kerr.UnknownTopicOrPartition) {
		return nil, nil
	}
	if missing != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, missing)
	}
	if len(want) == 0 {
		return nil, nil
	}
	parts := map[int32]kgo.Offset{}
	for p := range want {
		parts[p] = kgo.NewOffset().AtStart()
	}
	// read_committed, as a downstream consumer of an exactly-once stream
	// reads: a pane counts once its transaction committed. The end is the
	// last stable offset, and may be a transaction's marker (kept, so the
	// read sees it, and skipped).
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading %s: %w (partitions left: %v)", topic, ctx.Err(), want)
		}
		if err := fs.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
	}
	return out, nil
}

// printTable writes the verdicts as the table `make chaos` prints.
func printTable(w io.Writer, vs []verdict, faults int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stream\tplan\twindow\tfaults\tpanes\tlost\twrong\tduplicated\tredelivered\tunexpected\tlate\tlate metric\tlate topic\trecords\tstatus\t")
	for _, v := range vs {
		lt := "-"
		if v.lateTopic >= 0 {
			lt = fmt.Sprint(v.lateTopic)
		}
		dup := fmt.Sprint(v.dup)
		if v.spec.kind == upsert {
			dup = "-"
		}
		red := "-"
		if v.spec.plan == combine {
			red = fmt.Sprint(v.redelivered)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%s\t\n", v.spec.name, v.spec.plan, v.spec.kind, faults,
			v.audited, v.lost, v.wrong, dup, red, v.unexpected, v.late, v.lateMetric, lt, v.records, v.status)
	}
	tw.Flush()
}
