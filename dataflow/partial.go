package dataflow

import (
	"context"
	"fmt"
	"time"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/window"
)

// PartialAgg is the pre-aggregation side of a combine hop, one per source
// partition: it folds the partition's rows into per-(window, key) partial
// accumulators (per (slice, key) for HOP: a slice is the greatest common
// divisor of slide and size, and the merge side builds each window from
// its slices); when the partition's watermark passes a window's (slice's)
// end it ships the window's partials to the internal topic keyed (murmur2) by the
// group key and drops the window; on idleness or a FLUSH it also ships the
// windows still open, whole as they stand, and keeps them. Then a marker
// goes to every internal partition. Each partial names its source
// partition, and the merge stage keeps the latest partial of each source
// per group: a ship repeated after a crash replaces the one before instead
// of counting twice.
//
// Each partial also says what it covers of its group (PartialCover: the
// highest source offset folded in, the rows new since its last ship), so
// the merge stage can tell a partial it receives after the window closed
// that is a copy of what the pane holds from one carrying rows the pane
// never had (latepartials.go).
//
// Its restart position is the first offset of a row in a window not
// shipped yet (Commit.Restart), so a restart re-reads exactly what it had
// not handed on; the shipped watermark is recorded (Commit.Closed) and
// rows of windows shipped before are dropped on the re-read, as a replay,
// not counted as late.
type PartialAgg struct {
	Plan       *planner.Plan
	Topic      string
	Partitions int // of the internal topic
	// EmitEvery (EMIT EVERY) also ships the open windows, whole as they
	// stand and kept, at this interval: the merge side's early fires then
	// see every partition's rows so far.
	EmitEvery time.Duration

	lastEarly time.Time
	env       *Env
	agg       *exec.Aggregator
	shipped   int64 // windows ending at or before it were shipped
	hasShip   bool
	minOff    map[int64]int64 // per window held: first offset of a row in it
	applied   int64           // offsets below it were read before a restart: a replay
	next      int64           // the next offset to read
	out       *shipCounts     // turbine_combine_*_out
	marks     []int64         // scratch: the source offset of each row consumed
}

var (
	_ Op     = (*PartialAgg)(nil)
	_ Ticker = (*PartialAgg)(nil)
)

// Due asks for a watermark call when an early ship is due.
func (c *PartialAgg) Due(now time.Time) bool {
	return c.EmitEvery > 0 && now.Sub(c.lastEarly) >= c.EmitEvery
}

func (c *PartialAgg) Open(_ context.Context, env *Env) error {
	c.env = env
	c.out = newShipCounts(env, c.Partitions)
	env.Metrics.LateRows.WithLabelValues(env.Name, "dropped") // at 0 from the start
	a, err := planner.NewAggregator(c.Plan, 0)
	if err != nil {
		return err
	}
	c.agg = a
	c.minOff = map[int64]int64{}
	m := env.Restored
	c.shipped, c.hasShip = m.Closed, m.HasClosed
	c.applied = max(m.Applied, m.Offset)
	// Rows read again after a restart are not new: a partial counts those
	// it had not read before (PartialCover.Rows), as late rows count.
	a.FreshFrom = c.applied
	c.next = m.Offset
	return nil
}

func (c *PartialAgg) Process(_ context.Context, b *Batch) (*Batch, error) {
	data := b.Data
	ts := data.Cols[c.Plan.Window.TimeIdx]
	// Rows are held per slice (the window itself for TUMBLE), and a slice
	// is shipped once the watermark passes its end: a row of a slice
	// shipped before is late here, even when a later HOP window holding
	// that slice is still open (a second ship would replace the first).
	g := c.Plan.Window.Spec.SliceSize()
	// Offsets grow within a partition, so a slice's first offset is that
	// of the first row seen in it: only a row in another slice than the
	// row before needs a look in the map.
	lastW, haveW := int64(0), false
	var lateRows []int
	keep := make([]bool, data.N)
	kept := 0
	for i, idx := range b.Src[:data.N] {
		if ts.IsNull(i) {
			keep[i] = true // Consume reports it
			kept++
			continue
		}
		w := window.FloorTo(ts.I[i], g)
		if c.hasShip && w+g <= c.shipped {
			lateRows = append(lateRows, i)
			continue
		}
		keep[i] = true
		kept++
		if !haveW || w != lastW {
			if _, ok := c.minOff[w]; !ok {
				c.minOff[w] = b.Recs[idx].Offset
			}
			lastW, haveW = w, true
		}
	}
	c.next = b.Recs[len(b.Recs)-1].Offset + 1
	rows := data
	var kepts []int // row of data of each row of rows (nil: the same)
	if kept < data.N {
		rows = data.Select(keep, kept)
		for i, k := range keep {
			if k {
				kepts = append(kepts, i)
			}
		}
	}
	// Each row's mark is its source offset: a partial then says which of
	// the partition's rows it covers (PartialCover).
	marks := c.marks[:0]
	for i := range rows.N {
		row := i
		if kepts != nil {
			row = kepts[i]
		}
		marks = append(marks, b.Recs[b.Src[row]].Offset)
	}
	c.marks = marks
	late, err := c.agg.ConsumeMarked(rows, marks, 0, false)
	if err != nil {
		return nil, fmt.Errorf("%s/%d: %w", b.Recs[0].Topic, b.Partition, err)
	}
	for _, row := range late {
		if kepts != nil {
			row = kepts[row]
		}
		lateRows = append(lateRows, row)
	}
	real := 0
	for _, row := range lateRows {
		if !c.env.Reread(b.Recs[b.Src[row]].Offset) { // not a re-read of a shipped slice
			real++
		}
	}
	if real > 0 {
		c.env.Metrics.LateRows.WithLabelValues(c.env.Name, "dropped").Add(float64(real))
		c.env.Metrics.late.note(c.env, int(real), "dropped")
		c.env.Counts.Late.Add(int64(real))
	}
	return nil, nil
}

// OnWatermark ships the partials of the windows the watermark has passed
// (everything held when the partition is idle or flushed), then a marker.
//
// After a restart it ships nothing, and sends no marker, until it has read
// again what it had read before: a window shipped then (and maybe merged)
// is shipped again only whole, and no marker passes a window whose partial
// is still being rebuilt.
func (c *PartialAgg) OnWatermark(ctx context.Context, wm Watermark) (*Batch, error) {
	if c.next < c.applied {
		return nil, nil // replaying
	}
	open := wm.Flush || wm.Idle
	if c.EmitEvery > 0 && wm.Now.Sub(c.lastEarly) >= c.EmitEvery {
		c.lastEarly, open = wm.Now, true
	}
	parts, closed := c.agg.Ship(wm.WM, wm.Has, open)
	for _, part := range parts {
		r := &kafkaio.Record{Topic: c.Topic, Key: part.Key, Value: EncodePartial(c.env.Partition, part.Window, part.Enc),
			Headers:   []kafkaio.Header{{Key: CoverHeader, Value: EncodeCover(PartialCover{Last: part.Last, Rows: part.Rows})}},
			Partition: state.PartitionFor(part.Key, c.Partitions)}
		c.out.count(r)
		c.env.Out.Produce(ctx, r)
	}
	c.out.flush()
	for _, w := range closed {
		delete(c.minOff, w)
	}
	if wm.Has && (!c.hasShip || wm.WM > c.shipped) {
		c.shipped, c.hasShip = wm.WM, true
	}
	SendMarkers(ctx, c.env, c.Topic, c.Partitions, wm)
	c.out.markers.Add(float64(c.Partitions))
	return nil, nil
}

func (c *PartialAgg) Commit(_ context.Context, cm *Commit) error {
	cm.Applied = max(c.applied, cm.Offset)
	for _, off := range c.minOff {
		cm.Restart(off)
	}
	cm.Closed, cm.HasClosed = c.shipped, c.hasShip
	return nil
}

func (c *PartialAgg) Close() {}
