package dataflow

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
)

// A combine's merge stage drops a partial that reaches it after its window
// closed; whether that partial is late data or a copy depends on what it
// covers. A source partition ships a window whole before the marker that
// lets the merge close it, so the pane holds every row of that source
// partition's window up to the highest source offset the merge stage had
// merged from it (covered). A partial covering nothing past that (its
// PartialCover.Last) is a copy of what the pane holds: shipped again by a
// pre-aggregation that restarted (at-least-once: it replays from its last
// commit), or a window it had shipped open and ships again. One that covers
// a row past it carries rows the pane never had: they are late rows, counted
// as a local plan counts its own (late_rows, turbine_late_rows_total; a
// combine takes no late_data_topic, so they are dropped).
//
// The merge stage remembers, per window (slice for HOP) and source
// partition, the highest offset it merged: for the open windows, and for
// the last closedCoverKept closed ones (a copy comes soon after the close,
// from a pre-aggregation catching up after a restart). A partial of a
// window closed and forgotten before (or closed before the state kept
// this) is taken for a copy, as all were before.
//
// Both travel so that a process of the previous release, in the same app
// during a rolling upgrade, is not disturbed: what a partial covers is a
// record header (CoverHeader), the value keeps the previous release's form;
// the coverage is a task value of its own (coverKey), and the previous
// release reads task values by name only (its changelog restore and rescale
// copy the ones they do not know as they are). A partial without the
// header covers, for all the merge stage can tell, every row of its source
// partition's window (coversAll): a later partial of that window from that
// source is taken for a copy. Coverage written before a previous-release
// process last ran the task lags what it merged; under exactly-once no
// partial comes again after its commit, so only an at-least-once copy during
// a rolling upgrade can then be taken for late rows.

// closedCoverKept is how many closed windows' coverage a merge stage keeps.
const closedCoverKept = 128

// coverKey names the coverage in the task's state.
const coverKey = "combine-covered"

// coverage is what a merge stage has merged of each source partition, per
// window: the highest source offset.
type coverage struct {
	bySource map[int64]map[int32]int64 // window start → source → offset
	// forgotten: windows closed at or before this watermark are no longer
	// remembered.
	forgotten int64
	changed   bool
}

// openCoverage reads the coverage kept with the task's state. State that
// has none (written before it was kept) forgets every window closed so far.
func (h *HashAgg) openCoverage() error {
	h.cover = coverage{bySource: map[int64]map[int32]int64{}, forgotten: h.wm}
	if !h.hasWM {
		h.cover.forgotten = minWatermark
	}
	v, err := h.env.Store.TaskValue(h.env.State, h.env.Partition, coverKey)
	if err != nil || v == nil {
		return err
	}
	bad := fmt.Errorf("state of %s/%d: corrupt coverage of the combine's partials", h.env.State, h.env.Partition)
	f, n := binary.Varint(v)
	if n <= 0 {
		return bad
	}
	h.cover.forgotten, v = f, v[n:]
	for len(v) > 0 {
		w, a := binary.Varint(v)
		if a <= 0 {
			return bad
		}
		k, b := binary.Uvarint(v[a:])
		if b <= 0 {
			return bad
		}
		v = v[a+b:]
		srcs := make(map[int32]int64, k)
		for range k {
			q, c := binary.Uvarint(v)
			if c <= 0 {
				return bad
			}
			off, d := binary.Varint(v[c:])
			if d <= 0 {
				return bad
			}
			srcs[int32(q)], v = off, v[c+d:]
		}
		h.cover.bySource[w] = srcs
	}
	return nil
}

// coversAll is the coverage of a partial that does not say what it
// covers: every offset.
const coversAll = math.MaxInt64

// minWatermark is below every watermark.
const minWatermark = -1 << 63

// covers notes that the merge stage merged source's rows of window up to
// offset last.
func (h *HashAgg) covers(window int64, source int32, last int64) {
	srcs := h.cover.bySource[window]
	if srcs == nil {
		srcs = map[int32]int64{}
		h.cover.bySource[window] = srcs
	}
	if old, ok := srcs[source]; !ok || last > old {
		srcs[source] = last
		h.cover.changed = true
	}
}

// lateRows is how many rows the pane never had that a partial arriving
// after its window closed carries: 0 for a copy.
func (h *HashAgg) lateRows(sp *shipped) uint64 {
	if !sp.marked || h.closedWindowEnd(sp.window) <= h.cover.forgotten {
		return 0 // nothing to tell it by: taken for a copy
	}
	if last, ok := h.cover.bySource[sp.window][sp.source]; ok && sp.cover.Last <= last {
		return 0
	}
	// Later copies of it are copies.
	h.covers(sp.window, sp.source, sp.cover.Last)
	return max(sp.cover.Rows, 1)
}

// closedWindowEnd is the watermark that closes (every window holding)
// window start w at the merge stage.
func (h *HashAgg) closedWindowEnd(w int64) int64 {
	return h.Plan.Window.Spec.LastWindowEnd(w) + h.agg.Lateness
}

// commitCoverage forgets all but the last closedCoverKept closed windows
// and records the coverage with the task's state when it changed.
func (h *HashAgg) commitCoverage(c *Commit) error {
	var closed []int64
	for w := range h.cover.bySource {
		if h.hasWM && h.closedWindowEnd(w) <= h.wm {
			closed = append(closed, w)
		}
	}
	if len(closed) > closedCoverKept {
		slices.Sort(closed)
		for _, w := range closed[:len(closed)-closedCoverKept] {
			delete(h.cover.bySource, w)
			h.cover.forgotten = max(h.cover.forgotten, h.closedWindowEnd(w))
		}
		h.cover.changed = true
	}
	if !h.cover.changed {
		return nil
	}
	v := binary.AppendVarint(nil, h.cover.forgotten)
	for _, w := range slices.Sorted(maps.Keys(h.cover.bySource)) {
		srcs := h.cover.bySource[w]
		v = binary.AppendVarint(v, w)
		v = binary.AppendUvarint(v, uint64(len(srcs)))
		for _, q := range slices.Sorted(maps.Keys(srcs)) {
			v = binary.AppendUvarint(v, uint64(q))
			v = binary.AppendVarint(v, srcs[q])
		}
	}
	h.cover.changed = false
	return c.State.PutTaskValue(h.env.Partition, coverKey, v)
}
