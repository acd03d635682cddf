package exec

import (
	"encoding/binary"
	"slices"
)

// This file bounds the memory of a SESSION aggregation's sessions: the
// keys whose sessions were used least recently leave memory when the
// task's share is full (all of a key's sessions together), and live only
// in a SessionStore, as an entry per session under (key, start), beside
// an index of the sessions by end. A batch's rows of keys not in memory
// read those keys' sessions first, in one sorted pass (a seek per key);
// a watermark closes the sessions in memory, then reads the index up to
// where it has reached and closes the sessions it names a chunk of keys
// at a time, so a close never holds every session either. Nothing is
// loaded at start.

// SessionStore is where the sessions of keys not in memory live.
type SessionStore interface {
	// LoadSessions reads every stored session of each (key group, key)
	// of refs (Window ignored) in one sorted pass: found gets the index
	// into refs, the session's start and its entry (end, then
	// accumulators).
	LoadSessions(refs []StateRef, found func(i int, start int64, val []byte) error) error
	// Keep records a write for the next commit, seen by later reads: a
	// session's entry (Window: its start) or, with Ends, its index entry
	// (Window: its end); nil val deletes.
	Keep(ref StateRef, val []byte) error
	// Ending walks the index entries of sessions ending at or before end,
	// by end, as they stood when it was called.
	Ending(end int64) EndCursor
	// ForgetEnds deletes the index entries of sessions ending at or
	// before end, once every one of them has closed.
	ForgetEnds(end int64) error
	// Stored walks every stored session (with the writes kept so far),
	// a key's sessions together.
	Stored() SessionCursor
}

// SessionCursor walks stored sessions (SessionStore.Stored): val is the
// session's entry (end, then accumulators), valid until the next call.
type SessionCursor interface {
	Next() (kg uint16, key []byte, start int64, val []byte, ok bool)
	Close() error
}

// EndCursor walks a session index (SessionStore.Ending).
type EndCursor interface {
	Next() (end int64, kg uint16, key []byte, ok bool)
	Close() error
}

// UseSessionStore makes a SESSION aggregation keep at most the sessions
// EvictTo allows in memory, the rest in st. empty: st holds no session
// yet, so only keys this run writes there are ever read back.
func (a *Aggregator) UseSessionStore(st SessionStore, empty bool) {
	a.sessions.store = st
	if empty {
		a.sessions.written = &keyFilter{}
	}
}

// loadSessionMisses reads the stored sessions of the keys of b's rows
// from row from on (kept, with an event time) that are not in memory.
func (a *Aggregator) loadSessionMisses(keys []*Vec, ts *Vec, keep []bool, from, n int) error {
	ss := a.sessions
	var refs []StateRef
	seen := map[string]bool{}
	for i := from; i < n; i++ {
		if !keep[i] || ts.IsNull(i) {
			continue
		}
		key := a.rows.Row(i)
		if _, hot := ss.byKey[string(key)]; hot || seen[string(key)] {
			continue
		}
		seen[string(key)] = true
		if ss.written != nil && !ss.written.mayHold(key) {
			continue // never stored
		}
		var kg uint16
		if a.PK >= 0 {
			kg = a.rowGroup(keys[a.PK], i)
		}
		refs = append(refs, StateRef{KG: kg, Key: slices.Clone(key)})
	}
	return a.loadSessionKeys(refs)
}

// loadSessionKeys brings the stored sessions of refs' keys (none in
// memory) into memory, unchanged since stored.
func (a *Aggregator) loadSessionKeys(refs []StateRef) error {
	if len(refs) == 0 {
		return nil
	}
	return a.sessions.store.LoadSessions(refs, func(i int, start int64, val []byte) error {
		return a.restoreSession(StateRef{KG: refs[i].KG, Key: refs[i].Key, Window: start}, val)
	})
}

// evictSessions is EvictTo for sessions: a second-chance sweep over the
// keys in memory (in the map's order, which Go varies from one sweep to
// the next) that passes over keys used since it last came by and sends
// the others to the store, all of a key's sessions at once, the changed
// ones written.
func (a *Aggregator) evictSessions(max int) (meanBytes int, err error) {
	ss, t := a.sessions, a.Table
	total, written := 0, 0
	for pass := 0; pass < 2 && t.live > max; pass++ {
		for key, list := range ss.byKey {
			if t.live <= max {
				break
			}
			used := false
			for _, s := range list {
				used = used || t.ref[s.slot]
				t.ref[s.slot] = false
			}
			if used && pass == 0 {
				continue
			}
			for _, s := range list {
				switch {
				case t.marked[s.slot] || !s.stored:
					n, err := a.writeSession(s, ss.store.Keep, func(ref StateRef) error { return ss.store.Keep(ref, nil) })
					if err != nil {
						return 0, err
					}
					total += n
					written++
				case !s.indexed:
					if err := a.indexSession(s, ss.store.Keep); err != nil {
						return 0, err
					}
				}
				delete(ss.bySlot, s.slot)
				t.freeBare(s.slot)
			}
			delete(ss.byKey, key)
		}
	}
	if written == 0 {
		return 0, nil
	}
	return total / written, nil
}

// coldSessionChunks closes the sessions not in memory that wm has closed:
// it reads the index up to wm (less the allowed lateness), and for each
// chunk of keys it names that are not in memory, loads their sessions,
// emits the due ones and lets the rest go again (unchanged, so nothing is
// written). ok is false when none was due. Call it after the sessions in
// memory have closed (CloseSessions), so that the index it reads has
// their deletions.
func (a *Aggregator) coldSessionChunks(wm int64) (c Chunks, ok bool, err error) {
	ss := a.sessions
	upTo := wm - a.Lateness
	cur := ss.store.Ending(upTo)
	closed, scanned := false, 0
	finish := func(err error) error {
		if closed {
			return err
		}
		closed = true
		if cerr := cur.Close(); err == nil {
			err = cerr
		}
		if err == nil && scanned > 0 {
			// Every session ending by upTo has closed now (those in
			// memory before), and those it read that had not were
			// indexed again: the index up to there is done with, entries
			// left by state moved or cleaned up under it included.
			err = ss.store.ForgetEnds(upTo)
		}
		for key, list := range ss.byKey {
			if len(list) == 0 { // closed in memory, nothing stored
				delete(ss.byKey, key)
			}
			if err != nil || scanned == 0 {
				continue
			}
			// Sessions in memory indexed up to there (or perhaps there)
			// need an entry again: the next commit, or their eviction,
			// writes it.
			for _, s := range list {
				if s.indexed && s.indexedAt <= upTo {
					s.indexed = false
					ss.unindexed = append(ss.unindexed, s)
				}
			}
		}
		return err
	}
	// A pass reads the sessions of up to readKeys keys. Its open ones
	// leave memory again at once, and its due ones are handed on
	// chunkRows at a time (queue) from outside ss.byKey: between two
	// batches the watermark's early fire (EMIT EVERY) runs, and it takes
	// a key in memory to have every session there, and the pass's keys to
	// be in the store.
	var queue []*session
	readKeys := a.closeReadKeys()
	next := func() (*Batch, error) {
		for {
			if len(queue) > 0 {
				part := queue[:min(len(queue), chunkRows)]
				queue = queue[len(part):]
				b, err := a.closeSessions(part)
				for _, s := range part { // closeSessions leaves the key, empty
					if len(ss.byKey[s.key]) == 0 {
						delete(ss.byKey, s.key)
					}
				}
				if err != nil {
					return nil, finish(err)
				}
				return b, nil
			}
			if closed {
				return nil, nil
			}
			var refs []StateRef
			seen := map[string]bool{}
			for len(refs) < readKeys {
				_, kg, key, ok := cur.Next()
				if !ok {
					if err := finish(nil); err != nil {
						return nil, err
					}
					break
				}
				scanned++
				if _, hot := ss.byKey[string(key)]; hot || seen[string(key)] {
					continue
				}
				seen[string(key)] = true
				refs = append(refs, StateRef{KG: kg, Key: slices.Clone(key)})
			}
			if err := a.loadSessionKeys(refs); err != nil {
				return nil, finish(err)
			}
			var due, rest []*session
			for _, r := range refs {
				for _, s := range ss.byKey[string(r.Key)] {
					if s.end+a.Lateness <= wm {
						due = append(due, s)
					} else {
						rest = append(rest, s)
					}
				}
			}
			for _, s := range rest {
				// Stored as they are: they leave memory again, indexed
				// under their end (their entry up to here goes when the
				// read ends).
				if err := a.indexSession(s, ss.store.Keep); err != nil {
					return nil, finish(err)
				}
				delete(ss.bySlot, s.slot)
				a.Table.freeBare(s.slot)
			}
			for _, r := range refs { // not in memory again
				delete(ss.byKey, string(r.Key))
			}
			sortSessions(due)
			queue = due
		}
	}
	first, err := next()
	if err != nil || first == nil {
		return Chunks{}, false, err
	}
	return Chunks{First: first, More: next}, true, nil
}

// closeReadKeys is how many keys a cold close reads from the store at
// once: the index lists them in order of end, so spread over the whole key
// space, and one sorted pass over more of them lands more of its seeks in
// blocks it has just read (at 10^6 keys in 64 MB, 32,768 at once halved
// the close against 4,096). Their due sessions are in memory until handed
// on (4,096 a batch), beside the task's share: about a quarter of it more
// (sessionReadBytes a key), at least chunkRows keys and at most
// maxCloseKeys.
func (a *Aggregator) closeReadKeys() int {
	return max(chunkRows, min(maxCloseKeys, a.bufLimit/4/sessionReadBytes))
}

const (
	// maxCloseKeys bounds closeReadKeys.
	maxCloseKeys = 1 << 16
	// sessionReadBytes is about what a key's sessions read back take in
	// memory (dataflow counts 450 bytes a session beyond its key and
	// accumulators; most keys have one).
	sessionReadBytes = 512
)

// dueStored counts the stored sessions not in memory that ended at or
// before end (a close after a restart counts the ones due before it).
func (a *Aggregator) dueStored(end int64) (int, error) {
	ss := a.sessions
	cur := ss.store.Ending(end)
	n := 0
	for {
		_, _, key, ok := cur.Next()
		if !ok {
			break
		}
		if _, hot := ss.byKey[string(key)]; !hot {
			n++
		}
	}
	return n, cur.Close()
}

// OpenSessionChunks is every session wm has not closed, for an early fire:
// those in memory in one batch, then, a chunk at a time, the stored ones
// of keys not in memory (keys leave memory whole, so a key in memory has
// all its sessions there), read into a scratch table and let go again.
// ok is false when there is none.
func (a *Aggregator) OpenSessionChunks(wm int64, hasWM bool) (c Chunks, ok bool, err error) {
	mem, err := a.EmitOpenChunks(wm, hasWM)
	if err != nil {
		return Chunks{}, false, err
	}
	ss := a.sessions
	if ss.store == nil {
		if len(mem) == 0 {
			return Chunks{}, false, nil
		}
		return mem[0], true, nil
	}
	tab, err := a.newTable()
	if err != nil {
		return Chunks{}, false, err
	}
	cur := ss.store.Stored()
	done := false
	finish := func(err error) error {
		if done {
			return err
		}
		done = true
		if cerr := cur.Close(); err == nil {
			err = cerr
		}
		return err
	}
	next := func() (*Batch, error) {
		var slots []uint32
		var bounds [][2]int64
		var keyOf [][]byte // by slot of tab
		for !done && len(slots) < chunkRows {
			kg, key, start, val, ok := cur.Next()
			if !ok {
				if err := finish(nil); err != nil {
					return nil, err
				}
				break
			}
			if _, hot := ss.byKey[string(key)]; hot {
				continue
			}
			if len(val) < 8 {
				return nil, finish(errSessionState)
			}
			end := int64(binary.BigEndian.Uint64(val))
			if hasWM && end+a.Lateness <= wm {
				continue // closed: its deletion waits for the commit
			}
			s := tab.allocBare(start)
			tab.Meta(s).KG = kg
			if err := tab.Merge(s, val[8:]); err != nil {
				return nil, finish(err)
			}
			slots = append(slots, s)
			bounds = append(bounds, [2]int64{start, end})
			if int(s) >= len(keyOf) {
				keyOf = append(keyOf, make([][]byte, int(s)+1-len(keyOf))...)
			}
			keyOf[s] = slices.Clone(key)
		}
		if len(slots) == 0 {
			return nil, nil
		}
		b, err := a.emitRows(tab, slots, func(s uint32) []byte { return keyOf[s] },
			func(i int) (int64, int64) { return bounds[i][0], bounds[i][1] })
		for _, s := range slots {
			tab.freeBare(s)
		}
		if err != nil {
			return nil, finish(err)
		}
		return b, nil
	}
	if len(mem) > 0 {
		return Chunks{First: mem[0].First, More: next}, true, nil
	}
	first, err := next()
	if err != nil || first == nil {
		return Chunks{}, false, err
	}
	return Chunks{First: first, More: next}, true, nil
}
