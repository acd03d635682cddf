package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/types"
	"github.com/turbinesql/turbinesql/window"
)

// watermarkMetaPartition is the pseudo-partition under which a stream's own
// watermark (how far its windows have been closed) is stored with its state.
const watermarkMetaPartition = -1

// streamStats is what SHOW STREAMS reports.
type streamStats struct {
	in, out, late, skipped, dlq int64
	watermark                   int64
	hasWatermark                bool
	idle                        int // partitions not holding the watermark back
}

// runner executes one stream on the partitions of its input topic: decode,
// filter, aggregate into keyed state, close windows the watermark passes,
// produce, persist. At-least-once: output is acknowledged before the state
// and offsets that produced it are committed, in one Pebble batch.
type runner struct {
	srv    *Server
	def    *catalog.Stream
	plan   *planner.Plan
	input  *catalog.Relation
	schema types.Schema
	outN   int // output topic partitions
	delay  int64
	tsIdx  int // input column of event time, -1 if none
	log    *slog.Logger

	dec   *exec.JSONDecoder
	agg   *exec.Aggregator   // nil for a stateless stream
	wms   *window.Watermarks // per-partition positions and event time
	wm    int64              // the watermark windows have been closed up to
	hasWM bool
	// recovering: the first close after a start also closes windows the
	// restored watermark had already passed (due timers recovered).
	recovering bool
	rr         int

	cl      *kgo.Client
	fetchCh chan kgo.Fetches
	flushCh chan *flushReq
	pending []*flushReq
	cancel  context.CancelFunc
	done    chan struct{}

	// readTopic is the topic the runner consumes: its input's, or the
	// internal topic of the repartition hop in front of it (hop), whose
	// partitions' event time comes from the hop's markers (progress).
	readTopic string
	hop       *hop
	combiner  *combiner // the pre-aggregation side of a combine hop
	progress  map[int32]*shuffle.Progress

	uncommitted bool // processed input not yet committed
	lastCommit  time.Time

	mu     sync.Mutex
	status string
	err    error
	stats  streamStats
}

func newRunner(srv *Server, def *catalog.Stream, plan *planner.Plan, nparts, outN int) (*runner, error) {
	r := &runner{
		srv: srv, def: def, plan: plan, input: plan.Input, schema: plan.Input.Schema, outN: outN,
		tsIdx: -1, log: srv.log.With("stream", def.Name),
		fetchCh: make(chan kgo.Fetches), flushCh: make(chan *flushReq), readTopic: plan.Input.Topic,
		done: make(chan struct{}), status: "starting",
	}
	if wm := plan.Input.Watermark; wm != nil {
		r.tsIdx = r.schema.Index(wm.Column)
		r.delay = wm.DelayMs
	}
	if plan.Window != nil && r.tsIdx != plan.Window.TimeIdx {
		// The window's time column is event time even without a WATERMARK clause.
		r.tsIdx = plan.Window.TimeIdx
	}
	r.dec = newDecoder(plan.Input)
	r.wms = srv.newWatermarks(plan.Input.Watermark, plan.Input.Source)
	if plan.Aggregate {
		a, err := buildAggregator(plan, def.Options.AllowedLatenessMs)
		if err != nil {
			return nil, err
		}
		r.agg = a
	}
	for p := 0; p < nparts; p++ {
		r.wms.Add(int32(p), 0, 0, 0, false)
	}
	return r, nil
}

// useCombine makes the runner the merge stage of a combine hop: it reads
// the partials and markers c ships from nSources source partitions.
func (r *runner) useCombine(c *combiner, nSources int) {
	r.combiner = c
	r.readBehind(c.topic, nSources)
}

// mergePartials folds shipped partial accumulators into their (window,
// key) groups. A partial for a window already closed (a redelivery after a
// crash, under at-least-once) is dropped and counted, never merged into a
// second pane.
func (r *runner) mergePartials(recs []*kgo.Record) error {
	size := r.plan.Window.Spec.Size
	for _, rec := range recs {
		if len(rec.Value) < 8 {
			return fmt.Errorf("offset %d: a partial without its window", rec.Offset)
		}
		w := int64(binary.BigEndian.Uint64(rec.Value))
		if r.hasWM && w+size+r.agg.Lateness <= r.wm {
			r.srv.metrics.combineLatePartials.WithLabelValues(r.def.Name).Inc()
			continue
		}
		if err := r.agg.MergePartial(w, rec.Key, rec.Value[8:]); err != nil {
			return fmt.Errorf("offset %d: %w", rec.Offset, err)
		}
	}
	r.addStats(func(s *streamStats) { s.in += int64(len(recs)) })
	return nil
}

// reportCombineLag sets turbine_combine_min_watermark_lag_ms to the lag of
// the slowest source partition the merge stage waits on, labelled with it.
func (r *runner) reportCombineLag() {
	var slowest int32
	var t int64
	found := false
	for _, prog := range r.progress {
		if src, st, ok := prog.Slowest(); ok && (!found || st < t) {
			slowest, t, found = src, st, true
		}
	}
	r.srv.metrics.combineLag.DeletePartialMatch(prometheus.Labels{"stream": r.def.Name})
	if found {
		r.srv.metrics.combineLag.WithLabelValues(r.def.Name, strconv.Itoa(int(slowest))).Set(float64(r.srv.clock().UnixMilli() - t))
	}
}

// useHop makes the runner read a repartition hop's topic, whose event time
// comes from markers of nSources source partitions.
func (r *runner) useHop(h *hop, nSources int) {
	r.hop = h
	r.readBehind(h.topic, nSources)
}

// readBehind makes the runner read a hop's internal topic, whose
// partitions' event time comes from markers of nSources source partitions.
func (r *runner) readBehind(topic string, nSources int) {
	r.readTopic = topic
	r.progress = map[int32]*shuffle.Progress{}
	for p := range r.wms.Parts() {
		r.progress[p] = shuffle.NewProgress(nSources)
	}
}

// restore loads positions and open windows from the state store.
func (r *runner) restore() error {
	metas, err := r.srv.store.Partitions(r.def.Name)
	if err != nil {
		return err
	}
	for p, m := range metas {
		if p == watermarkMetaPartition {
			r.wm, r.hasWM = m.MaxTime, m.HasTime
			r.wms.Restore(m.MaxTime, m.HasTime)
			r.stats.watermark, r.stats.hasWatermark = m.MaxTime, m.HasTime
			continue
		}
		if r.wms.Part(p) == nil { // the topic lost partitions: nothing to read there
			continue
		}
		r.wms.Add(p, m.Offset, m.Offset, m.MaxTime, m.HasTime)
	}
	if r.agg == nil {
		return nil
	}
	r.recovering = r.hasWM
	return r.srv.store.Accs(r.def.Name, func(kg uint16, key []byte, window int64, val []byte) error {
		if err := r.agg.Restore(exec.StateRef{KG: kg, Key: key, Window: window}, val); err != nil {
			return fmt.Errorf("restore state of %s: %w", r.def.Name, err)
		}
		return nil
	})
}

func (r *runner) start() error {
	if err := r.restore(); err != nil {
		return err
	}
	// Know each partition's end before the first fetch: a partition whose
	// end is unknown would count as read to its end, and its rows would not
	// hold the watermark back while another partition's fetch moves it on.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	ends, err := r.srv.kafka.endOffsets(ctx, r.readTopic)
	cancel()
	if err != nil {
		return fmt.Errorf("start %s: %w", r.def.Name, err)
	}
	assign := map[int32]kgo.Offset{}
	for p, ps := range r.wms.Parts() {
		r.wms.SawEnd(p, ends[p])
		assign[p] = kgo.NewOffset().At(ps.Next)
	}
	cl, err := kgo.NewClient(r.srv.kafka.conn.Opts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.readTopic: assign}),
		kgo.FetchMaxWait(250*time.Millisecond),
		kgo.FetchMaxPartitionBytes(8<<20),
	)...)
	if err != nil {
		return fmt.Errorf("consumer for %s: %w", r.def.Name, err)
	}
	r.cl = cl
	ctx, cancel = context.WithCancel(context.Background())
	r.cancel = cancel
	r.setStatus("running", nil)
	go r.poll(ctx)
	go r.loop(ctx)
	return nil
}

// stop finishes the batch in flight, persists, and waits.
func (r *runner) stop() {
	r.cancel()
	<-r.done
	r.cl.Close()
	if r.combiner != nil {
		r.combiner.stop()
	}
}

func (r *runner) poll(ctx context.Context) {
	pollInto(ctx, r.cl, r.srv.pollRecords(), r.fetchCh)
}

func (r *runner) loop(ctx context.Context) {
	defer close(r.done)
	every := r.srv.cfg.CommitInterval
	if every <= 0 {
		every = DefaultCommitInterval
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var early <-chan time.Time // EMIT EVERY: early fires of open windows
	if ms := r.def.Options.EmitEveryMs; ms > 0 && r.agg != nil {
		t := time.NewTicker(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		early = t.C
	}
	r.lastCommit = time.Now()
	for {
		select {
		case <-early:
			if !r.failed() {
				if err := r.earlyFire(ctx); err != nil {
					r.fail(err)
				}
			}
		case <-ctx.Done():
			r.answerPending(errors.New("stream stopped"))
			r.finalCommit()
			return
		case <-tick.C:
			if r.failed() {
				continue
			}
			// Commit what is pending; or, with nothing pending, close the
			// windows a partition going idle has released.
			if (r.uncommitted && time.Since(r.lastCommit) >= every) || r.watermarkWouldMove() {
				r.commit(ctx)
			}
		case fs := <-r.fetchCh:
			if r.failed() {
				continue
			}
			start := time.Now()
			if err := r.process(ctx, fs); err != nil {
				r.fail(err)
				continue
			}
			r.uncommitted = true
			if time.Since(r.lastCommit) >= every {
				r.commit(ctx)
			}
			r.srv.metrics.batchSeconds.WithLabelValues(r.def.Name).Observe(time.Since(start).Seconds())
		case req := <-r.flushCh:
			if r.failed() {
				req.done <- r.errOrNil()
				continue
			}
			r.pending = append(r.pending, req)
		}
		r.checkPending(ctx)
	}
}

// commit closes due windows and commits, failing the stream on error.
func (r *runner) commit(ctx context.Context) {
	if err := r.closeAndCommit(ctx); err != nil {
		r.fail(err)
	}
}

// finalCommit persists what was processed since the last commit when the
// stream stops, so a clean shutdown replays nothing.
func (r *runner) finalCommit() {
	if !r.uncommitted || r.failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.closeAndCommit(ctx); err != nil {
		r.log.Warn("final commit failed; the input since the last commit will be read again", "err", err)
	}
}

func (r *runner) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status == "failed"
}

func (r *runner) errOrNil() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return fmt.Errorf("stream %s failed: %w", r.def.Name, r.err)
	}
	return nil
}

func (r *runner) fail(err error) {
	r.log.Error("stream failed", "err", err)
	r.setStatus("failed", err)
	r.answerPending(r.errOrNil())
}

func (r *runner) setStatus(s string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status, r.err = s, err
}

func (r *runner) answerPending(err error) {
	for _, p := range r.pending {
		p.done <- err
	}
	r.pending = nil
}

// checkPending answers every flush whose targets have been processed. The
// partitions it covers are at their log end, so they no longer hold the
// watermark back; windows that input closes are closed before answering.
func (r *runner) checkPending(ctx context.Context) {
	if len(r.pending) == 0 || r.failed() {
		return
	}
	var keep []*flushReq
	var ready []*flushReq
	for _, req := range r.pending {
		ok := true
		for p, t := range req.targets {
			if ps := r.wms.Part(p); ps != nil && ps.Next < t {
				ok = false
			}
		}
		if ok {
			for p, t := range req.targets {
				r.wms.FlushedTo(p, t)
			}
			ready = append(ready, req)
		} else {
			keep = append(keep, req)
		}
	}
	r.pending = keep
	if len(ready) == 0 {
		return
	}
	err := r.closeAndCommit(ctx)
	if err != nil {
		r.fail(err)
		err = r.errOrNil()
	}
	for _, req := range ready {
		req.done <- err
	}
}

// flush blocks until the runner has processed targets.
func (r *runner) flush(ctx context.Context, targets map[int32]int64) error {
	return requestFlush(ctx, r.flushCh, r.done, nil, targets)
}

// process decodes and folds one fetch into state.
func (r *runner) process(ctx context.Context, fs kgo.Fetches) error {
	var outRows [][]any
	_, err := eachNewPartition(fs, r.wms, func(p int32, recs []*kgo.Record) error {
		rows, err := r.processPartition(ctx, p, recs)
		outRows = append(outRows, rows...)
		return err
	})
	if err != nil {
		return err
	}
	if len(outRows) > 0 { // stateless: output right away
		return r.produceRows(ctx, outRows)
	}
	return nil
}

func (r *runner) processPartition(ctx context.Context, p int32, recs []*kgo.Record) ([][]any, error) {
	if r.hop != nil || r.combiner != nil {
		return r.processHopped(ctx, p, recs)
	}
	return r.processRecords(ctx, p, recs, true)
}

// processHopped reads a partition of a repartition hop's topic: markers
// move this partition's event time (the slowest source partition's), data
// records are processed as if read from the source.
func (r *runner) processHopped(ctx context.Context, p int32, recs []*kgo.Record) ([][]any, error) {
	prog := r.progress[p]
	data := recs[:0:0]
	for _, rec := range recs {
		if v, ok := markerOf(rec); ok {
			m, err := shuffle.DecodeMarker(v)
			if err != nil {
				return nil, fmt.Errorf("%s/%d offset %d: %w", r.readTopic, p, rec.Offset, err)
			}
			prog.Observe(m)
			continue
		}
		data = append(data, rec)
	}
	var rows [][]any
	if len(data) > 0 && r.combiner != nil {
		if err := r.mergePartials(data); err != nil {
			return nil, fmt.Errorf("%s/%d: %w", r.readTopic, p, err)
		}
	} else if len(data) > 0 {
		var err error
		if rows, err = r.processRecords(ctx, p, data, false); err != nil {
			return nil, err
		}
	}
	t, ok := prog.Time()
	r.wms.Read(p, recs[len(recs)-1].Offset+1, t, ok)
	return rows, nil
}

func markerOf(rec *kgo.Record) ([]byte, bool) {
	for _, h := range rec.Headers {
		if h.Key == shuffle.MarkerHeader {
			return h.Value, true
		}
	}
	return nil, false
}

// processRecords decodes and folds records in; ownTime: their event times
// advance the partition's (false behind a hop, where markers do).
func (r *runner) processRecords(ctx context.Context, p int32, recs []*kgo.Record, ownTime bool) ([][]any, error) {
	values := make([][]byte, len(recs))
	for i, rec := range recs {
		values[i] = rec.Value
	}
	rec, decoded, derrs := r.dec.Decode(values)
	defer rec.Release()
	if len(derrs) > 0 {
		if err := r.handleDecodeErrors(ctx, p, recs, derrs); err != nil {
			return nil, err
		}
	}
	b := exec.BatchOf(rec, r.schema)
	fillKafkaTime(r.plan.Input, b, recs, decoded)
	if src := r.input.Source; src != nil && ownTime {
		r.srv.statsFor(src).observe(b)
	}
	if r.plan.NeedsSeq {
		appendSeq(b, recs, decoded)
	}
	var maxTime int64
	hasTime := false
	if r.tsIdx >= 0 {
		ts := b.Cols[r.tsIdx]
		for i := 0; i < b.N; i++ {
			if !ts.IsNull(i) && (!hasTime || ts.I[i] > maxTime) {
				maxTime, hasTime = ts.I[i], true
			}
		}
	}
	r.srv.metrics.recordsIn.WithLabelValues(r.def.Name, strconv.Itoa(int(p))).Add(float64(len(recs)))
	r.addStats(func(s *streamStats) { s.in += int64(len(recs)) })
	var rows [][]any
	if r.agg != nil {
		late, err := r.agg.Consume(b, r.wm, r.hasWM)
		if err != nil {
			return nil, fmt.Errorf("%s/%d offsets %d-%d: %w", r.input.Topic, p, recs[0].Offset, recs[len(recs)-1].Offset, err)
		}
		if len(late) > 0 {
			if err := r.handleLate(ctx, recs, decoded, late, b); err != nil {
				return nil, err
			}
		}
	} else {
		fb, err := exec.FilterBatch(b, r.plan.Filter)
		if err != nil {
			return nil, err
		}
		rows, err = exec.Project(fb, r.plan.Project)
		if err != nil {
			return nil, err
		}
	}
	if ownTime {
		r.wms.Read(p, recs[len(recs)-1].Offset+1, maxTime, hasTime)
	}
	return rows, nil
}

// newDecoder decodes records of in. With timestamp = 'kafka' the
// watermark column is not read from the JSON: fillKafkaTime fills it.
func newDecoder(in *catalog.Relation) *exec.JSONDecoder {
	d := exec.NewJSONDecoder(in.Schema, nil)
	if src := in.Source; src != nil && src.KafkaTimestamp && src.Watermark != nil {
		d.Skip(in.Schema.Index(src.Watermark.Column))
	}
	return d
}

// fillKafkaTime sets the watermark column of a timestamp = 'kafka' source
// to each record's Kafka timestamp. Row i of b came from recs[decoded[i]].
func fillKafkaTime(in *catalog.Relation, b *exec.Batch, recs []*kgo.Record, decoded []int) {
	src := in.Source
	if src == nil || !src.KafkaTimestamp || src.Watermark == nil {
		return
	}
	ts := b.Cols[in.Schema.Index(src.Watermark.Column)]
	ts.Null = nil
	for i, idx := range decoded[:b.N] {
		ts.I[i] = recs[idx].Timestamp.UnixMilli()
	}
}

// appendSeq adds planner.SeqColumn to b: each row's input position,
// (offset << 10) | partition, so FIRST_VALUE and LAST_VALUE break ties of
// event time by position (partitions number at most 960 < 1024). Row i of
// b came from recs[decoded[i]].
func appendSeq(b *exec.Batch, recs []*kgo.Record, decoded []int) {
	seq := &exec.Vec{T: types.Int, N: b.N, I: make([]int64, b.N)}
	for i, idx := range decoded[:b.N] {
		r := recs[idx]
		seq.I[i] = r.Offset<<10 | int64(r.Partition)
	}
	b.Cols = append(b.Cols, seq)
}

func (r *runner) addStats(f func(*streamStats)) {
	r.mu.Lock()
	f(&r.stats)
	r.mu.Unlock()
}

// handleDecodeErrors applies the source's on_error policy and counts what
// it did in SHOW STREAMS.
func (r *runner) handleDecodeErrors(ctx context.Context, p int32, recs []*kgo.Record, derrs []exec.DecodeError) error {
	skipped, dead, err := handleDecodeErrors(ctx, r.srv, decodePolicy{name: r.def.Name, input: r.input, log: r.log}, p, recs, derrs)
	if skipped > 0 || dead > 0 {
		r.addStats(func(s *streamStats) { s.skipped += int64(skipped); s.dlq += int64(dead) })
	}
	return err
}

// watermarkWouldMove reports whether the watermark has moved past the one
// windows were closed at (say a partition went idle), so a commit would
// close windows even with no new input.
func (r *runner) watermarkWouldMove() bool {
	if r.agg == nil || r.plan.Window == nil {
		return false
	}
	wm, ok := r.wms.Current()
	return ok && (!r.hasWM || wm > r.wm)
}

// closeAndCommit emits the windows the watermark has passed, then persists
// state, positions and the watermark in one batch.
func (r *runner) closeAndCommit(ctx context.Context) error {
	prev, hadPrev := r.wm, r.hasWM
	if r.agg != nil && r.plan.Window != nil {
		if wm, ok := r.wms.Current(); ok && (!r.hasWM || wm > r.wm) {
			r.wm, r.hasWM = wm, true
		}
	}
	batch := r.srv.store.NewBatch(r.def.Name)
	defer batch.Close()
	if r.agg != nil {
		var out [][]any
		var err error
		if r.hasWM && r.plan.Window != nil {
			var closed []*exec.Batch
			var recovered int
			closed, recovered, err = r.agg.CloseDue(prev, hadPrev, r.wm, r.recovering)
			if err != nil {
				return err
			}
			if recovered > 0 {
				// Windows the watermark at the last commit had already
				// passed: their timers came due while the stream was down.
				r.srv.metrics.recoveredTimers.WithLabelValues(r.def.Name).Add(float64(recovered))
				r.log.Info("closed windows already due at start", "windows", recovered)
			}
			for _, b := range closed {
				rows, err := r.finalRows(b)
				if err != nil {
					return err
				}
				out = append(out, r.markFinal(rows, true)...)
			}
		}
		var keys [][]byte
		if r.plan.Window == nil {
			// No window: an upsert stream. Every group changed since the
			// last commit is emitted with its current value, keyed by the
			// group key.
			if out, keys, err = r.changedGroups(); err != nil {
				return err
			}
		}
		if err := r.produceKeyed(ctx, out, keys); err != nil {
			return err
		}
		// Slices no open window needs are deleted from state (those
		// written before; one that opened and closed since the last commit
		// was never written), then the changed groups are written.
		if r.hasWM {
			for _, ref := range r.agg.Expire(r.wm) {
				if err := batch.DeleteAcc(ref.KG, ref.Key, ref.Window); err != nil {
					return err
				}
			}
		}
		if err := r.agg.Changes(func(ref exec.StateRef, val []byte) error {
			return batch.PutAcc(ref.KG, ref.Key, ref.Window, val)
		}, func(ref exec.StateRef) error {
			return batch.DeleteAcc(ref.KG, ref.Key, ref.Window)
		}); err != nil {
			return err
		}
		r.srv.metrics.openGroups.WithLabelValues(r.def.Name).Set(float64(r.agg.Table.Len()))
	}
	r.recovering = false
	for p, ps := range r.wms.Parts() {
		if err := batch.PutPartition(p, state.PartitionMeta{Offset: ps.Next, MaxTime: ps.MaxTime, HasTime: ps.HasTime}); err != nil {
			return err
		}
	}
	if err := batch.PutPartition(watermarkMetaPartition, state.PartitionMeta{MaxTime: r.wm, HasTime: r.hasWM}); err != nil {
		return err
	}
	if err := batch.Commit(); err != nil {
		return err
	}
	r.uncommitted, r.lastCommit = false, time.Now()
	r.mu.Lock()
	r.stats.watermark, r.stats.hasWatermark = r.wm, r.hasWM
	r.stats.idle = r.wms.IdleCount()
	r.mu.Unlock()
	if r.hasWM {
		r.srv.metrics.watermark.WithLabelValues(r.def.Name).Set(float64(r.wm))
		r.srv.metrics.watermarkLag.WithLabelValues(r.def.Name).Set(float64(time.Now().UnixMilli() - r.wm))
	}
	r.srv.metrics.idlePartitions.WithLabelValues(r.def.Name).Set(float64(r.stats.idle))
	if r.combiner != nil {
		r.reportCombineLag()
	}
	return nil
}

// markFinal appends the is_final column EMIT EVERY adds to the output.
func (r *runner) markFinal(rows [][]any, final bool) [][]any {
	if r.def.Options.EmitEveryMs == 0 {
		return rows
	}
	for i := range rows {
		rows[i] = append(rows[i], final)
	}
	return rows
}

// earlyFire emits the current value of every open window, not final.
func (r *runner) earlyFire(ctx context.Context) error {
	batches, err := r.agg.EmitOpen(r.wm, r.hasWM)
	if err != nil {
		return err
	}
	var out [][]any
	for _, b := range batches {
		rows, err := r.finalRows(b)
		if err != nil {
			return err
		}
		out = append(out, r.markFinal(rows, false)...)
	}
	return r.produceRows(ctx, out)
}

// changedGroups builds the output rows of the groups changed since the last
// commit of an unwindowed aggregation, with their group keys as Kafka keys
// (the key's text for one key column, integers in decimal; a JSON array
// for several; NULL: unkeyed). A group HAVING rejects is not emitted.
func (r *runner) changedGroups() ([][]any, [][]byte, error) {
	slots := r.agg.Table.PeekDirty()
	if len(slots) == 0 {
		return nil, nil, nil
	}
	b, err := r.agg.EmitGroups(slots)
	if err != nil {
		return nil, nil, err
	}
	nk := len(r.plan.Keys)
	keys := make([][]byte, b.N)
	for i := range keys {
		if nk == 1 {
			keys[i] = exec.PartitionKeyText(b.Cols[0], i, nil)
			if keys[i] == nil && !b.Cols[0].IsNull(i) {
				keys[i] = []byte{}
			}
			continue
		}
		vals := make([]any, nk)
		for j := range vals {
			vals[j] = b.Cols[j].Value(i)
		}
		keys[i] = appendJSONArray(nil, vals)
	}
	if r.plan.Having != nil {
		m, err := r.plan.Having.Eval(b)
		if err != nil {
			return nil, nil, err
		}
		keep := make([]bool, b.N)
		kept := 0
		var ks [][]byte
		for i := range keep {
			if keep[i] = !m.IsNull(i) && m.B[i]; keep[i] {
				kept++
				ks = append(ks, keys[i])
			}
		}
		b, keys = b.Select(keep, kept), ks
	}
	rows, err := exec.Project(b, r.plan.Project)
	return rows, keys, err
}

// finalRows applies HAVING and the select list to emitted groups.
func (r *runner) finalRows(b *exec.Batch) ([][]any, error) {
	b, err := exec.FilterBatch(b, r.plan.Having)
	if err != nil {
		return nil, err
	}
	return exec.Project(b, r.plan.Project)
}

// produceRows writes output rows as JSON, waiting for acknowledgement.
func (r *runner) produceRows(ctx context.Context, rows [][]any) error {
	return r.produceKeyed(ctx, rows, nil)
}

// produceKeyed is produceRows with a Kafka key per row (keys nil, or a nil
// key: unkeyed, spread round robin); a keyed record goes where murmur2
// puts it, as a Java producer would.
func (r *runner) produceKeyed(ctx context.Context, rows [][]any, keys [][]byte) error {
	if len(rows) == 0 {
		return nil
	}
	keys = r.outputKeys(rows, keys) // message_key, when set, keys every row
	recs := make([]*kgo.Record, len(rows))
	for i, row := range rows {
		recs[i] = &kgo.Record{Topic: r.def.Topic, Value: appendJSONRow(nil, r.plan.Output, row)}
		if keys != nil && keys[i] != nil {
			recs[i].Key = keys[i]
			recs[i].Partition = state.PartitionFor(keys[i], r.outN)
		} else {
			recs[i].Partition = int32(r.rr % r.outN)
			r.rr++
		}
	}
	if err := r.srv.kafka.produceSync(ctx, recs); err != nil {
		return fmt.Errorf("write to %s: %w", r.def.Topic, err)
	}
	r.srv.metrics.recordsOut.WithLabelValues(r.def.Name).Add(float64(len(recs)))
	r.addStats(func(s *streamStats) { s.out += int64(len(recs)) })
	return nil
}

// snapshot is what SHOW STREAMS prints.
func (r *runner) snapshot() (status string, err error, st streamStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status, r.err, r.stats
}
