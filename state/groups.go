package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Groups of a cached aggregation (one whose hot groups are held in memory
// within a budget, the rest only here) live under their own prefix, laid
// out (stream, window, key group, key): a window's groups are one
// contiguous range, so a window closes by iterating it in order, a window
// that expires goes with a range deletion per owned key group, and the
// windows present are found by skipping from one window to the next.
// The older layout (prefixAcc: key group first) stays for SESSION windows
// and merge stages, which restore whole at start.
//
// Both are kept per partition scope (scope.go); legacyGroup is the
// group layout as it was before scopes, migrated at a task's open.
const (
	prefixGroup = 'h'
	legacyGroup = 'g'
)

// GroupKey encodes (stream, window, key group, key).
func GroupKey(stream string, window int64, kg uint16, key []byte) []byte {
	return appendGroupKey(nil, stream, window, kg, key)
}

func appendGroupKey(dst []byte, stream string, window int64, kg uint16, key []byte) []byte {
	dst = append(dst, prefixGroup)
	dst = append(dst, stream...)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint64(dst, uint64(window)^(1<<63))
	dst = binary.BigEndian.AppendUint16(dst, kg)
	return append(dst, key...)
}

// decodeGroupKey splits a GroupKey of stream (prefix length pl).
func decodeGroupKey(k []byte, pl int) (window int64, kg uint16, key []byte, err error) {
	if len(k) < pl+10 {
		return 0, 0, nil, errCorruptKey
	}
	window = int64(binary.BigEndian.Uint64(k[pl:]) ^ (1 << 63))
	kg = binary.BigEndian.Uint16(k[pl+8:])
	return window, kg, k[pl+10:], nil
}

// GroupRef names one stored group.
type GroupRef struct {
	Window int64
	KG     uint16
	Key    []byte
}

// Pending holds the groups a cached aggregation evicted since its last
// commit: they are written in that commit (Batch.Absorb), so they stay
// atomic with the input offsets, and reads see them before the store.
type Pending struct {
	s      *Store
	stream string
	b      *pebble.Batch // indexed: reads through it see the store beneath
	kbuf   []byte
	// nextRun is the id of the next run of partials a commit ingests
	// (runs.go): past every run stored when the task opened (OpenRuns).
	nextRun  uint64
	runsOpen bool
	runsIn   map[int64]int // runs per window (MaxWindowRuns)
	// classicIn counts the classic partials committed per window since
	// the task opened or the window's last fold (runfold.go).
	classicIn map[int64]int
	// foldedIn is the partials each window's last fold wrote.
	foldedIn map[int64]int
	// maxRuns bounds a window's runs (0: MaxWindowRuns; LimitRuns).
	maxRuns int
	deltas  int // partials among the pending writes
}

// LimitRuns bounds each window's runs at n (at least 1) instead of
// MaxWindowRuns: a HOP window's close reads the runs of all its slices
// (each a window here), so they share the bound.
func (p *Pending) LimitRuns(n int) { p.maxRuns = max(n, 1) }

// WindowRuns is the bound on a window's runs: at it, the window's
// partials are folded into one run (runfold.go).
func (p *Pending) WindowRuns() int {
	n := MaxWindowRuns
	if p.maxRuns > 0 {
		n = p.maxRuns
	}
	if p.s.maxRuns > 0 {
		n = min(n, p.s.maxRuns)
	}
	return max(n, 2) // a fold leaves one run: at a bound of 1 every commit would fold again
}

// noteClassic counts a classic partial of window, when runs are open.
func (p *Pending) noteClassic(window int64) {
	if p.classicIn != nil {
		p.classicIn[window]++
	}
}

// NewPending starts an empty set of evicted groups of stream.
func (s *Store) NewPending(stream string) *Pending {
	return &Pending{s: s, stream: stream, b: s.db.NewIndexedBatch()}
}

// Put records an evicted group's encoded accumulators.
func (p *Pending) Put(window int64, kg uint16, key, val []byte) error {
	p.kbuf = appendGroupKey(p.kbuf[:0], p.stream, window, kg, key)
	return p.b.Set(p.kbuf, val, nil)
}

// Bytes is the memory the pending groups take.
func (p *Pending) Bytes() int { return p.b.Len() }

// Empty reports whether nothing is pending.
func (p *Pending) Empty() bool { return p.b.Count() == 0 }

// Each calls fn for every pending group of window, in key order.
func (p *Pending) Each(window int64, fn func(kg uint16, key, val []byte) error) error {
	pre := binary.BigEndian.AppendUint64(streamPrefix(prefixGroup, p.stream), uint64(window)^(1<<63))
	it, err := p.b.NewBatchOnlyIter(nil, &pebble.IterOptions{LowerBound: pre, UpperBound: bumped(pre)})
	if err != nil {
		return err
	}
	defer it.Close()
	pl := len(pre) - 8
	for it.First(); it.Valid(); it.Next() {
		_, kg, key, err := decodeGroupKey(it.Key(), pl)
		if err != nil {
			return err
		}
		if err := fn(kg, key, it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

// Close releases the pending batch.
func (p *Pending) Close() { _ = p.b.Close() }

// Load reads the stored accumulators of refs (pending ones first, then the
// store) in one pass: the refs are visited in key order with one iterator,
// so a batch's misses cost a sorted sweep, not a lookup per row. fn gets
// the index into refs of each group found; val is valid during the call.
func (p *Pending) Load(refs []GroupRef, fn func(i int, val []byte) error) error {
	if len(refs) == 0 {
		return nil
	}
	keys := make([][]byte, len(refs))
	order := make([]int, len(refs))
	for i, r := range refs {
		keys[i] = GroupKey(p.stream, r.Window, r.KG, r.Key)
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
	pre := streamPrefix(prefixGroup, p.stream)
	it, err := p.b.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: upper(pre)})
	if err != nil {
		return err
	}
	defer it.Close()
	for _, i := range order {
		// SeekPrefixGE consults the tables' bloom filters (the whole key is
		// the prefix), so a group never stored costs no block read.
		if it.SeekPrefixGE(keys[i]) && bytes.Equal(it.Key(), keys[i]) {
			if err := fn(i, it.Value()); err != nil {
				return err
			}
		}
	}
	return it.Error()
}

// ScanWindow calls fn for every stored group (pending ones included) of
// window whose key group is in groups (ascending), in (key group, key)
// order, seeking to each key group: the way a window that is not in
// memory closes; nil groups: every group of the window. key and val are
// valid during the call.
func (p *Pending) ScanWindow(window int64, groups []uint16) *WindowScan {
	return &WindowScan{p: p, window: window, groups: groups}
}

// WindowScan is ScanWindow's cursor: Next returns the groups one at a time.
type WindowScan struct {
	p      *Pending
	window int64
	groups []uint16
	deltas bool // the window's deltas (ScanDeltas), not its groups
	gi     int
	it     *pebble.Iterator
	pl     int
	err    error
	start  bool
}

// Next moves to the next group; false at the end or on error (Err).
func (w *WindowScan) Next() (kg uint16, key, val []byte, ok bool) {
	if w.err != nil {
		return 0, nil, nil, false
	}
	if w.it == nil {
		pre := binary.BigEndian.AppendUint64(streamPrefix(prefixGroup, w.p.stream), uint64(w.window)^(1<<63))
		w.pl = len(pre) - 8
		lo, hi := pre, bumped(pre)
		if w.deltas { // the deltas are the key groups [0x8000, 0xFFFF)
			lo = binary.BigEndian.AppendUint16(slices.Clone(pre), deltaKGBit)
			hi = binary.BigEndian.AppendUint16(slices.Clone(pre), NullGroup)
		}
		w.it, w.err = w.p.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if w.err != nil {
			return 0, nil, nil, false
		}
		w.start = true
	}
	if w.groups == nil {
		return w.nextAny()
	}
	for w.gi < len(w.groups) {
		g := w.groups[w.gi]
		if w.deltas {
			g = deltaKG(g)
		}
		var valid bool
		if w.start {
			valid = w.it.SeekGE(binary.BigEndian.AppendUint16(GroupKey(w.p.stream, w.window, 0, nil)[:w.pl+8], g))
			w.start = false
		} else {
			valid = w.it.Next()
		}
		if valid {
			kg, key, ok := w.entry()
			if !ok {
				return 0, nil, nil, false
			}
			if kg == g {
				return realKG(kg), key, w.it.Value(), true
			}
		}
		w.gi++
		w.start = true
	}
	return 0, nil, nil, false
}

// entry decodes the iterator's key: its stored key group and the group
// key (a delta's id stripped).
func (w *WindowScan) entry() (kg uint16, key []byte, ok bool) {
	_, kg, key, err := decodeGroupKey(w.it.Key(), w.pl)
	if err == nil && w.deltas && kg == runKG {
		return kg, nil, true // runs (runs.go) follow the deltas: no key group's
	}
	if err == nil && w.deltas {
		if len(key) < deltaIDLen {
			err = errCorruptKey
		}
		key = key[:max(len(key)-deltaIDLen, 0)]
	}
	if err != nil {
		w.err = err
		return 0, nil, false
	}
	return kg, key, true
}

// nextAny is Next over the whole window.
func (w *WindowScan) nextAny() (kg uint16, key, val []byte, ok bool) {
	var valid bool
	if w.start {
		valid, w.start = w.it.First(), false
	} else {
		valid = w.it.Next()
	}
	if !valid {
		return 0, nil, nil, false
	}
	if k := w.it.Key(); w.deltas && len(k) >= w.pl+10 && binary.BigEndian.Uint16(k[w.pl+8:]) == runKG {
		// The runs (runs.go) sit between the key groups' deltas and the
		// NULL key's; DeltaScan reads them.
		if !w.it.SeekGE(binary.BigEndian.AppendUint16(GroupKey(w.p.stream, w.window, 0, nil)[:w.pl+8], nullDeltaKG)) {
			return 0, nil, nil, false
		}
	}
	kg, key, ok = w.entry()
	if ok && !w.deltas && isDeltaKG(kg) {
		// The window's deltas sit between its groups and the NULL key's.
		if !w.it.SeekGE(binary.BigEndian.AppendUint16(GroupKey(w.p.stream, w.window, 0, nil)[:w.pl+8], NullGroup)) {
			return 0, nil, nil, false
		}
		kg, key, ok = w.entry()
	}
	if !ok {
		return 0, nil, nil, false
	}
	return realKG(kg), key, w.it.Value(), true
}

// Close releases the cursor; Err is its error.
func (w *WindowScan) Close() error {
	if w.it != nil {
		if err := w.it.Close(); err != nil && w.err == nil {
			w.err = err
		}
		w.it = nil
	}
	return w.err
}

// bumped is the smallest key after every key starting with pre (pre does
// not end in 0xff bytes only).
func bumped(pre []byte) []byte {
	u := slices.Clone(pre)
	for i := len(u) - 1; i >= 0; i-- {
		if u[i] != 0xff {
			u[i]++
			return u[:i+1]
		}
	}
	return nil
}

// GroupWindows lists, ascending, the windows of stream holding any stored
// group, skipping from each window to the next: cost per window, not per
// group. A task marks them as possibly holding its groups (lazy restore).
func (s *Store) GroupWindows(stream string) ([]int64, error) {
	pre := streamPrefix(prefixGroup, stream)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: upper(pre)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []int64
	for valid := it.First(); valid; {
		w, _, _, err := decodeGroupKey(it.Key(), len(pre))
		if err != nil {
			return nil, err
		}
		out = append(out, w)
		next := binary.BigEndian.AppendUint64(slices.Clone(pre), uint64(w)^(1<<63))
		next = bumped(next)
		if next == nil || len(next) <= len(pre) {
			break
		}
		valid = it.SeekGE(next)
	}
	return out, it.Error()
}

// Absorb moves the pending groups into this commit, before anything the
// commit adds after (a later put or deletion of the same group wins), and
// empties p.
func (b *Batch) Absorb(p *Pending) error {
	if p.Empty() {
		return nil
	}
	if err := b.b.Apply(p.b, nil); err != nil {
		return fmt.Errorf("state of %s: %w", b.stream, err)
	}
	p.b.Reset()
	p.deltas = 0
	return nil
}

// PutGroup stores a group of a cached aggregation.
func (b *Batch) PutGroup(window int64, kg uint16, key, val []byte) error {
	return b.b.Set(GroupKey(b.scope, window, kg, key), val, nil)
}

// DeleteGroup removes a group of a cached aggregation.
func (b *Batch) DeleteGroup(window int64, kg uint16, key []byte) error {
	return b.b.Delete(GroupKey(b.scope, window, kg, key), nil)
}

// DeleteWindowGroups removes every stored group (and delta) of window in
// the key groups given: a range deletion per key group, whatever their number;
// nil groups: the whole window, one range deletion.
func (b *Batch) DeleteWindowGroups(window int64, groups []uint16) error {
	if groups != nil {
		// The window's runs (runs.go) mix key groups: their entries of
		// these go one by one.
		if err := b.deleteRunEntries(window, groups); err != nil {
			return err
		}
	} else if b.runs != nil {
		b.runs.dropWindow(window)
	}
	if groups == nil {
		lo := binary.BigEndian.AppendUint64(streamPrefix(prefixGroup, b.scope), uint64(window)^(1<<63))
		return b.b.DeleteRange(lo, bumped(lo), nil)
	}
	for _, g := range groups {
		lo := GroupKey(b.scope, window, g, nil)
		hi := GroupKey(b.scope, window, g+1, nil)
		if g == 0xffff {
			hi = bumped(lo)
		}
		if err := b.b.DeleteRange(lo, hi, nil); err != nil {
			return err
		}
		// and the group's deltas (deltas.go)
		d := deltaKG(g)
		if err := b.b.DeleteRange(GroupKey(b.scope, window, d, nil), GroupKey(b.scope, window, d+1, nil), nil); err != nil {
			return err
		}
	}
	return nil
}

// MoveAccsToGroups rewrites a stream's groups in groups (nil: all) from
// the accumulator layout to the group layout in one batch (state written
// before the group cache existed); it reports how many moved.
func (s *Store) MoveAccsToGroups(stream string, groups []uint16) (int, error) {
	b := s.NewBatch(stream)
	defer b.Close()
	n := 0
	err := s.AccsOfGroups(stream, groups, func(kg uint16, key []byte, window int64, val []byte) error {
		n++
		if err := b.b.Delete(AccKey(stream, kg, key, window), nil); err != nil {
			return err
		}
		return b.PutGroup(window, kg, key, val)
	})
	if err != nil || n == 0 {
		return 0, err
	}
	return n, b.Commit()
}

// Group reads one stored group of a cached aggregation (nil when there is
// none): a point lookup.
func (s *Store) Group(stream string, window int64, kg uint16, key []byte) ([]byte, error) {
	return s.get(stream, GroupKey(stream, window, kg, key))
}
