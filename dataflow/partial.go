package dataflow

import (
	"context"
	"fmt"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/window"
)

// PartialAgg is the pre-aggregation side of a combine hop, one per source
// partition: it folds the partition's rows into per-(window, key) partial
// accumulators; when the partition's watermark passes a window's end (on
// idleness or a FLUSH: every window it holds) it ships the window's
// partials to the internal topic keyed (murmur2) by the group key, then a
// marker to every internal partition. The stream's merge stage behind it
// merges them.
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

	env     *Env
	agg     *exec.Aggregator
	shipped int64 // windows ending at or before it were shipped
	hasShip bool
	minOff  map[int64]int64 // per window held: first offset of a row in it
	applied int64           // offsets below it were read before a restart: a replay
}

var _ Op = (*PartialAgg)(nil)

func (c *PartialAgg) Open(_ context.Context, env *Env) error {
	c.env = env
	a, err := NewAggregator(c.Plan, 0, 0)
	if err != nil {
		return err
	}
	c.agg = a
	c.minOff = map[int64]int64{}
	m := env.Restored
	c.shipped, c.hasShip = m.Closed, m.HasClosed
	c.applied = max(m.Applied, m.Offset)
	return nil
}

func (c *PartialAgg) Process(_ context.Context, b *Batch) (*Batch, error) {
	data := b.Data
	ts := data.Cols[c.Plan.Window.TimeIdx]
	size := c.Plan.Window.Spec.Size
	// Offsets grow within a partition, so a window's first offset is that
	// of the first row seen in it: only a row in another window than the
	// row before needs a look in the map.
	lastW, haveW := int64(0), false
	for i, idx := range b.Src[:data.N] {
		if ts.IsNull(i) {
			continue
		}
		if w := window.FloorTo(ts.I[i], size); !haveW || w != lastW {
			if _, ok := c.minOff[w]; !ok {
				c.minOff[w] = b.Recs[idx].Offset
			}
			lastW, haveW = w, true
		}
	}
	late, err := c.agg.Consume(data, c.shipped, c.hasShip)
	if err != nil {
		return nil, fmt.Errorf("%s/%d: %w", b.Recs[0].Topic, b.Partition, err)
	}
	real := 0
	for _, row := range late {
		if b.Recs[b.Src[row]].Offset >= c.applied { // not a re-read of a shipped window
			real++
		}
	}
	if real > 0 {
		c.env.Metrics.LateRows.WithLabelValues(c.env.Name, "dropped").Add(float64(real))
		c.env.Stats.Late.Add(int64(real))
	}
	return nil, nil
}

// OnWatermark ships the partials of the windows the watermark has passed
// (everything held when the partition is idle or flushed), then a marker.
func (c *PartialAgg) OnWatermark(ctx context.Context, wm Watermark) (*Batch, error) {
	all := wm.Flush || wm.Idle
	if wm.Has || all {
		for _, part := range c.agg.ShipDue(wm.WM, all) {
			c.env.Out.Produce(ctx, &kafkaio.Record{Topic: c.Topic, Key: part.Key, Value: EncodePartial(part.Window, part.Enc),
				Partition: state.PartitionFor(part.Key, c.Partitions)})
			delete(c.minOff, part.Window)
		}
		if wm.Has && (!c.hasShip || wm.WM > c.shipped) {
			c.shipped, c.hasShip = wm.WM, true
		}
	}
	SendMarkers(ctx, c.env, c.Topic, c.Partitions, wm)
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
