package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sizing"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// SHOW SIZING and SHOW SKEW: options, sampling and result rows. The
// arithmetic and the skew check are package sizing's; records are sampled
// with readTail, the tail of each partition as it is now.

// sampleTimeout bounds one sampling read.
const sampleTimeout = 30 * time.Second

// maxSample bounds the sample option: the sampled records are held in
// memory while they are read.
const maxSample = 10_000_000

var sizingCols = []pgwire.Column{
	{Name: "peak_mb_s", OID: pgwire.OIDFloat8},
	{Name: "throughput_partitions", OID: pgwire.OIDInt8},
	{Name: "parallelism_partitions", OID: pgwire.OIDInt8},
	{Name: "headroom", OID: pgwire.OIDFloat8},
	{Name: "recommended", OID: pgwire.OIDInt8},
	{Name: "recommended_valid", OID: pgwire.OIDInt8},
	{Name: "driver", OID: pgwire.OIDText},
}

var skewCols = []pgwire.Column{
	{Name: "partition", OID: pgwire.OIDInt8},
	{Name: "records", OID: pgwire.OIDInt8},
	{Name: "ratio_to_mean", OID: pgwire.OIDFloat8},
	{Name: "hot", OID: pgwire.OIDBool},
}

// The options of SHOW SIZING; FOR a source adds granularity and sample.
var sizingOptions = []string{"peak_events_per_sec", "avg_record_kb", "per_partition_mb_s", "target_consumers", "headroom"}

// sizingInput is one calculator input and where its value came from.
type sizingInput struct {
	name, origin string // origin: given, default or measured
	value        float64
}

func (s *Server) showSizing(ctx context.Context, st *sql.ShowSizing, text string) (*pgwire.Result, error) {
	allowed := sizingOptions
	if st.Source != "" {
		allowed = append(append([]string{}, sizingOptions...), "granularity", "sample")
	}
	if err := st.Options.Check("SHOW SIZING", allowed...); err != nil {
		return nil, err
	}
	in, inputs, err := sizingInputs(st.Options)
	if err != nil {
		return nil, err
	}
	res := &pgwire.Result{Columns: sizingCols, Tag: "SHOW"}
	if st.Source != "" {
		note, err := s.measureSizing(ctx, st, text, &in, inputs)
		if err != nil {
			return nil, err
		}
		res.Notices = append(res.Notices, note)
	}
	for _, name := range []string{"peak_events_per_sec", "avg_record_kb", "target_consumers"} {
		if inputs[name].origin == "" {
			hint := "SHOW SIZING WITH (peak_events_per_sec = 4200, avg_record_kb = 18, target_consumers = 12[, headroom = 1.5, per_partition_mb_s = 10])"
			if name != "target_consumers" && st.Source == "" {
				hint += ", or SHOW SIZING FOR source WITH (target_consumers = ...) to measure the rate and size from its topic"
			}
			return nil, sql.Errorf(sql.CodeInvalidParameter, "SHOW SIZING needs %s", name).WithHint("%s", hint)
		}
	}
	plan, err := sizing.Size(in)
	if err != nil {
		return nil, sizingError(err, st.Options)
	}
	for _, n := range plan.Notices {
		res.Notices = append(res.Notices, pgwire.Notice{Message: n})
	}
	res.Rows = [][]any{{plan.PeakMBs, plan.ThroughputPartitions, plan.ParallelismPartitions, plan.Headroom,
		plan.Recommended, plan.RecommendedValid, plan.Driver}}
	return res, nil
}

// sizingInputs reads the calculator's options; inputs says where each
// value came from (no origin: neither given nor defaulted).
func sizingInputs(opts sql.Options) (sizing.Inputs, map[string]*sizingInput, error) {
	inputs := map[string]*sizingInput{}
	for _, n := range sizingOptions {
		inputs[n] = &sizingInput{name: n}
	}
	read := func(name string, def float64) (float64, error) {
		in := inputs[name]
		if _, ok := opts[name]; ok {
			in.origin = "given"
		} else if !math.IsNaN(def) {
			in.origin = "default"
		}
		v, err := opts.Float(name, def)
		in.value = v
		return v, err
	}
	var in sizing.Inputs
	var err error
	if in.PeakEventsPerSec, err = read("peak_events_per_sec", math.NaN()); err != nil {
		return in, nil, err
	}
	if in.AvgRecordKB, err = read("avg_record_kb", math.NaN()); err != nil {
		return in, nil, err
	}
	if in.PerPartitionMBs, err = read("per_partition_mb_s", sizing.DefaultPerPartitionMBs); err != nil {
		return in, nil, err
	}
	if in.Headroom, err = read("headroom", sizing.DefaultHeadroom); err != nil {
		return in, nil, err
	}
	n, err := opts.Int("target_consumers", 0)
	if err != nil {
		return in, nil, err
	}
	in.TargetConsumers = int64(n)
	if _, ok := opts["target_consumers"]; ok {
		inputs["target_consumers"].origin = "given"
		inputs["target_consumers"].value = float64(n)
	}
	return in, inputs, nil
}

// sizingError gives a refused input its SQLSTATE (22023) and points at
// the option that holds it.
func sizingError(err error, opts sql.Options) error {
	var ie *sizing.InputError
	if !errors.As(err, &ie) {
		return err
	}
	e := sql.Errorf(sql.CodeInvalidParameter, "%w", err)
	if o, ok := opts[ie.Field]; ok {
		e = e.WithPos(o.Pos)
	}
	return e
}

// sampleOptions reads the sample size of SHOW SIZING FOR and SHOW SKEW.
func sampleOption(opts sql.Options) (int, error) {
	n, err := opts.Int("sample", sizing.DefaultSample)
	if err != nil {
		return 0, err
	}
	if n < 1 || n > maxSample {
		return 0, sql.Errorf(sql.CodeInvalidParameter, "sample must be between 1 and %d records, got %d", maxSample, n).WithPos(opts["sample"].Pos)
	}
	return n, nil
}

// sampled is one chunk of sampled records, decoded: b's row i is
// recs[decoded[i]].
type sampled struct {
	recs    []*kafkaio.Record
	b       *exec.Batch
	decoded []int
}

// sampleTail reads up to sample records of topic, the last ones of each
// partition in equal shares, and hands them to fn in partition then offset
// order, none before from[p] on partition p (a stream's output start).
// start (if not nil) learns the topic's partition count before the first
// record; sampleTail returns it.
func sampleTail(ctx context.Context, k *kafkaio.Client, topic string, from map[int32]int64, sample int, start func(partitions int) error, fn func(*kafkaio.Record) error) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	partitions, err := k.Partitions(ctx, topic)
	if err != nil {
		return 0, err
	}
	if partitions == 0 {
		return 0, sql.Errorf(sql.CodeUndefinedTable, "topic %q does not exist", topic)
	}
	if start != nil {
		if err := start(partitions); err != nil {
			return 0, err
		}
	}
	perPartition := int64((sample + partitions - 1) / partitions)
	read := 0
	err = k.ReadTail(ctx, topic, from, perPartition, func(r *kafkaio.Record) error {
		if read >= sample { // the equal shares may add up to a few more
			return nil
		}
		read++
		return fn(r)
	})
	if err != nil {
		return 0, fmt.Errorf("sample topic %s: %w", topic, err)
	}
	return partitions, nil
}

// SampleTopic reads up to sample records of topic on the Kafka cluster at
// brokers, the last ones of each partition in equal shares, for the
// offline tools (turbinesql skew): fn gets each record's key and value. It
// returns the topic's partition count.
func SampleTopic(ctx context.Context, brokers []string, topic string, sample int, fn func(key, value []byte) error) (int, error) {
	k, err := kafkaio.New(&kafkaio.Conn{Brokers: brokers})
	if err != nil {
		return 0, err
	}
	defer k.Close()
	if err := k.Ping(ctx); err != nil {
		return 0, err
	}
	return sampleTail(ctx, k, topic, nil, sample, nil, func(r *kafkaio.Record) error { return fn(r.Key, r.Value) })
}

// sampleRelation is sampleTail over rel's topic with the records decoded,
// a chunk at a time. It also returns how many records it could not decode.
func (s *Server) sampleRelation(ctx context.Context, rel *catalog.Relation, sample int, start func(partitions int) error, fn func(sampled) error) (partitions int, undecodable int64, err error) {
	dec := dataflow.NewDecoder(rel)
	var chunk []*kafkaio.Record
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		values := make([][]byte, len(chunk))
		for i, r := range chunk {
			values[i] = r.Value
		}
		rec, decoded, derrs := dec.Decode(values)
		defer rec.Release()
		undecodable += int64(len(derrs))
		b := exec.BatchOf(rec, rel.Schema)
		dataflow.FillKafkaTime(rel, b, chunk, decoded)
		err := fn(sampled{recs: chunk, b: b, decoded: decoded})
		chunk = chunk[:0]
		return err
	}
	partitions, err = sampleTail(ctx, s.kafka, rel.Topic, rel.From, sample, start, func(r *kafkaio.Record) error {
		chunk = append(chunk, r)
		if len(chunk) >= decodeChunk {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", rel.Name, err)
	}
	return partitions, undecodable, nil
}

// measureSizing fills the inputs of SHOW SIZING FOR that were not given
// from a sample of the relation's topic: the peak rate (the busiest bucket
// of granularity, in the relation's event time when it has one, else in
// the records' timestamps) and the mean record size (key and value bytes).
// The notice it returns lists every input with its origin.
func (s *Server) measureSizing(ctx context.Context, st *sql.ShowSizing, text string, in *sizing.Inputs, inputs map[string]*sizingInput) (pgwire.Notice, error) {
	rel, ok := s.cat.Relation(st.Source)
	if !ok {
		return pgwire.Notice{}, &catalog.ErrNotFound{Name: st.Source}
	}
	granMs, err := st.Options.Millis("granularity", 1000)
	if err != nil {
		return pgwire.Notice{}, err
	}
	if granMs <= 0 {
		return pgwire.Notice{}, sql.Errorf(sql.CodeInvalidParameter, "granularity must be a positive interval, got %d ms", granMs).WithPos(st.Options["granularity"].Pos)
	}
	sample, err := sampleOption(st.Options)
	if err != nil {
		return pgwire.Notice{}, err
	}
	if inputs["peak_events_per_sec"].origin != "" && inputs["avg_record_kb"].origin != "" {
		return pgwire.Notice{Message: inputsLine(rel.Name, inputs), Detail: "nothing to measure: the rate and the record size are given"}, nil
	}
	timeIdx, clock := -1, "record timestamps"
	if rel.Watermark != nil {
		timeIdx, clock = rel.Schema.Index(rel.Watermark.Column), "event time ("+rel.Watermark.Column+")"
	}
	buckets := map[int64]int64{}
	var records, bytes int64
	var minT, maxT int64
	add := func(t int64) {
		if len(buckets) == 0 || t < minT {
			minT = t
		}
		if len(buckets) == 0 || t > maxT {
			maxT = t
		}
		buckets[floorDiv(t, granMs)]++
	}
	partitions, _, err := s.sampleRelation(ctx, rel, sample, nil, func(c sampled) error {
		for _, r := range c.recs {
			records++
			bytes += int64(len(r.Key) + len(r.Value))
			if timeIdx < 0 {
				add(r.Timestamp.UnixMilli())
			}
		}
		if timeIdx >= 0 {
			ts := c.b.Cols[timeIdx]
			for i := 0; i < c.b.N; i++ {
				if !ts.IsNull(i) {
					add(ts.I[i])
				}
			}
		}
		return nil
	})
	if err != nil {
		return pgwire.Notice{}, err
	}
	var how []string
	if inputs["peak_events_per_sec"].origin == "" {
		if len(buckets) == 0 {
			return pgwire.Notice{}, sql.Errorf(sql.CodeInvalidParameter, "cannot measure peak_events_per_sec: topic %q of %s has no records with a time to sample", rel.Topic, rel.Name).
				WithHint("give it: SHOW SIZING FOR %s WITH (peak_events_per_sec = ..., target_consumers = ...)", rel.Name)
		}
		var peak, at int64
		for b, n := range buckets {
			if n > peak || (n == peak && b < at) {
				peak, at = n, b
			}
		}
		in.PeakEventsPerSec = float64(peak) * 1000 / float64(granMs)
		inputs["peak_events_per_sec"].origin, inputs["peak_events_per_sec"].value = "measured", in.PeakEventsPerSec
		how = append(how, fmt.Sprintf("peak_events_per_sec: the busiest %s bucket of %s, %d records from %s, among %d buckets from %s to %s",
			fmtMillis(granMs), clock, peak, types.MillisTime(at*granMs).Format("2006-01-02 15:04:05.000"), len(buckets),
			types.MillisTime(minT).Format("2006-01-02 15:04:05.000"), types.MillisTime(maxT).Format("2006-01-02 15:04:05.000")))
	}
	if inputs["avg_record_kb"].origin == "" {
		if records == 0 {
			return pgwire.Notice{}, sql.Errorf(sql.CodeInvalidParameter, "cannot measure avg_record_kb: topic %q of %s has no records", rel.Topic, rel.Name).
				WithHint("give it: SHOW SIZING FOR %s WITH (avg_record_kb = ..., target_consumers = ...)", rel.Name)
		}
		in.AvgRecordKB = float64(bytes) / float64(records) / 1024
		inputs["avg_record_kb"].origin, inputs["avg_record_kb"].value = "measured", in.AvgRecordKB
		how = append(how, fmt.Sprintf("avg_record_kb: the mean key and value bytes of the sampled records / 1024 (%d bytes in %d records)", bytes, records))
	}
	detail := fmt.Sprintf("sampled %d records of topic %q, the last of each of its %d partitions", records, rel.Topic, partitions)
	if len(how) > 0 {
		detail += "; " + strings.Join(how, "; ")
	}
	return pgwire.Notice{Message: inputsLine(rel.Name, inputs), Detail: detail}, nil
}

// inputsLine lists the calculator's inputs with where each came from.
func inputsLine(name string, inputs map[string]*sizingInput) string {
	var parts []string
	for _, n := range sizingOptions {
		i := inputs[n]
		if i.origin == "" {
			continue // target_consumers missing: refused by the caller
		}
		parts = append(parts, fmt.Sprintf("%s = %s (%s)", n, fmtNum(i.value), i.origin))
	}
	return "sizing inputs for " + name + ": " + strings.Join(parts, ", ")
}

func (s *Server) showSkew(ctx context.Context, st *sql.ShowSkew, text string) (*pgwire.Result, error) {
	if err := st.Options.Check("SHOW SKEW", "partitions", "tolerance", "sample"); err != nil {
		return nil, err
	}
	rel, ok := s.cat.Relation(st.Source)
	if !ok {
		return nil, &catalog.ErrNotFound{Name: st.Source}
	}
	partitions, err := st.Options.Count("partitions")
	if err != nil {
		return nil, err
	}
	tolerance, err := st.Options.Float("tolerance", sizing.DefaultTolerance)
	if err != nil {
		return nil, err
	}
	if tolerance < 0 {
		return nil, sql.Errorf(sql.CodeInvalidParameter, "tolerance must be at least 0, got %s", fmtNum(tolerance)).WithPos(st.Options["tolerance"].Pos)
	}
	sample, err := sampleOption(st.Options)
	if err != nil {
		return nil, err
	}
	// The key: BY's expression, or the partition key.
	var keyOf func(b *exec.Batch) (*exec.Vec, error)
	what := ""
	if st.By != nil {
		p, err := planner.BuildQuery(s.cat, st.By, text)
		if err != nil {
			return nil, err
		}
		if p.Aggregate || p.Window != nil {
			return nil, sql.Errorf(sql.CodeNotSupported, "BY takes a per-record expression, not an aggregate").WithPos(sql.FindPos(text, "BY"))
		}
		e := p.Project[0]
		keyOf = func(b *exec.Batch) (*exec.Vec, error) { return e.Eval(b) }
		what = st.ByText + " of " + rel.Name
	} else {
		if rel.PartitionKey == "" {
			return nil, sql.Errorf(sql.CodeInvalidParameter, "%s has no partition key to check", rel.Name).
				WithHint("name the key: SHOW SKEW FOR %s BY column (or an expression such as a || ':' || b)", rel.Name)
		}
		idx := rel.Schema.Index(rel.PartitionKey)
		keyOf = func(b *exec.Batch) (*exec.Vec, error) { return b.Cols[idx], nil }
		what = rel.PartitionKey + " of " + rel.Name
	}

	// Composite candidates, checked on the same sample for the suggestion
	// when the partition key turns out hot: the key with each other text
	// or integer column, as key || ':' || column would be.
	var cands []*composite
	if st.By == nil {
		for i, f := range rel.Schema {
			if strings.EqualFold(f.Name, rel.PartitionKey) || (f.Type != types.Text && f.Type != types.Int) ||
				(rel.Watermark != nil && strings.EqualFold(f.Name, rel.Watermark.Column)) {
				continue
			}
			cands = append(cands, &composite{col: f.Name, idx: i})
		}
	}
	var stats *sourceStats
	seedStats := false
	if rel.Source != nil {
		stats = s.statsFor(rel.Source)
		seedStats = stats.empty()
	}

	var skew *sizing.Skew
	start := func(topicPartitions int) error {
		n := topicPartitions
		if partitions > 0 {
			n = partitions
		}
		var err error
		if skew, err = sizing.NewSkew(n); err != nil {
			return sizingError(err, st.Options)
		}
		for _, cd := range cands {
			cd.skew, _ = sizing.NewSkew(n)
		}
		return nil
	}
	keyScratch := make([]byte, 0, 64) // non-nil: an empty key is not NULL
	partCount, undecodable, err := s.sampleRelation(ctx, rel, sample, start, func(c sampled) error {
		if seedStats {
			stats.observe(c.b)
		}
		keys, err := keyOf(c.b)
		if err != nil {
			return err
		}
		for i := 0; i < c.b.N; i++ {
			k := exec.PartitionKeyText(keys, i, keyScratch[:0])
			skew.Add(k)
			for _, cd := range cands {
				cd.add(k, c.b.Cols[cd.idx], i)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	report, err := skew.Report(tolerance)
	if errors.Is(err, sizing.ErrNoKeys) {
		return nil, sql.Errorf("55000", "no record of %s with a non-NULL key to check among the last %d records of topic %q (%d partitions, %d undecodable)",
			rel.Name, sample, rel.Topic, partCount, undecodable).WithHint("write some records first (INSERT INTO %s ...)", rel.Name)
	}
	if err != nil {
		return nil, sizingError(err, st.Options)
	}
	res := &pgwire.Result{Columns: skewCols, Tag: "SHOW"}
	for _, p := range report.Partitions {
		res.Rows = append(res.Rows, []any{int64(p.Partition), p.Records, p.RatioToMean, p.Hot})
	}
	msg, detail, hint := report.Summary(what)
	if undecodable > 0 {
		detail += fmt.Sprintf("; %d undecodable records not counted", undecodable)
	}
	res.Notices = append(res.Notices, pgwire.Notice{Message: msg, Detail: detail, Hint: hint})
	if st.By == nil && !report.Balanced {
		res.Notices = append(res.Notices, suggestComposite(rel, report, cands, stats, tolerance))
	}
	return res, nil
}

// composite is a candidate composite key: the partition key || ':' || col.
type composite struct {
	col     string
	idx     int
	skew    *sizing.Skew
	scratch []byte
}

// add counts row i under key || ':' || col; NULL when either is NULL,
// as || gives.
func (c *composite) add(key []byte, col *exec.Vec, i int) {
	if key == nil || col.IsNull(i) {
		c.skew.Add(nil)
		return
	}
	c.scratch = append(append(append(c.scratch[:0], key...), ':'), exec.PartitionKeyText(col, i, nil)...)
	c.skew.Add(c.scratch)
}

// suggestComposite names, for a hot partition key, the composite with the
// column of highest cardinality in the source's statistics (in the sample
// for a stream), and what it would do on the same sample.
func suggestComposite(rel *catalog.Relation, hot *sizing.Report, cands []*composite, stats *sourceStats, tolerance float64) pgwire.Notice {
	key := rel.PartitionKey
	card := func(c *composite) int64 {
		if stats != nil {
			if d := stats.distinct(c.col); d >= 0 {
				return d
			}
		}
		r, err := c.skew.Report(tolerance)
		if err != nil {
			return 0
		}
		return int64(r.DistinctKeys)
	}
	sort.SliceStable(cands, func(i, j int) bool { return card(cands[i]) > card(cands[j]) })
	var best *composite
	for _, c := range cands {
		if card(c) > 1 {
			best = c
			break
		}
	}
	msg := fmt.Sprintf("the partition key %s of %s is hot", key, rel.Name)
	if best == nil {
		return pgwire.Notice{Message: msg + ": no other text or integer column to compose it with",
			Hint: "salt the busiest keys with a bounded suffix (key || ':' || n for n in 0..k-1) and check it with SHOW SKEW ... BY"}
	}
	expr := fmt.Sprintf("%s || ':' || %s", key, best.col)
	r, err := best.skew.Report(tolerance)
	if err != nil {
		return pgwire.Notice{Message: fmt.Sprintf("%s; %s (≈%d distinct) has no value where %s has one in the sample", msg, best.col, card(best), key)}
	}
	source := "the source's statistics"
	if stats == nil {
		source = "the sample"
	}
	return pgwire.Notice{
		Message: fmt.Sprintf("%s: a composite key %s would give peak_to_mean_ratio %s, balanced %t, on the same sample", msg, expr, fmtNum(r.PeakToMean), r.Balanced),
		Detail:  fmt.Sprintf("%s has the most distinct values of the other columns in %s (≈%d); %s has %d in the sample", best.col, source, card(best), key, hot.DistinctKeys),
		Hint:    fmt.Sprintf("check it with SHOW SKEW FOR %s BY %s; records of one %s then keep their order per (%s, %s), not per %s", rel.Name, expr, key, key, best.col, key),
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func fmtMillis(ms int64) string {
	if ms%1000 == 0 {
		return fmt.Sprintf("%d s", ms/1000)
	}
	return fmt.Sprintf("%d ms", ms)
}

func fmtNum(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return fmt.Sprintf("%d", int64(f))
	}
	return fmt.Sprintf("%.4g", f)
}
