package dataflow

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/state"
)

// A combine's merge stage in the bounded group cache. Its group is not an
// accumulator but the latest partial of each source partition (a source's
// next partial replaces its last: HashAgg.bySource), so it is never written
// blind: a partial for a group not in memory reads the group back first
// (loadSources), in one sorted pass per batch.
//
// Each stored group is kept twice: as the accumulator entry an uncached
// merge stage (and the previous release) writes and reads,
// AccKey(scope, key group, key, window), and as a copy in the group layout,
// GroupKey(scope, window, key group, key), which the cache reads: a
// window's groups in key order for its close, and a group by its whole key
// for a miss. The accumulator entries keep state readable by a node of the
// previous release that takes a partition over during a rolling upgrade;
// such a node leaves the copies behind as they were, so a task whose last
// commit did not keep them (mergeCopiesName) rebuilds them at start.
// The price is a second write of each stored group.

// mergeCopiesName is the task value holding the restart offset of the last
// commit that kept a merge stage's group-layout copies.
const mergeCopiesName = "merge_copies"

// sourcesOverhead is slotOverhead's addition for a merge stage's group:
// its entry in HashAgg.bySource and the map of its sources.
const sourcesOverhead = 200

// openMergeCache starts the cache of a merge stage: nothing is loaded; the
// group-layout copies are rebuilt from the accumulator entries when the
// last commit did not keep them.
func (h *HashAgg) openMergeCache(gs groupStore) error {
	env := h.env
	pending := gs.NewPending(h.scope())
	fail := func(err error) error {
		pending.Close()
		return fmt.Errorf("restore state of %s: %w", env.State, err)
	}
	kept, err := h.indexKept(mergeCopiesName)
	if err != nil {
		return fail(err)
	}
	var cold []int64
	if !kept {
		windows := map[int64]bool{}
		n, err := pending.RebuildIndex(func(start int64, val []byte) (int64, []byte, error) {
			windows[start] = true
			return start, val, nil
		})
		if err != nil {
			return fail(err)
		}
		if n > 0 {
			env.Log.Info("copied the stored groups of the merge stage to the cached layout (state last written without the copies)", "partition", env.Partition, "groups", n)
		}
		cold = slices.Sorted(maps.Keys(windows))
	} else if cold, err = gs.GroupWindows(h.scope()); err != nil {
		return fail(err)
	}
	if err := h.startCache(pending, cold, slotOverhead+sourcesOverhead); err != nil {
		return err
	}
	h.agg.ReadMisses()
	h.cache.sources, h.cache.merged = h.bySource, h.agg.MergedEncoding
	return nil
}

// evictMerged is Evict of a merge stage's changed group: its sources are
// stored, twice (see the top of this file).
func (g *groupCache) evictMerged(ref exec.StateRef, val []byte) error {
	if srcs := g.sources[groupID(ref.Window, ref.Key)]; srcs != nil {
		val = encodeSources(srcs)
		g.srcBytes += int64(len(val))
		g.srcN++
	}
	if err := g.pending.Put(ref.Window, ref.KG, ref.Key, val); err != nil {
		return err
	}
	return g.pending.PutAcc(ref.KG, ref.Key, ref.Window, val)
}

// Forget drops a merge stage's sources of a group that left memory
// (exec.GroupForgetter): Evict stored them if they changed.
func (g *groupCache) Forget(ref exec.StateRef) {
	if g.sources != nil {
		delete(g.sources, groupID(ref.Window, ref.Key))
	}
}

// loadSources reads back, in one sorted pass, the stored groups of a
// cached merge stage that a batch's partials (on time) update and memory
// does not hold: a partial replaces only its own source's, so the group's
// other sources must be there first.
func (h *HashAgg) loadSources(parts []shipped) error {
	var refs []state.GroupRef
	seen := map[string]bool{}
	for _, sp := range parts {
		if sp.late || h.agg.Hot(sp.window, sp.key) || !h.agg.MayBeStored(sp.window, sp.key) {
			continue
		}
		if id := groupID(sp.window, sp.key); !seen[id] {
			seen[id] = true
			refs = append(refs, state.GroupRef{Window: sp.window, KG: h.agg.KeyGroupOf(sp.key), Key: sp.key})
		}
	}
	return h.cache.pending.Load(refs, func(i int, val []byte) error {
		r := refs[i]
		return h.restoreMerged(exec.StateRef{KG: r.KG, Key: r.Key, Window: r.Window}, val)
	})
}

// restoreMerged brings a merge stage's stored group back into memory: its
// sources' latest partials, or (stored before partials named their
// source) its accumulators.
func (h *HashAgg) restoreMerged(ref exec.StateRef, val []byte) error {
	if len(val) == 0 || val[0] != sourcesMark {
		return h.agg.Restore(ref, val)
	}
	srcs, err := decodeSources(val)
	if err != nil {
		return err
	}
	h.bySource[groupID(ref.Window, ref.Key)] = srcs
	return h.agg.RestorePartials(ref, sortedPartials(srcs))
}

// dropClosedSources forgets the sources of a merge stage's groups whose
// windows have all closed.
func (h *HashAgg) dropClosedSources() {
	spec := h.Plan.Window.Spec
	for id := range h.bySource {
		if w := int64(binary.BigEndian.Uint64([]byte(id[:8]))); spec.LastWindowEnd(w)+h.agg.Lateness <= h.wm {
			delete(h.bySource, id)
		}
	}
}

// sourcesOf is what a merge stage stores of a group: its sources' latest
// partials (val, its accumulators, otherwise).
func (h *HashAgg) sourcesOf(ref exec.StateRef, val []byte) []byte {
	if !h.Merge {
		return val
	}
	if srcs := h.bySource[groupID(ref.Window, ref.Key)]; srcs != nil {
		return encodeSources(srcs)
	}
	return val
}

// commitMerged is commitWindowed of a merge stage: the pending writes
// (evictions, a rebuild of the copies) as they were made, then the changed
// groups, both ways (see the top of this file), then the deletions of the
// expired windows' groups, both ways, and the mark that the copies are
// kept. (Not AbsorbSorted: its ordered merge carries the group layout's
// point writes only.)
func (h *HashAgg) commitMerged(c *Commit, dels []exec.StateRef, cold []int64) error {
	if h.hasWM {
		h.dropClosedSources()
	}
	if err := h.commitCoverage(c); err != nil {
		return err
	}
	// The accumulator entries of the windows that closed cold are found
	// from their copies, before the commit deletes those.
	var coldAccs []exec.StateRef
	for _, w := range cold {
		cur := h.cache.pending.ScanWindow(w, h.cache.groups)
		for {
			kg, key, _, ok := cur.Next()
			if !ok {
				break
			}
			coldAccs = append(coldAccs, exec.StateRef{KG: kg, Key: slices.Clone(key), Window: w})
		}
		if err := cur.Close(); err != nil {
			return fmt.Errorf("state of %s: %w", h.env.State, err)
		}
	}
	if err := c.State.Absorb(h.cache.pending); err != nil {
		return err
	}
	if err := h.agg.Changes(func(ref exec.StateRef, val []byte) error {
		val = h.sourcesOf(ref, val)
		if err := c.State.PutGroup(ref.Window, ref.KG, ref.Key, val); err != nil {
			return err
		}
		return c.State.PutAcc(ref.KG, ref.Key, ref.Window, val)
	}, func(ref exec.StateRef) error {
		if err := c.State.DeleteGroup(ref.Window, ref.KG, ref.Key); err != nil {
			return err
		}
		return c.State.DeleteAcc(ref.KG, ref.Key, ref.Window)
	}); err != nil {
		return err
	}
	for _, refs := range [][]exec.StateRef{dels, coldAccs} {
		for _, ref := range refs {
			if err := c.State.DeleteAcc(ref.KG, ref.Key, ref.Window); err != nil {
				return err
			}
		}
	}
	if err := h.deleteExpired(c, dels, cold); err != nil {
		return err
	}
	if err := h.markIndexKept(c, mergeCopiesName); err != nil {
		return err
	}
	h.env.Metrics.OpenGroups.WithLabelValues(h.env.Name, strconv.Itoa(int(h.env.Partition))).Set(float64(h.agg.Table.Len()))
	return nil
}

// mergedCursor reads a merge stage's stored groups as accumulators: each
// the merge of its sources' latest partials.
type mergedCursor struct {
	exec.GroupCursor
	merged func(dst []byte, encs [][]byte) ([]byte, error)
	buf    []byte
	err    error
}

func (c *mergedCursor) Next() (kg uint16, key, val []byte, ok bool) {
	if c.err != nil {
		return 0, nil, nil, false
	}
	kg, key, val, ok = c.GroupCursor.Next()
	if !ok || len(val) == 0 || val[0] != sourcesMark {
		return kg, key, val, ok // a group stored before partials named their source
	}
	srcs, err := decodeSources(val)
	if err == nil {
		c.buf, err = c.merged(c.buf[:0], sortedPartials(srcs))
	}
	if err != nil {
		c.err = fmt.Errorf("a merge stage's stored group: %w", err)
		return 0, nil, nil, false
	}
	return kg, key, c.buf, true
}

func (c *mergedCursor) Close() error {
	if err := c.GroupCursor.Close(); err != nil {
		return err
	}
	return c.err
}
