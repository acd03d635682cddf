package dataflow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/state"
)

// A SESSION aggregation's sessions in the bounded cache (exec's
// sessioncache.go): the ones of keys not in memory are in Pebble as the
// accumulator entries an uncached task writes too, with an index of them
// by end beside (state's sessions.go), both written in the task's commits.

// sessionIndexName is the task value holding the restart offset of the
// last commit that kept the session index: at start, a different offset
// means a commit without the index (an earlier version, or a task run
// without the cache) may have come last, so the index is rebuilt.
const sessionIndexName = "session_index"

var _ exec.SessionStore = (*groupCache)(nil)

func (g *groupCache) LoadSessions(refs []exec.StateRef, found func(i int, start int64, val []byte) error) error {
	rs := make([]state.GroupRef, len(refs))
	for i, r := range refs {
		rs[i] = state.GroupRef{KG: r.KG, Key: r.Key}
	}
	if err := g.pending.LoadAccs(rs, found); err != nil {
		return fmt.Errorf("read sessions from state: %w", err)
	}
	return nil
}

func (g *groupCache) Keep(ref exec.StateRef, val []byte) error {
	switch {
	case ref.Ends && val == nil:
		return g.pending.DeleteGroup(ref.Window, ref.KG, ref.Key)
	case ref.Ends:
		return g.pending.Put(ref.Window, ref.KG, ref.Key, val)
	case val == nil:
		return g.pending.DeleteAcc(ref.KG, ref.Key, ref.Window)
	default:
		return g.pending.PutAcc(ref.KG, ref.Key, ref.Window, val)
	}
}

func (g *groupCache) Ending(end int64) exec.EndCursor { return g.pending.Ends(end) }

func (g *groupCache) ForgetEnds(end int64) error { return g.pending.DeleteEnds(end) }

func (g *groupCache) Stored() exec.SessionCursor { return g.pending.Accs() }

var errSessionEnd = errors.New("corrupt session entry")

// openSessionCache starts the cache of a SESSION aggregation: nothing is
// loaded; the index of sessions by end is rebuilt when the last commit
// did not keep it (sessionIndexName).
func (h *HashAgg) openSessionCache(gs groupStore) error {
	env := h.env
	h.cache = &groupCache{pending: gs.NewPending(h.scope()), budget: h.Cache,
		overhead: sessionOverhead, slotBytes: sessionOverhead + 16 + 16*int64(len(h.Plan.Aggs))}
	kept, err := h.indexKept(sessionIndexName)
	if err != nil {
		h.cache.pending.Close()
		h.cache = nil
		return fmt.Errorf("restore state of %s: %w", env.State, err)
	}
	if !kept {
		n, err := h.cache.pending.RebuildIndex(func(start int64, val []byte) (int64, []byte, error) {
			if len(val) < 8 {
				return 0, nil, errSessionEnd
			}
			return int64(binary.BigEndian.Uint64(val)), binary.BigEndian.AppendUint64(nil, uint64(start)), nil
		})
		if err != nil {
			h.cache.pending.Close()
			h.cache = nil
			return fmt.Errorf("restore state of %s: index sessions: %w", env.State, err)
		}
		if n > 0 {
			env.Log.Info("indexed the stored sessions by end (state last written without the index)", "partition", env.Partition, "sessions", n)
		}
	}
	stored, err := h.cache.pending.AnyAccs()
	if err != nil {
		h.cache.pending.Close()
		h.cache = nil
		return fmt.Errorf("restore state of %s: %w", env.State, err)
	}
	h.agg.UseSessionStore(h.cache, !stored)
	// The share sizes a close's reads (closeReadKeys) before any row comes:
	// a watermark may close stored sessions first thing.
	h.joinBudget()
	return nil
}

// commitSessions is commitCached of a SESSION aggregation: the writes
// kept since the last commit (evicted sessions, deletions of closed and
// merged ones), then the changed sessions in memory, then the mark that
// this commit kept the index.
func (h *HashAgg) commitSessions(c *Commit) error {
	if err := c.State.Absorb(h.cache.pending); err != nil {
		return err
	}
	if h.hasWM {
		c.Closed, c.HasClosed = h.wm, true
	}
	if err := h.agg.Changes(func(ref exec.StateRef, val []byte) error {
		if ref.Ends {
			return c.State.PutGroup(ref.Window, ref.KG, ref.Key, val)
		}
		return c.State.PutAcc(ref.KG, ref.Key, ref.Window, val)
	}, func(ref exec.StateRef) error {
		if ref.Ends {
			return c.State.DeleteGroup(ref.Window, ref.KG, ref.Key)
		}
		return c.State.DeleteAcc(ref.KG, ref.Key, ref.Window)
	}); err != nil {
		return err
	}
	if err := h.markIndexKept(c, sessionIndexName); err != nil {
		return err
	}
	h.env.Metrics.OpenGroups.WithLabelValues(h.env.Name, strconv.Itoa(int(h.env.Partition))).Set(float64(h.agg.Table.Len()))
	return nil
}

// indexKept reports whether the last commit of the task kept the index
// named (its restart offset is the mark markIndexKept left): when not, an
// earlier version, or a task without the cache, may have written last, and
// the index is rebuilt from the accumulator entries.
func (h *HashAgg) indexKept(name string) (bool, error) {
	mark, err := h.env.Store.TaskValue(h.env.State, h.env.Partition, name)
	if err != nil {
		return false, err
	}
	return len(mark) == 8 && int64(binary.BigEndian.Uint64(mark)) == h.env.Restored.Offset, nil
}

// markIndexKept records in c that it keeps the index named.
func (h *HashAgg) markIndexKept(c *Commit, name string) error {
	return c.State.PutTaskValue(h.env.Partition, name, binary.BigEndian.AppendUint64(nil, uint64(c.Offset)))
}
