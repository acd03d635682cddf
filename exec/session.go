package exec

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"
)

// SESSION windows: a row at t opens the session [t, t+gap) of its key;
// sessions of one key that overlap merge into one, whose accumulators are
// the merge of both. A session closes when the watermark passes its end
// plus the allowed lateness. Each open session is one slot of the group
// table outside its key tables (a session's bounds move as it grows, so it
// is found through its key's list instead); its state entry is keyed by
// (key, session start) and holds the end before the accumulators.

type session struct {
	key        string
	start, end int64
	slot       uint32
	kg         uint16
	stored     bool  // in the state store, under storedAt
	storedAt   int64 // the start it was written under
	// indexed: cached, the store's index of sessions by end has an entry
	// for it at indexedAt, at or before its end (sessioncache.go);
	// math.MinInt64 when read back from the store (where, is not known).
	indexed   bool
	indexedAt int64
}

type sessions struct {
	byKey  map[string][]*session
	bySlot map[uint32]*session
	dels   []StateRef // state entries of sessions merged away or moved
	// unindexed are sessions in memory whose index entry a close deleted
	// (sessioncache.go): the next commit indexes those still there.
	unindexed []*session
	// store holds the keys not in memory (nil: every key is;
	// sessioncache.go). written, when the store held no session at
	// start, holds the keys written to it since: a key it does not hold
	// has nothing stored, and is not read.
	store   SessionStore
	written *keyFilter
}

func newSessions() *sessions {
	return &sessions{byKey: map[string][]*session{}, bySlot: map[uint32]*session{}}
}

// consumeSessions is Consume for SESSION windows. Rows are placed one at a
// time, in input order, since each may extend or merge sessions. A session
// merged away during the batch keeps its slot until the batch has been
// folded in: rows already pointed at it are redirected to the survivor.
func (a *Aggregator) consumeSessions(b *Batch, ts *Vec, keep []bool, kept int, wm int64, hasWM bool) (late []int, err error) {
	n := b.N
	keys, err := evalAll(b, a.Keys)
	if err != nil {
		return nil, err
	}
	a.rows.Encode(keys, n)
	gap, ss := a.Window.Gap, a.sessions
	redirect := map[uint32]uint32{}
	var freed []uint32
	slots := a.slots[:0]
	loaded := false
	for i := 0; i < n; i++ {
		if !keep[i] {
			continue
		}
		if ts.IsNull(i) {
			keep[i] = false
			late = append(late, i)
			continue
		}
		t := ts.I[i]
		key := a.rows.Row(i)
		list, hot := ss.byKey[string(key)]
		if !hot && ss.store != nil && !loaded {
			// The batch's first key not in memory: the stored sessions of
			// every such key from here on are read, in one pass.
			loaded = true
			if err := a.loadSessionMisses(keys, ts, keep, i, n); err != nil {
				return nil, err
			}
			list = ss.byKey[string(key)]
		}
		start, end := t, t+gap
		var hit []*session
		for _, s := range list {
			if s.start < end && start < s.end {
				hit = append(hit, s)
				start, end = min(start, s.start), max(end, s.end)
			}
		}
		if hasWM && end+a.Lateness <= wm {
			keep[i] = false
			late = append(late, i)
			continue
		}
		var target *session
		if len(hit) == 0 {
			target = &session{key: string(key), start: start, end: end}
			target.slot = a.Table.allocBare(start)
			if a.PK >= 0 {
				target.kg = a.rowGroup(keys[a.PK], i)
			}
			a.Table.Meta(target.slot).KG = target.kg
			ss.byKey[target.key] = append(list, target)
			ss.bySlot[target.slot] = target
		} else {
			target = hit[0]
			for _, other := range hit[1:] {
				a.encBuf = a.Table.Encode(a.encBuf[:0], other.slot)
				if err := a.Table.Merge(target.slot, a.encBuf); err != nil {
					return nil, err
				}
				redirect[other.slot] = target.slot
				freed = append(freed, other.slot)
				if err := ss.retire(other); err != nil {
					return nil, err
				}
				list = ss.byKey[target.key]
				ss.byKey[target.key] = slices.DeleteFunc(list, func(x *session) bool { return x == other })
			}
			target.start, target.end = start, end
			a.Table.Meta(target.slot).Window = start
			a.Table.markDirty(target.slot)
		}
		slots = append(slots, target.slot)
	}
	for j, s := range slots {
		for {
			r, ok := redirect[s]
			if !ok {
				break
			}
			s = r
		}
		slots[j] = s
	}
	a.slots = slots
	if len(slots) > 0 {
		if len(slots) < n {
			b = b.Select(keep, len(slots))
		}
		if err := a.update(b, slots); err != nil {
			return nil, err
		}
	}
	for _, s := range freed {
		a.Table.freeBare(s)
	}
	return late, nil
}

// retire forgets a session merged into another or closed, deleting its
// state entry. Cached, the deletion goes to the store at once (a later
// read of the key must not find the session); its index entry stays: the
// close that reaches it finds nothing there, then deletes the index up
// to where it read.
func (ss *sessions) retire(s *session) error {
	delete(ss.bySlot, s.slot)
	if !s.stored {
		return nil
	}
	ref := StateRef{KG: s.kg, Key: []byte(s.key), Window: s.storedAt}
	if ss.store == nil {
		ss.dels = append(ss.dels, ref)
		return nil
	}
	return ss.store.Keep(ref, nil)
}

// dueSessions lists the sessions wm has closed, by end then key.
func (a *Aggregator) dueSessions(wm int64) []*session {
	var due []*session
	for _, list := range a.sessions.byKey {
		for _, s := range list {
			if s.end+a.Lateness <= wm {
				due = append(due, s)
			}
		}
	}
	sortSessions(due)
	return due
}

func sortSessions(ss []*session) {
	sort.Slice(ss, func(i, j int) bool {
		if ss[i].end != ss[j].end {
			return ss[i].end < ss[j].end
		}
		if ss[i].key != ss[j].key {
			return ss[i].key < ss[j].key
		}
		return ss[i].start < ss[j].start
	})
}

// emitSessions builds the rows of the given sessions as they stand.
func (a *Aggregator) emitSessions(list []*session) (*Batch, error) {
	slots := make([]uint32, len(list))
	for i, s := range list {
		slots[i] = s.slot
	}
	return a.emitRows(a.Table, slots, func(s uint32) []byte { return []byte(a.sessions.bySlot[s].key) },
		func(i int) (int64, int64) { return list[i].start, list[i].end })
}

// CloseSessions emits the sessions wm has closed and forgets them; their
// state entries are deleted at the next Changes.
func (a *Aggregator) CloseSessions(wm int64) (*Batch, error) {
	return a.closeSessions(a.dueSessions(wm))
}

// closeSessions emits the sessions due (sorted) and forgets them.
func (a *Aggregator) closeSessions(due []*session) (*Batch, error) {
	if len(due) == 0 {
		return nil, nil
	}
	b, err := a.emitSessions(due)
	if err != nil {
		return nil, err
	}
	ss := a.sessions
	for _, s := range due {
		if err := ss.retire(s); err != nil {
			return nil, err
		}
		ss.byKey[s.key] = slices.DeleteFunc(ss.byKey[s.key], func(x *session) bool { return x == s })
		// Cached, a key left with no session stays, empty, until the
		// close has read the index (coldSessionChunks): known to have
		// nothing in the store, its entries there are not read.
		if len(ss.byKey[s.key]) == 0 && ss.store == nil {
			delete(ss.byKey, s.key)
		}
		a.Table.freeBare(s.slot)
	}
	return b, nil
}

// openSessions lists every open session (early fires, bounded queries).
func (a *Aggregator) openSessions() []*session {
	var out []*session
	for _, list := range a.sessions.byKey {
		out = append(out, list...)
	}
	sortSessions(out)
	return out
}

// sessionChanges is Changes for sessions: deletes of entries merged away
// or moved, then each changed session under (key, start) with its end.
func (a *Aggregator) sessionChanges(put func(ref StateRef, val []byte) error, del func(ref StateRef) error) error {
	ss := a.sessions
	for _, ref := range ss.dels {
		if err := del(ref); err != nil {
			return err
		}
	}
	ss.dels = ss.dels[:0]
	for _, slot := range a.Table.Dirty() {
		s := ss.bySlot[slot]
		if s == nil {
			continue
		}
		if _, err := a.writeSession(s, put, del); err != nil {
			return err
		}
	}
	for _, s := range ss.unindexed {
		if ss.bySlot[s.slot] == s && !s.indexed {
			if err := a.indexSession(s, put); err != nil {
				return err
			}
		}
	}
	ss.unindexed = ss.unindexed[:0]
	return nil
}

// writeSession writes session s as it stands (put, del): its entry under
// its start, the one under the start it was stored with deleted when the
// start moved; cached, also an index entry under its end when it has none.
// A session's index entry may lie before its end (it was written when
// the session ended sooner): a close that reaches it reads the session,
// finds it open and indexes it again (sessioncache.go), so a session
// that grows at every commit costs one write per commit, not two.
func (a *Aggregator) writeSession(s *session, put func(ref StateRef, val []byte) error, del func(ref StateRef) error) (int, error) {
	ref := StateRef{KG: s.kg, Key: []byte(s.key)}
	if s.stored && s.storedAt != s.start {
		ref.Window = s.storedAt
		if err := del(ref); err != nil {
			return 0, err
		}
	}
	val := binary.BigEndian.AppendUint64(a.encBuf[:0], uint64(s.end))
	val = a.Table.Encode(val, s.slot)
	a.encBuf = val
	ref.Window = s.start
	if err := put(ref, val); err != nil {
		return 0, err
	}
	if f := a.sessions.written; f != nil && !s.stored {
		f.add(ref.Key)
	}
	s.stored, s.storedAt = true, s.start
	if a.sessions.store != nil && !s.indexed {
		if err := a.indexSession(s, put); err != nil {
			return 0, err
		}
	}
	return len(val) + len(s.key), nil
}

// indexSession writes s's index entry under its end.
func (a *Aggregator) indexSession(s *session, put func(ref StateRef, val []byte) error) error {
	ref := StateRef{KG: s.kg, Key: []byte(s.key), Window: s.end, Ends: true}
	if err := put(ref, binary.BigEndian.AppendUint64(nil, uint64(s.start))); err != nil {
		return err
	}
	s.indexed, s.indexedAt = true, s.end
	return nil
}

var errSessionState = errors.New("exec: corrupt session state")

// restoreSession loads one session read back from state.
func (a *Aggregator) restoreSession(ref StateRef, val []byte) error {
	if len(val) < 8 {
		return errSessionState
	}
	s := &session{key: string(ref.Key), start: ref.Window, end: int64(binary.BigEndian.Uint64(val)), kg: ref.KG,
		stored: true, storedAt: ref.Window, indexed: true, indexedAt: math.MinInt64}
	s.slot = a.Table.allocBare(s.start)
	a.Table.Meta(s.slot).KG = s.kg
	ss := a.sessions
	ss.byKey[s.key] = append(ss.byKey[s.key], s)
	ss.bySlot[s.slot] = s
	return a.Table.Merge(s.slot, val[8:])
}
