package dataflow

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/placement"
	"github.com/turbinesql/turbinesql/state"
)

// PlacementKey is the task value the placement check keeps with a
// partition's state: its verdict, count history and transition window.
const PlacementKey = "placement"

// Placement is the producer-placement check of a keyed stateful stream
// (package placement), between the Source and the aggregation of each of
// its tasks. At Open it starts the partition's check on the count the
// stage runs under and, the state's groups not yet restored, runs the
// start-up cleanup when it is due: a declared source (partition_hash =
// 'murmur2') drops the key groups the partition no longer owns, the keys
// that moved; an undeclared one keeps them and says so. It passes every
// batch on unchanged.
type Placement struct {
	// Col is the partition-key column of the Source's rows.
	Col   int
	Topic string
	// Declared: the source declares partition_hash = 'murmur2'.
	Declared bool
	// Window is the transition window (0: placement.DefaultWindow).
	Window time.Duration
	// Count is the topic's partition count now; End a partition's log end.
	Count func(ctx context.Context, topic string) (int, error)
	End   func(ctx context.Context, topic string, p int32) (int64, error)
	// Board, when set, shows the partition's check (SHOW PARTITIONS).
	Board *placement.Board

	env   *Env
	chk   *placement.Checker
	gauge prometheus.Gauge
	ctx   context.Context // the call the broker questions belong to
	pos   int64
}

var _ Op = (*Placement)(nil)
var _ Ticker = (*Placement)(nil)

// cleaner is what the start-up cleanup needs of the store.
type cleaner interface {
	DropMovedGroups(stream string, p int32, n int) (entries, groups int, err error)
}

// brokerOf asks Kafka for the check, within the current call's context.
type brokerOf struct{ o *Placement }

func (b brokerOf) Count() (int, error) {
	ctx, cancel := context.WithTimeout(b.o.ctx, 10*time.Second)
	defer cancel()
	return b.o.Count(ctx, b.o.Topic)
}

func (b brokerOf) End() (int64, error) {
	ctx, cancel := context.WithTimeout(b.o.ctx, 10*time.Second)
	defer cancel()
	return b.o.End(ctx, b.o.Topic, b.o.env.Partition)
}

func (o *Placement) Open(ctx context.Context, env *Env) error {
	o.env, o.ctx, o.pos = env, ctx, env.Restored.Offset
	o.gauge = env.Metrics.KeyPlacement.WithLabelValues(env.Name, o.Topic, strconv.Itoa(int(env.Partition)))
	v, err := env.Store.TaskValue(env.State, env.Partition, PlacementKey)
	if err != nil {
		return err
	}
	st, err := placement.Decode(v)
	if err != nil {
		return fmt.Errorf("placement check of %s/%d: %w", env.State, env.Partition, err)
	}
	win := o.Window
	if win <= 0 {
		win = placement.DefaultWindow
	}
	o.chk = &placement.Checker{State: st, Partition: env.Partition, Window: win, Now: env.Now, Broker: brokerOf{o}}
	o.chk.Changed = func(from, to int) {
		env.Log.Info("the input's partition count changed while running: transition window opened", "partition", env.Partition,
			"topic", o.Topic, "was", from, "partitions", to, "window", win.String())
	}
	n := env.Partitions
	was := st.Current()
	isNew, err := o.chk.Start(n, env.Restored.Offset)
	if err != nil {
		return err
	}
	log := env.Log
	switch {
	case isNew:
		log.Info("the input's partition count changed: transition window opened, start-up cleanup held until it closes",
			"partition", env.Partition, "topic", o.Topic, "was", was, "partitions", n, "counts", o.chk.History(), "window", win.String())
		if !o.Declared {
			o.logUndeclared()
		}
	case o.chk.CleanupDue && o.chk.Verdict == placement.Misplaced:
		log.Warn("start-up cleanup blocked: records were seen where murmur2 would not have put them (placement -1), so the state of keys that moved is kept; rebuild the state to clear it",
			"partition", env.Partition, "topic", o.Topic)
	case o.chk.CleanupReady() && !o.Declared:
		o.logUndeclared()
		o.chk.CleanedUp()
	case o.chk.CleanupReady() && !state.Divides(n):
		// On such a count a partition receives keys of every group: "the
		// groups it does not own" would be live state.
		log.Warn("start-up cleanup skipped: the partition count does not divide 960, so the key groups this partition does not own hold live keys too; the state of keys that moved stays",
			"partition", env.Partition, "topic", o.Topic, "counts", o.chk.History())
		o.chk.CleanedUp()
	case o.chk.CleanupReady() && !allDivide(o.chk.Counts) && !o.rekeyed(env):
		// State that ran on a count that does not divide 960 under an
		// earlier release is grouped by hash mod that count until the
		// aggregation re-keys it (HashAgg.rekeyOld, after this op opens):
		// its groups say nothing yet. Held, not given up: the next start
		// cleans up.
		log.Warn("start-up cleanup held until the next start: this state ran on a partition count that does not divide 960 and is re-keyed by key groups of 960 first",
			"partition", env.Partition, "topic", o.Topic, "counts", o.chk.History())
	case o.chk.CleanupReady():
		c, ok := env.Store.(cleaner)
		if !ok {
			break
		}
		entries, groups, err := c.DropMovedGroups(env.State, env.Partition, n)
		if err != nil {
			return err
		}
		log.Info("start-up cleanup: dropped the state of the key groups this partition no longer owns (the keys that moved)",
			"partition", env.Partition, "topic", o.Topic, "partitions", n, "key_groups", groups, "entries", entries)
		o.chk.CleanedUp()
	}
	if o.chk.Dirty {
		// Now, before anything is read: a cleanup done is not done twice,
		// a window opened keeps its start.
		b := env.Store.NewBatch(env.State)
		defer b.Close()
		if err := b.PutTaskValue(env.Partition, PlacementKey, o.chk.Encode()); err != nil {
			return err
		}
		if err := b.Commit(); err != nil {
			return err
		}
		o.chk.Dirty = false
	}
	o.publish()
	return nil
}

// rekeyed reports whether the partition's state is known to be keyed by
// key groups of 960 (state.KeyGroupsKey).
func (o *Placement) rekeyed(env *Env) bool {
	v, err := env.Store.TaskValue(env.State, env.Partition, state.KeyGroupsKey)
	return err == nil && v != nil
}

func (o *Placement) logUndeclared() {
	o.env.Log.Info("the input's partition count changed and the source does not declare partition_hash = 'murmur2': nothing is deleted, the state of keys that moved stays on this partition, and windows still open on it may be published once more, with partial data",
		"partition", o.env.Partition, "topic", o.Topic, "counts", o.chk.History())
}

// publish shows the check on the gauge and the board.
func (o *Placement) publish() {
	o.gauge.Set(float64(o.chk.Verdict))
	if o.Board != nil {
		n := o.chk.Current()
		o.Board.Put(placement.Snapshot{Partition: o.env.Partition, Verdict: o.chk.Verdict, WellPlaced: o.chk.WellPlaced(),
			Counts: o.chk.History(), Transition: o.chk.Transition(), Owned: state.OwnedCount(o.env.Partition, n), Pos: o.pos})
	}
}

func (o *Placement) Process(ctx context.Context, b *Batch) (*Batch, error) {
	if b == nil || b.Data == nil || len(b.Recs) == 0 {
		return b, nil
	}
	o.ctx = ctx
	was := o.chk.Verdict
	if b.Data.N > 0 && o.chk.Verdict != placement.Misplaced {
		col := b.Data.Cols[o.Col]
		idx := o.chk.Sample(b.Data.N)
		rows := make([]placement.Row, len(idx))
		for j, i := range idx {
			rows[j].Offset = b.Recs[b.Src[i]].Offset
			if col.IsNull(i) {
				rows[j].Null = true
				continue
			}
			rows[j].Key = exec.PartitionKeyText(col, i, nil)
		}
		if err := o.chk.Judge(rows); err != nil {
			return nil, err
		}
	}
	o.pos = max(o.pos, b.Recs[len(b.Recs)-1].Offset+1)
	if err := o.chk.Tick(o.pos); err != nil {
		return nil, err
	}
	if was != placement.Misplaced && o.chk.Verdict == placement.Misplaced {
		o.env.Log.Error("a record sits where murmur2 would not have put it under any partition count this state ran under: placement is -1 for good, and the start-up cleanup will not run; if the source declares partition_hash = 'murmur2', the declaration is wrong (librdkafka clients: set partitioner=murmur2_random); rebuild the state once the producer is fixed",
			"partition", o.env.Partition, "topic", o.Topic, "counts", o.chk.History())
	}
	o.publish()
	return b, nil
}

// OnWatermark moves the transition window on with the task's position.
func (o *Placement) OnWatermark(ctx context.Context, wm Watermark) (*Batch, error) {
	o.ctx = ctx
	o.pos = max(o.pos, wm.Next)
	if err := o.chk.Tick(o.pos); err != nil {
		return nil, err
	}
	o.publish()
	return nil, nil
}

// Due asks for a commit when the window's time is up, so that an idle
// partition notes its log end (and closes the window) too.
func (o *Placement) Due(now time.Time) bool {
	c := o.chk
	return c.Open && c.NotedEnd < 0 && now.Sub(time.UnixMilli(c.OpenedAt)) >= c.Window
}

func (o *Placement) Commit(_ context.Context, c *Commit) error {
	if !o.chk.Dirty {
		return nil
	}
	o.chk.Dirty = false
	return c.State.PutTaskValue(o.env.Partition, PlacementKey, o.chk.Encode())
}

func (o *Placement) Close() {}

// allDivide reports whether every count divides 960.
func allDivide(counts []int) bool {
	for _, n := range counts {
		if !state.Divides(n) {
			return false
		}
	}
	return true
}
