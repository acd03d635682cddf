package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Sessions of a cached SESSION aggregation (exec's session cache). Each
// session is an accumulator entry, AccKey(scope, key group, key, start),
// holding its end and accumulators: a key's sessions are one contiguous
// range, so the sessions of a key not in memory are read with one seek
// (LoadAccs). An index beside them, in the group layout under the
// session's end (GroupKey(scope, end, key group, key), value: its
// start), lists the sessions by end: a watermark's close reads the index
// up to where it has reached (Ends) instead of every session.
//
// The accumulator entries are what an earlier version wrote (it kept
// every session in memory, restored whole at start), so state moves
// between versions both ways; the index is rebuilt from them when a
// commit without it may have come last (RebuildIndex).

// PutAcc records an evicted session's entry.
func (p *Pending) PutAcc(kg uint16, key []byte, window int64, val []byte) error {
	return p.b.Set(AccKey(p.stream, kg, key, window), val, nil)
}

// DeleteAcc records the deletion of a session's entry.
func (p *Pending) DeleteAcc(kg uint16, key []byte, window int64) error {
	return p.b.Delete(AccKey(p.stream, kg, key, window), nil)
}

// DeleteGroup records the deletion of a group (a session's index entry).
func (p *Pending) DeleteGroup(window int64, kg uint16, key []byte) error {
	p.kbuf = appendGroupKey(p.kbuf[:0], p.stream, window, kg, key)
	return p.b.Delete(p.kbuf, nil)
}

// DeleteEnds records the deletion of every group of the windows at or
// before upTo: a SESSION aggregation's index once every session ending by
// then has closed (whatever entries were left behind go with it).
func (p *Pending) DeleteEnds(upTo int64) error {
	return p.b.DeleteRange(streamPrefix(prefixGroup, p.stream), GroupKey(p.stream, upTo+1, 0, nil), nil)
}

// AnyAccs reports whether any accumulator entry is stored (pending ones
// included).
func (p *Pending) AnyAccs() (bool, error) {
	pre := streamPrefix(prefixAcc, p.stream)
	it, err := p.b.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: upper(pre)})
	if err != nil {
		return false, err
	}
	any := it.First()
	return any, it.Close()
}

// accPrefix is the prefix of every accumulator of (kg, key).
func accPrefix(stream string, kg uint16, key []byte) []byte {
	k := AccKey(stream, kg, key, 0)
	return k[:len(k)-8]
}

// LoadAccs reads every stored accumulator (pending ones first, then the
// store) of each (key group, key) of refs (their Window is ignored), in
// one pass: the keys are visited in key order with one iterator, a seek
// each. fn gets the index into refs and each entry's window, in window
// order; val is valid during the call.
func (p *Pending) LoadAccs(refs []GroupRef, fn func(i int, window int64, val []byte) error) error {
	if len(refs) == 0 {
		return nil
	}
	pres := make([][]byte, len(refs))
	order := make([]int, len(refs))
	for i, r := range refs {
		pres[i] = accPrefix(p.stream, r.KG, r.Key)
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(pres[a], pres[b]) })
	it, err := p.b.NewIter(nil)
	if err != nil {
		return err
	}
	defer it.Close()
	for _, i := range order {
		// Bounded to the key: stepping past its last entry would walk
		// every deleted one after it (a close deletes the sessions it
		// reads, in no key order).
		kp := pres[i]
		it.SetBounds(kp, bumped(kp))
		for valid := it.First(); valid; valid = it.Next() {
			k := it.Key()
			if len(k) != len(kp)+8 {
				return fmt.Errorf("state of %s: %w", p.stream, errCorruptKey)
			}
			w := int64(binary.BigEndian.Uint64(k[len(kp):]) ^ (1 << 63))
			if err := fn(i, w, it.Value()); err != nil {
				return err
			}
		}
	}
	return it.Error()
}

// pendingScan steps through the keys of [lo, hi), pending writes
// included, opening its iterator at the first step: what EndScan and
// AccScan share.
type pendingScan struct {
	p      *Pending
	lo, hi []byte
	it     *pebble.Iterator
	err    error
	done   bool
}

// step moves to the next key; false at the end or on error (close
// returns it).
func (s *pendingScan) step() bool {
	if s.err != nil || s.done {
		return false
	}
	var valid bool
	if s.it == nil {
		if s.it, s.err = s.p.b.NewIter(&pebble.IterOptions{LowerBound: s.lo, UpperBound: s.hi}); s.err != nil {
			return false
		}
		valid = s.it.First()
	} else {
		valid = s.it.Next()
	}
	s.done = !valid
	return valid
}

func (s *pendingScan) close() error {
	if s.it != nil {
		if err := s.it.Close(); err != nil && s.err == nil {
			s.err = err
		}
		s.it = nil
	}
	s.done = true
	return s.err
}

// Accs walks every accumulator entry (pending ones included) in key order:
// a key's sessions one after another. The cursor sees the pending writes
// made before it was opened, not those after.
func (p *Pending) Accs() *AccScan {
	pre := streamPrefix(prefixAcc, p.stream)
	return &AccScan{pendingScan{p: p, lo: pre, hi: upper(pre)}}
}

// AccScan is Accs's cursor.
type AccScan struct{ s pendingScan }

// Next is the next entry: its key group, key, window (a session's start)
// and value; false at the end or on error (Close returns it). key and val
// are valid until the next call.
func (a *AccScan) Next() (kg uint16, key []byte, window int64, val []byte, ok bool) {
	if !a.s.step() {
		return 0, nil, 0, nil, false
	}
	if kg, key, window, a.s.err = decodeAccKey(a.s.p.stream, a.s.it.Key()); a.s.err != nil {
		return 0, nil, 0, nil, false
	}
	return kg, key, window, a.s.it.Value(), true
}

// Close releases the cursor and returns its error.
func (a *AccScan) Close() error { return a.s.close() }

// Ends walks the groups of every window at or before upTo (pending ones
// included), in (window, key group, key) order: a cached SESSION
// aggregation's index of sessions by end. The cursor sees the pending
// writes made before it was opened, not those after.
func (p *Pending) Ends(upTo int64) *EndScan {
	pre := streamPrefix(prefixGroup, p.stream)
	hi := upper(pre)
	if upTo < 1<<63-1 {
		hi = GroupKey(p.stream, upTo+1, 0, nil)
	}
	return &EndScan{pendingScan{p: p, lo: pre, hi: hi}}
}

// EndScan is Ends's cursor.
type EndScan struct{ s pendingScan }

// Next is the next index entry: the window (a session's end), its key
// group and key; false at the end or on error (Close returns it).
func (e *EndScan) Next() (window int64, kg uint16, key []byte, ok bool) {
	if !e.s.step() {
		return 0, 0, nil, false
	}
	if window, kg, key, e.s.err = decodeGroupKey(e.s.it.Key(), len(e.s.lo)); e.s.err != nil {
		return 0, 0, nil, false
	}
	return window, kg, key, true
}

// Close releases the cursor and returns its error.
func (e *EndScan) Close() error { return e.s.close() }

// RebuildIndex rewrites the index of the accumulator entries in the group
// layout from the entries stored, as pending writes (the next commit
// writes them, so they reach the changelog with it): every group-layout
// entry is deleted, and one is put for each accumulator entry, under the
// window and with the value entry returns for its start and value. It
// returns how many entries it indexed. A task runs it at start when the
// last commit may have come from a version (or a task) that kept no index:
// a SESSION aggregation's index of sessions by end, or a merge stage's
// copy of its groups by window (dataflow).
func (p *Pending) RebuildIndex(entry func(start int64, val []byte) (window int64, v []byte, err error)) (int, error) {
	// The whole index goes in one range deletion (not read first).
	gpre := streamPrefix(prefixGroup, p.stream)
	if err := p.b.DeleteRange(gpre, upper(gpre), nil); err != nil {
		return 0, err
	}
	pre := streamPrefix(prefixAcc, p.stream)
	it, err := p.s.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: upper(pre)})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		kg, key, start, err := decodeAccKey(p.stream, it.Key())
		if err != nil {
			return n, err
		}
		w, v, err := entry(start, it.Value())
		if err != nil {
			return n, err
		}
		if err := p.Put(w, kg, key, v); err != nil {
			return n, err
		}
		n++
	}
	return n, it.Error()
}
