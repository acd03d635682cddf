package exec

import (
	"slices"
	"sort"
)

// This file is the life cycle of windowed groups: which windows a
// watermark closes, how a closed window's rows are built (from its slices),
// which slices no window needs any more, and what state must be written.

// DueWindows lists, ascending, the starts of the windows that a watermark
// move from prev (hasPrev false: none before) to wm closes, among windows
// that hold any group: a window closes when wm reaches its end plus the
// allowed lateness. Candidates come from the slices present, so a large
// jump of the watermark costs nothing for the empty windows it passes.
func (a *Aggregator) DueWindows(prev int64, hasPrev bool, wm int64) []int64 {
	if a.Window == nil || a.sessions != nil {
		return nil
	}
	return a.windowsOfSlices(func(end, _ int64) bool {
		closeAt := end + a.Lateness
		return closeAt <= wm && (!hasPrev || closeAt > prev)
	})
}

// windowsOfSlices lists, ascending and once each, the starts of the
// windows that contain a slice present in the table and for which keep
// (given the window's end and that slice) holds.
func (a *Aggregator) windowsOfSlices(keep func(end, slice int64) bool) []int64 {
	spec := a.Window
	step := spec.Slide
	if step == 0 {
		step = spec.Size
	}
	seen := map[int64]bool{}
	var out []int64
	for _, sl := range a.slicesPresent() {
		// windows containing slice sl: ends from its first to its last
		for end := spec.FirstWindowEnd(sl); end <= spec.LastWindowEnd(sl); end += step {
			if w := end - spec.Size; !seen[w] && keep(end, sl) {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	slices.Sort(out)
	return out
}

// slicesPresent lists the slices (windows for TUMBLE) holding groups in
// memory or, for cold ones, perhaps only in the store.
func (a *Aggregator) slicesPresent() []int64 {
	out := make([]int64, 0, len(a.Table.windows)+len(a.cold))
	for sl := range a.Table.windows {
		out = append(out, sl)
	}
	for sl := range a.cold {
		if a.Table.windows[sl] == nil {
			out = append(out, sl)
		}
	}
	return out
}

// Chunks is one window's rows: First, then what More yields until nil
// (nil More: First is all). A cold window comes a chunk at a time, so
// closing it never holds all its rows.
type Chunks struct {
	First *Batch
	More  func() (*Batch, error)
}

// Each calls fn with every chunk in turn, reading them to the end.
func (c Chunks) Each(fn func(*Batch)) error {
	fn(c.First)
	for c.More != nil {
		b, err := c.More()
		if err != nil || b == nil {
			return err
		}
		fn(b)
	}
	return nil
}

// all materialises every chunk (callers that want whole windows).
func all(cs []Chunks) ([]*Batch, error) {
	var out []*Batch
	for _, c := range cs {
		if err := c.Each(func(b *Batch) { out = append(out, b) }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// WindowRows is window w's rows as they stand now: one batch, or a cold
// window's chunks read as More is called (ok false: it holds no group
// here).
func (a *Aggregator) WindowRows(w int64) (c Chunks, ok bool, err error) {
	return a.windowChunks(w)
}

func (a *Aggregator) windowChunks(w int64) (Chunks, bool, error) {
	first, more, err := a.WindowChunks(w)
	return Chunks{First: first, More: more}, first != nil, err
}

// CloseDue emits every window (or session) that a watermark move from
// prev (hasPrev false: none before) to wm closes, in order of end.
//
// After a restart, restored is true and prev is the watermark restored
// with the state: windows due by then were emitted before the stop, unless
// the state still holds a group that only they needed. A window's close
// and the removal of the slices only it needed are written in one commit,
// so such a group proves the close never happened: those windows are
// emitted too, and counted as recovered (timers that came due while the
// stream was down). A window closed before the stop is never emitted
// again, even when slices it shares with windows still open survive (a
// HOP window re-closed from those would carry a wrong, smaller pane).
func (a *Aggregator) CloseDue(prev int64, hasPrev bool, wm int64, restored bool) (out []*Batch, recovered int, err error) {
	cs, recovered, err := a.CloseDueChunks(prev, hasPrev, wm, restored)
	if err != nil {
		return nil, 0, err
	}
	out, err = all(cs)
	return out, recovered, err
}

// CloseDueChunks is CloseDue with each window's rows as Chunks.
func (a *Aggregator) CloseDueChunks(prev int64, hasPrev bool, wm int64, restored bool) (out []Chunks, recovered int, err error) {
	if a.sessions != nil {
		// Sessions are deleted when they close: one still held was not closed.
		due := a.dueSessions(wm)
		for _, s := range due {
			if restored && hasPrev && s.end+a.Lateness <= prev {
				recovered++
			}
		}
		b, err := a.CloseSessions(wm)
		if err != nil {
			return nil, 0, err
		}
		if b != nil {
			out = append(out, Chunks{First: b})
		}
		if a.sessions.store == nil {
			return out, recovered, nil
		}
		// Then the sessions of keys not in memory, read through the
		// index (after the ones in memory: it must see their deletions).
		if restored && hasPrev {
			n, err := a.dueStored(prev - a.Lateness)
			if err != nil {
				return nil, 0, err
			}
			recovered += n
		}
		c, ok, err := a.coldSessionChunks(wm)
		if err != nil {
			return nil, 0, err
		}
		if ok {
			out = append(out, c)
		}
		return out, recovered, nil
	}
	if a.Window == nil {
		return nil, 0, nil
	}
	spec := a.Window
	due := a.windowsOfSlices(func(end, slice int64) bool {
		closeAt := end + a.Lateness
		if closeAt > wm {
			return false
		}
		if !hasPrev || closeAt > prev {
			return true
		}
		// Due before the restart: still pending only if this slice is one
		// the window's close would have removed. The slices present are
		// this task's own (its state is scoped by partition): another
		// partition's groups never keep one here.
		return restored && spec.LastWindowEnd(slice) == end
	})
	for _, w := range due {
		c, ok, err := a.windowChunks(w)
		if err != nil {
			return nil, 0, err
		}
		if !ok { // a cold window none of whose groups are this task's
			continue
		}
		if hasPrev && w+spec.Size+a.Lateness <= prev {
			recovered++
		}
		out = append(out, c)
	}
	return out, recovered, nil
}

// EmitWindow builds the rows of window w (start w) as it stands now. For a
// tumbling window that is its one slice; a hopping window's slices are
// merged per key first.
func (a *Aggregator) EmitWindow(w int64) (*Batch, error) {
	spec := a.Window
	end := w + spec.Size
	if a.emitTab == nil {
		return a.emit(a.Table, a.Table.WindowSlots(w), w, end)
	}
	t := a.emitTab
	for _, sl := range spec.SlicesOfWindow(w) {
		g := a.Table.windows[sl]
		if g == nil {
			continue
		}
		for _, s := range g.slots {
			m := a.Table.Meta(s)
			dst := t.Slot(w, a.Table.Key(s), m.KG)
			a.encBuf = a.Table.Encode(a.encBuf[:0], s)
			if err := t.Merge(dst, a.encBuf); err != nil {
				return nil, err
			}
		}
	}
	b, err := a.emit(t, t.WindowSlots(w), w, end)
	t.CloseWindow(w)
	return b, err
}

// EmitGroups builds the rows of the given slots of an unwindowed
// aggregation (an upsert stream emits its changed groups).
func (a *Aggregator) EmitGroups(slots []uint32) (*Batch, error) {
	return a.emit(a.Table, slots, 0, 0)
}

// EmitAll builds the rows of every group: of every window holding any, in
// window order, or of every group of an unwindowed aggregation (a bounded
// query's result).
func (a *Aggregator) EmitAll() ([]*Batch, error) {
	if a.sessions != nil {
		b, err := a.emitSessions(a.openSessions())
		return []*Batch{b}, err
	}
	if a.Window == nil {
		b, err := a.EmitGroups(a.Table.AllSlots())
		return []*Batch{b}, err
	}
	var out []*Batch
	for _, w := range a.OpenWindows(0, false) {
		b, err := a.EmitWindow(w)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// EmitOpenChunks builds the current rows of every window (or session, in
// memory) wm has not closed, each window's as Chunks.
func (a *Aggregator) EmitOpenChunks(wm int64, hasWM bool) ([]Chunks, error) {
	if a.sessions != nil {
		var open []*session
		for _, s := range a.openSessions() {
			if !hasWM || s.end+a.Lateness > wm {
				open = append(open, s)
			}
		}
		if len(open) == 0 {
			return nil, nil
		}
		b, err := a.emitSessions(open)
		return []Chunks{{First: b}}, err
	}
	var out []Chunks
	for _, w := range a.OpenWindows(wm, hasWM) {
		c, ok, err := a.windowChunks(w)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// OpenWindows lists, ascending, the windows holding any group that wm
// has not closed (for early fires).
func (a *Aggregator) OpenWindows(wm int64, hasWM bool) []int64 {
	if a.Window == nil || a.sessions != nil {
		return nil
	}
	return a.windowsOfSlices(func(end, _ int64) bool { return !hasWM || end+a.Lateness > wm })
}

// StateRef names one group's entry in the state store.
type StateRef struct {
	KG     uint16
	Key    []byte
	Window int64
	// Partial: the value is a blind group's partial accumulator, to be
	// stored beside what the store holds of the group and merged with it
	// when read (cache.go), not in its place.
	Partial bool
	// Ends: the entry of a cached SESSION aggregation's index of
	// sessions by end (Window is the end; sessioncache.go), not a group.
	Ends bool
}

// Expire drops the slices that no open window needs once the watermark is
// wm, and returns the state entries to delete (those written before).
func (a *Aggregator) Expire(wm int64) []StateRef {
	dels, _ := a.ExpireCold(wm)
	return dels
}

// ExpireCold is Expire that also returns the expired slices that were
// cold: all their stored groups are to be deleted, in memory or not.
func (a *Aggregator) ExpireCold(wm int64) (dels []StateRef, cold []int64) {
	if a.Window == nil || a.sessions != nil {
		return nil, nil
	}
	var expired []int64
	for _, sl := range a.slicesPresent() {
		if a.Window.LastWindowEnd(sl)+a.Lateness <= wm {
			expired = append(expired, sl)
		}
	}
	sort.Slice(expired, func(i, j int) bool { return expired[i] < expired[j] })
	for _, sl := range expired {
		if a.cold[sl] {
			delete(a.cold, sl)
			delete(a.evicted, sl)
			cold = append(cold, sl)
			a.Table.CloseWindow(sl)
			continue
		}
		for _, s := range a.Table.windows[sl].slots {
			if m := a.Table.Meta(s); m.Stored {
				dels = append(dels, StateRef{KG: m.KG, Key: slices.Clone(a.Table.Key(s)), Window: sl})
			}
		}
		a.Table.CloseWindow(sl)
	}
	return dels, cold
}

// Changes lists the groups changed since the last call with their encoded
// accumulators, and marks them stored: the caller writes them to state
// (put) and deletes entries that moved or merged away (del).
func (a *Aggregator) Changes(put func(ref StateRef, val []byte) error, del func(ref StateRef) error) error {
	if a.sessions != nil {
		return a.sessionChanges(put, del)
	}
	if err := a.flushBlind(put); err != nil {
		return err
	}
	var gone []uint32
	for _, s := range a.Table.Dirty() {
		m := a.Table.Meta(s)
		a.encBuf = a.Table.Encode(a.encBuf[:0], s)
		if err := put(StateRef{KG: m.KG, Key: a.Table.Key(s), Window: m.Window, Partial: m.Blind}, a.encBuf); err != nil {
			return err
		}
		m.Stored = true
		if m.Blind {
			// Its rows are stored now, as a partial: the slot leaves
			// memory, or the next commit would store them again. The key
			// coming back makes a new blind slot, which costs no read.
			gone = append(gone, s)
		}
	}
	a.Table.evictMany(gone)
	return nil
}

// Restore loads one group's accumulator read back from state.
func (a *Aggregator) Restore(ref StateRef, val []byte) error {
	if a.sessions != nil {
		return a.restoreSession(ref, val)
	}
	s := a.Table.Slot(ref.Window, ref.Key, ref.KG)
	a.Table.Meta(s).Stored = true
	return a.Table.Merge(s, val)
}

// MergePartial folds a partial accumulator shipped by a combine hop into
// the group (window, key), marking it changed.
func (a *Aggregator) MergePartial(window int64, key []byte, enc []byte) error {
	s, isNew := a.Table.Lookup(window, key)
	if isNew {
		// Partials are placed by their group key: so is the state.
		a.Table.Meta(s).KG = a.keyGroup(key)
	}
	if err := a.Table.Merge(s, enc); err != nil {
		if isNew {
			a.Table.CloseWindowSlot(s)
		}
		return err
	}
	a.Table.markDirty(s)
	return nil
}

// Partial is one group's accumulators as a combine hop ships them.
type Partial struct {
	Window int64
	Key    []byte // encoded group key (AppendKey)
	Enc    []byte // GroupTable.Encode
	// Marked (rows consumed with ConsumeMarked): Last is the highest mark
	// folded into the group, Rows the rows folded since it was last
	// shipped.
	Marked bool
	Rows   uint64
	Last   int64
}

// ShipDue removes the windows that end (plus lateness) at or before wm and
// returns their groups' partial accumulators, in window order: the
// pre-aggregation side of a combine hop. A HOP aggregation holds slices,
// and ships each slice once the watermark passes the slice's end: no row
// on time can reach it after that, and the merge side builds every
// window from its slices. all ships every window, due or
// not (a partition going idle hands over what it holds).
func (a *Aggregator) ShipDue(wm int64, all bool) []Partial {
	var out []Partial
	g := a.Window.SliceSize()
	for _, w := range a.Table.windowStarts() {
		if !all && w+g+a.Lateness > wm {
			continue
		}
		for _, s := range a.Table.WindowSlots(w) {
			out = append(out, Partial{Window: w, Key: slices.Clone(a.Table.Key(s)), Enc: a.Table.Encode(nil, s)})
		}
		a.Table.CloseWindow(w)
	}
	return out
}

// Ship is ShipDue for a pre-aggregation whose receiver keeps the latest
// partial of each source (ReplacePartial): the windows due by wm (hasWM)
// are shipped and removed (closed lists them); with open, the windows not
// due yet are shipped too, whole as they stand, and kept, so a later ship
// of the same window replaces this one.
func (a *Aggregator) Ship(wm int64, hasWM, open bool) (out []Partial, closed []int64) {
	g := a.Window.SliceSize()
	for _, w := range a.Table.windowStarts() {
		due := hasWM && w+g+a.Lateness <= wm
		if !due && !open {
			continue
		}
		for _, s := range a.Table.WindowSlots(w) {
			p := Partial{Window: w, Key: slices.Clone(a.Table.Key(s)), Enc: a.Table.Encode(nil, s)}
			a.markShipped(&p, s, !due)
			out = append(out, p)
		}
		if due {
			a.Table.CloseWindow(w)
			closed = append(closed, w)
		}
	}
	return out, closed
}

// RestorePartials loads a group of a merge stage from the latest partial
// of each source, read back from state.
func (a *Aggregator) RestorePartials(ref StateRef, encs [][]byte) error {
	s := a.Table.Slot(ref.Window, ref.Key, ref.KG)
	a.Table.Meta(s).Stored = true
	for _, enc := range encs {
		if err := a.Table.Merge(s, enc); err != nil {
			return err
		}
	}
	return nil
}

// SetPartials sets group (window, key) to the merge of encs, replacing
// whatever it held: a merge stage that keeps each source's latest partial
// recomputes the group from them when one is replaced.
func (a *Aggregator) SetPartials(window int64, key []byte, encs [][]byte) error {
	s, isNew := a.Table.Lookup(window, key)
	if isNew {
		a.Table.Meta(s).KG = a.keyGroup(key)
	} else {
		for _, f := range a.Table.Aggs {
			f.Reset(s)
		}
	}
	for _, enc := range encs {
		if err := a.Table.Merge(s, enc); err != nil {
			if isNew {
				a.Table.CloseWindowSlot(s)
			}
			return err
		}
	}
	a.Table.markDirty(s)
	return nil
}
