package dataflow

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/placement"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/types"
	"github.com/turbinesql/turbinesql/window"
)

// HashAgg is the keyed aggregation of a stream: windowed (TUMBLE, HOP,
// SESSION), or without a window (an upsert stream). It folds rows into
// the task's groups; on the task's watermark it emits the windows it
// closes (and, with EMIT EVERY, early fires of the open ones), or for an
// upsert stream every group changed since the last commit, keyed by the
// group key. Rows every window of which has closed are late: they go to
// the late-data topic when the stream has one, else are dropped, and are
// counted either way.
//
// Its state is the task's groups; its close watermark is the task's
// (Commit.Closed). TUMBLE, HOP and unwindowed aggregations keep their
// groups in a bounded cache over Pebble (groupcache.go, exec/cache.go):
// nothing is loaded at Open, a group is read the first time a batch needs
// it, the least recently updated ones leave memory when the task's share
// of Cache is full, and a window whose groups left memory closes by
// reading them back in order, a chunk at a time. SESSION windows do the
// same per key, closing through an index of sessions by end
// (sessioncache.go). A combine's merge stage keeps each group's sources
// (the latest partial of each) with it, stores them in its place, and
// reads a missing group back before a partial replaces one of them
// (loadSources). (A combine takes no SESSION window.)
type HashAgg struct {
	Plan          *planner.Plan
	LatenessMs    int64
	LateDataTopic string
	// EmitEvery is the EMIT EVERY interval (0: none).
	EmitEvery time.Duration
	// DLQ knows the partition count of the late-data topic.
	DLQ func(ctx context.Context, topic string) int
	// Merge: the input is partial accumulators shipped by a combine's
	// pre-aggregation (records: key = group key, value = window + state).
	Merge bool
	// Cache bounds the memory of the groups (nil: unlimited).
	Cache *CacheBudget
	// StateTTL: an unwindowed aggregation forgets a group not changed for
	// this long (processing time), emitting a tombstone for its key; 0:
	// never (ttl.go).
	StateTTL time.Duration

	agg *exec.Aggregator
	env *Env
	// bySource: in a merge stage, the latest partial of each source
	// partition per group (window start, 8 bytes, then the group key).
	bySource map[string]map[int32][]byte
	// cover: in a merge stage, what it merged of each source partition
	// per window, to tell a copy from late data (latepartials.go).
	cover      coverage
	wm         int64 // the watermark windows are closed up to
	hasWM      bool
	recovering bool // the first close after Open: windows due at start
	lastEarly  time.Time
	early      earlyFires  // what the last early fire of each open window held
	cache      *groupCache // nil: every group in memory, restored at Open
	eager      bool        // tests: no cache, the whole state restored at Open
	// draining are cold windows' chunks handed on but perhaps not read
	// to the end (their cursors are closed at the commit).
	draining []func() (*exec.Batch, error)
	// expired are groups the last state_ttl sweep removed, deleted from
	// state at the next commit; lastSweep is when it ran.
	expired   []exec.StateRef
	lastSweep time.Time
	// heldCounted is the aggregator's held rows already counted in the
	// turbine_held_rows_total metric.
	heldCounted uint64
}

var _ Op = (*HashAgg)(nil)

// minSliceRuns is the fewest runs a HOP slice may take (startCache).
const minSliceRuns = 64

func (h *HashAgg) Open(_ context.Context, env *Env) error {
	h.env = env
	h.knownSeries()
	a, err := planner.NewAggregator(h.Plan, h.LatenessMs)
	if err != nil {
		return err
	}
	h.agg = a
	if m := env.Restored; m.HasClosed {
		h.wm, h.hasWM = m.Closed, true
		h.recovering = true
	}
	h.lastEarly = env.Now()
	h.bySource = map[string]map[int32][]byte{}
	if h.Merge {
		if err := h.openCoverage(); err != nil {
			return err
		}
	}
	gs, cached := env.Store.(groupStore)
	if cached && env.Scope != "" {
		// State written before partition scopes: the groups this
		// partition owns move into its scope, once.
		moved, err := gs.MigrateLegacy(env.State, env.Partition, env.Groups())
		if err != nil {
			return fmt.Errorf("restore state of %s: %w", env.State, err)
		}
		if moved > 0 {
			env.Log.Info("moved state into the partition's scope", "partition", env.Partition, "entries", moved)
		}
		if err := h.rekeyOld(gs); err != nil {
			return fmt.Errorf("restore state of %s: %w", env.State, err)
		}
	}
	if cached && !h.eager {
		if h.Plan.Window != nil && h.Plan.Window.Kind() == window.Session {
			return h.openSessionCache(gs)
		}
		return h.openCached(gs)
	}
	return env.Store.AccsOfGroups(h.scope(), nil, func(kg uint16, key []byte, window int64, val []byte) error {
		ref := exec.StateRef{KG: kg, Key: key, Window: window}
		restore := h.agg.Restore
		if h.Merge {
			restore = h.restoreMerged
		}
		if err := restore(ref, val); err != nil {
			return fmt.Errorf("restore state of %s: %w", env.State, err)
		}
		return nil
	})
}

// rekeyOld puts state that ran on a partition count that does not divide
// 960 under its keys' groups of 960, once (state.RekeyScope records that
// it did): releases before grouped such state by hash mod the count, so
// after an upgrade no key would find its state, nor after the count
// changed. State that only ran on counts that divide 960 was always keyed
// by groups of 960 and is left as it is.
func (h *HashAgg) rekeyOld(gs groupStore) error {
	env := h.env
	done, err := gs.HasKeyGroups(env.State, env.Partition)
	if err != nil || done {
		return err
	}
	counts := []int{env.Partitions}
	if v, err := env.Store.TaskValue(env.State, env.Partition, PlacementKey); err != nil {
		return err
	} else if ps, err := placement.Decode(v); err == nil {
		counts = append(counts, ps.Counts...)
	}
	if allDivide(counts) {
		return nil
	}
	kgOf := h.agg.PartitionKeyGroup
	if h.Merge { // a merge stage's groups are placed by their whole key
		kgOf = func(key []byte) (uint16, error) { return h.agg.KeyGroupOf(key), nil }
	}
	moved, err := gs.RekeyScope(env.State, env.Partition, kgOf)
	if err != nil {
		return err
	}
	if moved > 0 {
		env.Log.Info("re-keyed state written on a partition count that does not divide 960 under its keys' groups of 960 (grouped by hash mod the count before)",
			"partition", env.Partition, "counts", counts, "entries", moved)
	}
	return nil
}

// openCached starts the group cache: state written in the older layout is
// moved once, then only the windows present are noted (cold), so nothing
// is loaded and start-up does not grow with the state.
func (h *HashAgg) openCached(gs groupStore) error {
	env := h.env
	if h.Merge {
		return h.openMergeCache(gs)
	}
	moved, err := gs.MoveAccsToGroups(h.scope(), nil)
	if err != nil {
		return fmt.Errorf("restore state of %s: %w", env.State, err)
	}
	if moved > 0 {
		env.Log.Info("moved groups to the cached layout", "partition", env.Partition, "groups", moved)
	}
	cold, err := gs.GroupWindows(h.scope())
	if err != nil {
		return fmt.Errorf("restore state of %s: %w", env.State, err)
	}
	return h.startCache(gs.NewPending(h.scope()), cold, slotOverhead)
}

// startCache starts the group cache over pending, with the windows the
// store holds groups of (cold) and a group's memory beyond its key and
// accumulators (overhead).
func (h *HashAgg) startCache(pending *state.Pending, cold []int64, overhead int64) error {
	env := h.env
	h.cache = &groupCache{pending: pending, budget: h.Cache,
		overhead: overhead, slotBytes: overhead + 16 + 16*int64(len(h.Plan.Aggs)),
		delta: state.DeltaID{Gen: uint64(max(env.Restored.Offset, env.Restored.Applied, 0))}}
	// A HOP window's close reads the runs of every slice it spans: they
	// share the bound on a window's runs, down to 64 a slice (the bound
	// before it was 512: fewer would send a slice's partials through the
	// memtable sooner than they went then).
	if spec := h.agg.Window; spec != nil && spec.Kind == window.Hop {
		pending.LimitRuns(max(state.MaxWindowRuns/max(int(spec.Size/spec.SliceSize()), 1), minSliceRuns))
	}
	// Runs of partials a crash left uncommitted go before anything is read
	// (state's runs.go); commits write runs only once this has run.
	dropped, err := h.cache.pending.OpenRuns()
	if err != nil {
		h.cache.pending.Close()
		h.cache = nil
		return fmt.Errorf("restore state of %s: %w", env.State, err)
	}
	if dropped > 0 {
		env.Log.Info("dropped runs of partials an interrupted commit left", "partition", env.Partition, "runs", dropped)
	}
	if h.StateTTL > 0 && h.Plan.Window == nil {
		h.cache.stamped, h.cache.now = true, env.Now
		h.lastSweep = env.Now()
	}
	h.agg.UseStore(h.cache, cold)
	h.joinBudget()
	return nil
}

// joinBudget counts the task among the server's cache budget's (shares
// follow the tasks running; Close leaves it) and gives the aggregator its
// share, which bounds the held rows and a close's reads of stored
// sessions, and the hot-window bound.
func (h *HashAgg) joinBudget() {
	if h.Cache == nil {
		return
	}
	h.Cache.tasks.Add(1)
	h.agg.SetBufferLimit(int(h.Cache.share()))
	h.agg.SetHotWindowGroups(h.Cache.HotWindowGroups)
}

// scope is where the task's groups live: its partition's scope (the
// stream's name itself for a task run without one).
func (h *HashAgg) scope() string {
	if h.env.Scope != "" {
		return h.env.Scope
	}
	return h.env.State
}

// Aggregator exposes the operator's groups (tests).
func (h *HashAgg) Aggregator() *exec.Aggregator { return h.agg }

func (h *HashAgg) Process(ctx context.Context, b *Batch) (*Batch, error) {
	if h.Merge {
		return nil, h.mergePartials(b)
	}
	late, err := h.agg.Consume(b.Data, h.wm, h.hasWM)
	if err != nil {
		return nil, fmt.Errorf("%s/%d offsets %d-%d: %w", b.Recs[0].Topic, b.Partition, b.Recs[0].Offset, b.Recs[len(b.Recs)-1].Offset, err)
	}
	if len(late) > 0 {
		h.routeLate(ctx, b, late)
	}
	if h.cache != nil {
		if err := h.cache.evict(h.agg); err != nil {
			return nil, fmt.Errorf("evict groups of %s: %w", h.env.State, err)
		}
	}
	return nil, nil
}

// mergePartials folds shipped partial accumulators into their (window,
// key) groups. A partial for a window already closed is dropped, never
// merged into a second pane: a copy of what the pane holds (shipped again
// by a pre-aggregation that restarted, say) is counted in
// turbine_combine_late_partials_total; one that carries rows the pane
// never had counts them as late rows (latepartials.go). Rows late at the
// source are dropped and counted there.
func (h *HashAgg) mergePartials(b *Batch) error {
	spec := h.Plan.Window.Spec
	parts := make([]shipped, len(b.Recs))
	for i, rec := range b.Recs {
		sp := &parts[i]
		var err error
		sp.source, sp.named, sp.window, sp.enc, err = DecodePartial(rec.Value)
		if err == nil {
			sp.cover, sp.marked, err = coverOf(rec)
		}
		if err != nil {
			return fmt.Errorf("%s/%d offset %d: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
		// The window is a window start (a slice start for HOP): late once
		// no window holding it is open.
		sp.key, sp.late = rec.Key, h.hasWM && spec.LastWindowEnd(sp.window)+h.agg.Lateness <= h.wm
	}
	if h.cache != nil {
		if err := h.loadSources(parts); err != nil {
			return fmt.Errorf("restore state of %s: %w", h.env.State, err)
		}
	}
	var late uint64
	for i := range parts {
		sp := &parts[i]
		if sp.late {
			if n := h.lateRows(sp); n > 0 {
				late += n
			} else {
				h.env.Metrics.CombineLatePartials.WithLabelValues(h.env.Name).Inc()
			}
			continue
		}
		switch {
		case sp.marked:
			h.covers(sp.window, sp.source, sp.cover.Last)
		case sp.named:
			// Shipped by the previous release (a rolling upgrade): it may
			// cover any of its source's rows, so a later partial of the
			// window from that source is taken for a copy.
			h.covers(sp.window, sp.source, coversAll)
		}
		var err error
		if !sp.named { // written before partials named their source
			err = h.agg.MergePartial(sp.window, sp.key, sp.enc)
		} else {
			// The latest partial of each source stands for all it shipped
			// of the group: the group is their merge.
			id := groupID(sp.window, sp.key)
			srcs := h.bySource[id]
			if srcs == nil {
				srcs = map[int32][]byte{}
				h.bySource[id] = srcs
			}
			srcs[sp.source] = append([]byte(nil), sp.enc...)
			err = h.agg.SetPartials(sp.window, sp.key, sortedPartials(srcs))
		}
		if err != nil {
			rec := b.Recs[i]
			return fmt.Errorf("%s/%d offset %d: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
	}
	if late > 0 {
		env := h.env
		env.Metrics.LateRows.WithLabelValues(env.Name, "dropped").Add(float64(late))
		env.Metrics.late.note(env, int(late), "dropped")
		env.Counts.Late.Add(int64(late))
	}
	if h.cache != nil {
		if err := h.cache.evict(h.agg); err != nil {
			return fmt.Errorf("evict groups of %s: %w", h.env.State, err)
		}
	}
	return nil
}

// shipped is a combine's partial as a merge stage reads it.
type shipped struct {
	source int32
	named  bool // the partial names its source (DecodePartial)
	window int64
	key    []byte
	enc    []byte
	late   bool // no window holding it is open
	marked bool // it says what it covers (cover: its CoverHeader)
	cover  PartialCover
}

// sourcesMark starts a merge stage's stored group: the latest partial of
// each source, not a merged accumulator.
const sourcesMark = 0xC2

func groupID(window int64, key []byte) string {
	return string(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(key)), uint64(window))) + string(key)
}

// sortedPartials lists the partials by source partition, so a group is
// rebuilt the same way every time.
func sortedPartials(srcs map[int32][]byte) [][]byte {
	qs := make([]int32, 0, len(srcs))
	for q := range srcs {
		qs = append(qs, q)
	}
	slices.Sort(qs)
	out := make([][]byte, len(qs))
	for i, q := range qs {
		out[i] = srcs[q]
	}
	return out
}

func encodeSources(srcs map[int32][]byte) []byte {
	v := append(make([]byte, 0, 64), sourcesMark)
	v = binary.AppendUvarint(v, uint64(len(srcs)))
	qs := make([]int32, 0, len(srcs))
	for q := range srcs {
		qs = append(qs, q)
	}
	slices.Sort(qs)
	for _, q := range qs {
		v = binary.AppendUvarint(v, uint64(q))
		v = binary.AppendUvarint(v, uint64(len(srcs[q])))
		v = append(v, srcs[q]...)
	}
	return v
}

func decodeSources(v []byte) (map[int32][]byte, error) {
	bad := errors.New("corrupt partials of a merged group")
	v = v[1:]
	n, k := binary.Uvarint(v)
	if k <= 0 {
		return nil, bad
	}
	v = v[k:]
	out := make(map[int32][]byte, n)
	for i := uint64(0); i < n; i++ {
		q, a := binary.Uvarint(v)
		if a <= 0 {
			return nil, bad
		}
		l, b := binary.Uvarint(v[a:])
		if b <= 0 || uint64(len(v)-a-b) < l {
			return nil, bad
		}
		out[int32(q)] = append([]byte(nil), v[a+b:a+b+int(l)]...)
		v = v[a+b+int(l):]
	}
	return out, nil
}

// knownSeries creates, at 0, the series the operator counts into, so a
// dashboard sees them from the stream's start rather than from its first
// late row or recovered window.
func (h *HashAgg) knownSeries() {
	m, name := h.env.Metrics, h.env.Name
	switch {
	case h.Merge:
		m.CombineLatePartials.WithLabelValues(name)
		m.RecoveredTimers.WithLabelValues(name)
	case h.Plan.Window != nil:
		action := "dropped"
		if h.LateDataTopic != "" {
			action = "routed"
		}
		m.LateRows.WithLabelValues(name, action)
		m.RecoveredTimers.WithLabelValues(name)
	case h.StateTTL > 0:
		m.ExpiredGroups.WithLabelValues(name)
	}
}

// routeLate accounts for rows every window of which had closed: with a
// late_data_topic they are written there as they came in (key, bytes,
// broker timestamp), with headers naming the stream, the windows and where
// the record came from; otherwise they are dropped. Either way they are
// counted, so nothing late disappears silently.
func (h *HashAgg) routeLate(ctx context.Context, b *Batch, late []int) {
	env := h.env
	action := "dropped"
	if topic := h.LateDataTopic; topic != "" {
		action = "routed"
		n := int32(h.DLQ(ctx, topic))
		for _, row := range late {
			src := b.Recs[b.Src[row]]
			env.Out.ProduceOr(ctx, &kafkaio.Record{
				Topic: topic, Key: src.Key, Value: src.Value, Timestamp: src.Timestamp, Partition: src.Partition % n,
				Headers: []kafkaio.Header{
					{Key: HeaderStream, Value: []byte(env.Name)},
					{Key: "turbine.window", Value: []byte(h.lateWindows(b.Data, row))},
					{Key: "turbine.watermark", Value: []byte(exec.FormatTimestamp(types.MillisTime(h.wm)))},
					{Key: "turbine.source.topic", Value: []byte(src.Topic)},
					{Key: "turbine.source.partition", Value: []byte(strconv.Itoa(int(src.Partition)))},
					{Key: "turbine.source.offset", Value: []byte(strconv.FormatInt(src.Offset, 10))},
				},
			}, func(r *kafkaio.Record) { env.Out.Produce(ctx, Truncated(r)) })
		}
	}
	env.Metrics.LateRows.WithLabelValues(env.Name, action).Add(float64(len(late)))
	env.Metrics.late.note(env, len(late), action)
	env.Counts.Late.Add(int64(len(late)))
}

// lateWindows names the windows a late row fell in, "start/end" each,
// comma-separated; "none (NULL event time)" when it had no event time.
func (h *HashAgg) lateWindows(b *exec.Batch, row int) string {
	ts := b.Cols[h.Plan.Window.TimeIdx]
	if ts.IsNull(row) {
		return "none (NULL event time)"
	}
	spec := h.Plan.Window.Spec
	if h.Plan.Window.Kind() == window.Session {
		t := ts.I[row]
		return "session " + exec.FormatTimestamp(types.MillisTime(t)) + "/" + exec.FormatTimestamp(types.MillisTime(t+spec.Gap))
	}
	var parts []string
	for _, w := range spec.WindowsOf(ts.I[row]) {
		parts = append(parts, exec.FormatTimestamp(types.MillisTime(w))+"/"+exec.FormatTimestamp(types.MillisTime(w+spec.Size)))
	}
	return strings.Join(parts, ",")
}

// OnWatermark closes the windows the watermark passes (an upsert stream
// emits its changed groups instead), then fires the open windows early when
// EMIT EVERY is due.
func (h *HashAgg) OnWatermark(_ context.Context, wm Watermark) (*Batch, error) {
	if h.Plan.Window == nil {
		var out chain
		if h.cache != nil && !h.cache.pending.Empty() {
			// Changed groups evicted since the last commit: emitted
			// before the hot ones, which are newer.
			b, err := h.agg.PendingChanges(func(fn func(kg uint16, key, val []byte) error) error {
				return h.cache.pending.Each(exec.NoWindow, func(kg uint16, key, val []byte) error {
					return fn(kg, key, h.cache.unstamp(val))
				})
			})
			if err != nil {
				return nil, err
			}
			if b != nil {
				out.add(&Batch{Partition: h.env.Partition, Data: b, Keys: h.groupKeys(b), Final: true})
			}
		}
		b, keys, err := h.changedGroups()
		if err != nil {
			return nil, err
		}
		if b != nil {
			out.add(&Batch{Partition: h.env.Partition, Data: b, Keys: keys, Final: true})
		}
		if h.cache != nil && h.cache.stamped && wm.Now.Sub(h.lastSweep) >= sweepEvery(h.StateTTL) {
			h.lastSweep = wm.Now
			tombs, err := h.sweep(wm.Now)
			if err != nil {
				return nil, err
			}
			if len(tombs) > 0 {
				out.add(&Batch{Partition: h.env.Partition, Tombstones: tombs, Final: true})
			}
		}
		return out.head, nil
	}
	var out chain
	if wm.Has && (!h.hasWM || wm.WM > h.wm || h.recovering) {
		prev, hadPrev := h.wm, h.hasWM
		if !h.hasWM || wm.WM > h.wm {
			h.wm, h.hasWM = wm.WM, true
		}
		closed, recovered, err := h.agg.CloseDueChunks(prev, hadPrev, h.wm, h.recovering)
		if err != nil {
			return nil, err
		}
		switch {
		case wm.Replay && len(closed) > 0:
			// An exactly-once task catching up with a transaction that
			// committed these windows' panes before a crash: retired, and
			// what OnWatermark returns is dropped.
			h.env.Metrics.RecoveredTimers.WithLabelValues(h.env.Name).Add(float64(len(closed)))
			h.env.Log.Info("retired windows already due at recovery: their panes were committed before the crash, so they are not emitted again (exactly-once: no duplicate can result)",
				"partition", h.env.Partition, "windows", len(closed))
		case recovered > 0 && h.env.ExactlyOnce:
			h.env.Metrics.RecoveredTimers.WithLabelValues(h.env.Name).Add(float64(recovered))
			h.env.Log.Info("closing windows already due at start: no transaction committed their panes, so they are written now, once (exactly-once)",
				"partition", h.env.Partition, "windows", recovered)
		case recovered > 0:
			// Windows the watermark at the last commit had already passed:
			// their timers came due while the stream was down.
			h.env.Metrics.RecoveredTimers.WithLabelValues(h.env.Name).Add(float64(recovered))
			h.env.Log.Warn("closing windows already due at start: if the process died after writing their panes but before recording the close, "+
				"these panes are written a second time (at-least-once; each carries the same value and identity): dedupe downstream on their turbine.key and turbine.window.start headers, or use processing_guarantee = 'exactly_once'",
				"partition", h.env.Partition, "windows", recovered)
		}
		for _, c := range closed {
			out.add(h.chunks(c, true))
		}
	}
	h.recovering = false
	if h.EmitEvery > 0 && wm.Now.Sub(h.lastEarly) >= h.EmitEvery {
		h.lastEarly = wm.Now
		windows, rows := h.agg.OpenWindows(h.wm, h.hasWM), h.agg.WindowRows
		if h.Plan.Window.Kind() == window.Session {
			windows = []int64{sessionPanes}
			rows = func(int64) (exec.Chunks, bool, error) { return h.agg.OpenSessionChunks(h.wm, h.hasWM) }
		}
		open, err := h.early.fire(windows, rows)
		if err != nil {
			return nil, err
		}
		for _, c := range open {
			out.add(h.chunks(c, false))
		}
	}
	return out.head, nil
}

// chunks is the batch of a window's rows; a cold window's further chunks
// follow through More, read as the next operator asks.
func (h *HashAgg) chunks(c exec.Chunks, final bool) *Batch {
	b := h.panes(c.First, final)
	if c.More != nil {
		more := c.More
		b.More = func() (*Batch, error) {
			d, err := more()
			if err != nil || d == nil {
				return nil, err
			}
			return h.panes(d, final), nil
		}
		h.draining = append(h.draining, more)
	}
	return b
}

// panes is the batch of window rows d with each pane's identity: its
// group key (Keys, as an upsert stream's; nil for a keyless window) and its
// window's bounds, read from the window_start and window_end columns that
// follow the keys (planner.Plan.PostAggSchema). The select list may leave
// them out: the identity travels beside the rows, not in them.
func (h *HashAgg) panes(d *exec.Batch, final bool) *Batch {
	b := &Batch{Partition: h.env.Partition, Data: d, Final: final}
	if d == nil || d.N == 0 {
		return b
	}
	nk := len(h.Plan.Keys)
	if nk > 0 {
		b.Keys = h.groupKeys(d)
	}
	ws, we := d.Cols[nk].I, d.Cols[nk+1].I
	b.Panes = make([]Pane, d.N)
	for i := range b.Panes {
		b.Panes[i] = Pane{Start: ws[i], End: we[i]}
	}
	return b
}

// changedGroups builds the rows of the groups changed since the last
// commit of an unwindowed aggregation, with their group keys as Kafka keys
// (the key's text for one key column, integers in decimal; a JSON array
// for several; NULL: unkeyed).
func (h *HashAgg) changedGroups() (*exec.Batch, [][]byte, error) {
	slots := h.agg.Table.PeekDirty()
	if len(slots) == 0 {
		return nil, nil, nil
	}
	b, err := h.agg.EmitGroups(slots)
	if err != nil {
		return nil, nil, err
	}
	return b, h.groupKeys(b), nil
}

// groupKeys are the group keys of rows b as Kafka keys: the key's text for
// one key column (integers in decimal; NULL: nil, an unkeyed record), a
// JSON array for several. An upsert stream's records and a windowed
// stream's panes are keyed by them.
func (h *HashAgg) groupKeys(b *exec.Batch) [][]byte {
	nk := len(h.Plan.Keys)
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
		keys[i] = exec.AppendJSONArray(nil, vals)
	}
	return keys
}

// Commit deletes the slices no open window needs (those written before;
// one that opened and closed since the last commit was never written),
// then writes the changed groups and the close watermark.
func (h *HashAgg) Commit(_ context.Context, c *Commit) error {
	if h.cache != nil {
		return h.commitCached(c)
	}
	if h.hasWM {
		for _, ref := range h.agg.Expire(h.wm) {
			if err := c.State.DeleteAcc(ref.KG, ref.Key, ref.Window); err != nil {
				return err
			}
		}
		c.Closed, c.HasClosed = h.wm, true
	}
	// Closed windows' partials are done with.
	if h.Merge && h.hasWM {
		h.dropClosedSources()
	}
	if h.Merge {
		if err := h.commitCoverage(c); err != nil {
			return err
		}
	}
	if err := h.agg.Changes(func(ref exec.StateRef, val []byte) error {
		return c.State.PutAcc(ref.KG, ref.Key, ref.Window, h.sourcesOf(ref, val))
	}, func(ref exec.StateRef) error {
		return c.State.DeleteAcc(ref.KG, ref.Key, ref.Window)
	}); err != nil {
		return err
	}
	h.env.Metrics.OpenGroups.WithLabelValues(h.env.Name, strconv.Itoa(int(h.env.Partition))).Set(float64(h.agg.Table.Len()))
	return nil
}

// drain reads to their end the cold windows' chunks handed on but not
// read (nobody will), which closes their cursors.
// A chunk that fails has closed its own cursors: the others still drain.
func (h *HashAgg) drain() error {
	var first error
	for _, more := range h.draining {
		for {
			b, err := more()
			if err != nil && first == nil {
				first = err
			}
			if err != nil || b == nil {
				break
			}
		}
	}
	h.draining = h.draining[:0]
	return first
}

// commitCached is Commit of a cached aggregation: the groups evicted
// since the last commit first, then the expired windows' deletions (a
// range per owned key group for a window whose groups left memory), then
// the changed groups in memory.
func (h *HashAgg) commitCached(c *Commit) error {
	if err := h.drain(); err != nil {
		return err
	}
	if h.Plan.Window != nil && h.Plan.Window.Kind() == window.Session {
		return h.commitSessions(c)
	}
	if h.Plan.Window != nil {
		return h.commitWindowed(c)
	}
	if err := c.State.Absorb(h.cache.pending); err != nil {
		return err
	}
	for _, ref := range h.expired {
		if err := c.State.DeleteGroup(ref.Window, ref.KG, ref.Key); err != nil {
			return err
		}
	}
	h.expired = h.expired[:0]
	if h.hasWM {
		dels, cold := h.agg.ExpireCold(h.wm)
		if err := h.deleteExpired(c, dels, cold); err != nil {
			return err
		}
		c.Closed, c.HasClosed = h.wm, true
	}
	if err := h.agg.Changes(func(ref exec.StateRef, val []byte) error {
		// Never a partial: an unwindowed aggregation reads (UseStore).
		return c.State.PutGroup(ref.Window, ref.KG, ref.Key, h.cache.stamp(val))
	}, func(ref exec.StateRef) error {
		return c.State.DeleteGroup(ref.Window, ref.KG, ref.Key)
	}); err != nil {
		return err
	}
	h.env.Metrics.OpenGroups.WithLabelValues(h.env.Name, strconv.Itoa(int(h.env.Partition))).Set(float64(h.agg.Table.Len()))
	return nil
}

// deleteExpired deletes from the state the evicted groups of windows that
// closed (dels) and the windows that closed while cold.
func (h *HashAgg) deleteExpired(c *Commit, dels []exec.StateRef, cold []int64) error {
	for _, ref := range dels {
		if err := c.State.DeleteGroup(ref.Window, ref.KG, ref.Key); err != nil {
			return err
		}
	}
	for _, w := range cold {
		if err := c.State.DeleteWindowGroups(w, h.cache.groups); err != nil {
			return err
		}
	}
	return nil
}

// commitWindowed is commitCached of a windowed aggregation: the changed
// groups and the evicted ones are written in key order (AbsorbSorted),
// then the expired windows' deletions. Deleting
// after writing is safe: a window expiring now has no groups in memory
// any more (ExpireCold closed it), and its evicted ones are deleted with
// it.
func (h *HashAgg) commitWindowed(c *Commit) error {
	p := h.cache.pending
	var dels []exec.StateRef
	var cold []int64
	if h.hasWM {
		dels, cold = h.agg.ExpireCold(h.wm)
		c.Closed, c.HasClosed = h.wm, true
	}
	if h.Merge {
		return h.commitMerged(c, dels, cold)
	}
	w := &h.cache.writes
	// The held rows' partials go from the aggregator to the commit's runs
	// as they are folded, not through w.
	held, err := h.agg.TakeHeld()
	if err != nil {
		return err
	}
	var src state.SortedPartials
	if held != nil {
		defer held.Close()
		held.NextID = h.cache.nextDelta
		src = held
	}
	if err := h.agg.Changes(func(ref exec.StateRef, val []byte) error {
		if ref.Partial {
			w.PutDelta(ref.Window, ref.KG, ref.Key, h.cache.nextDelta(), val)
		} else {
			w.Put(ref.Window, ref.KG, ref.Key, val)
		}
		return nil
	}, func(ref exec.StateRef) error {
		return c.State.DeleteGroup(ref.Window, ref.KG, ref.Key)
	}); err != nil {
		return err
	}
	runs := c.State.Runs()
	if h.agg.BlindWrites() && !h.cache.stamped {
		// Windows at their run bound (or with many classic partials) get
		// one partial per group again before this commit adds its own.
		n, err := c.State.FoldRuns(p, h.agg.MergedEncoding, h.cache.nextDelta, cold)
		if err != nil {
			return err
		}
		if n > 0 {
			h.env.Metrics.StateFolds.WithLabelValues(h.env.Name).Add(float64(n))
		}
	}
	if err := c.State.AbsorbSorted(p, w, src); err != nil {
		return err
	}
	if n := c.State.Runs() - runs; n > 0 {
		h.env.Metrics.StateRuns.WithLabelValues(h.env.Name).Add(float64(n))
	}
	if held := h.agg.HeldRows(); held > h.heldCounted {
		h.env.Metrics.HeldRows.WithLabelValues(h.env.Name).Add(float64(held - h.heldCounted))
		h.heldCounted = held
	}
	if err := h.deleteExpired(c, dels, cold); err != nil {
		return err
	}
	h.env.Metrics.OpenGroups.WithLabelValues(h.env.Name, strconv.Itoa(int(h.env.Partition))).Set(float64(h.agg.Table.Len()))
	return nil
}

// Close releases the pending evictions and the task's cache share.
func (h *HashAgg) Close() {
	// A task stopping without its commit (a failed or cancelled one) may
	// leave a closing window's chunks unread: their store cursors hold
	// Pebble's tables, and the store's close would panic on them.
	_ = h.drain()
	if h.cache != nil {
		h.cache.pending.Close()
		if h.Cache != nil {
			h.Cache.tasks.Add(-1)
		}
		h.cache = nil
	}
}

// Due asks for a commit when an early fire or a state_ttl sweep is due,
// or when the groups evicted since the last commit, or the rows of cold
// windows held, are due to be written (pendingDue, heldDue).
func (h *HashAgg) Due(now time.Time) bool {
	if h.cache != nil && (h.cache.pendingDue() || h.cache.heldDue(h.agg) || h.cache.stamped && now.Sub(h.lastSweep) >= sweepEvery(h.StateTTL)) {
		return true
	}
	return h.EmitEvery > 0 && h.Plan.Window != nil && now.Sub(h.lastEarly) >= h.EmitEvery
}

// chain builds a list of batches.
type chain struct{ head, tail *Batch }

func (c *chain) add(b *Batch) {
	if c.head == nil {
		c.head, c.tail = b, b
		return
	}
	c.tail.Next = b
	c.tail = b
}
