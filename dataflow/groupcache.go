package dataflow

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/state"
)

// CacheBudget is the server-wide memory for aggregation groups
// (--state-cache-mb): each task of a cached aggregation holds at most an
// equal share of it in memory, the rest only in Pebble. Shares follow the
// number of tasks running.
type CacheBudget struct {
	bytes int64
	tasks atomic.Int64
	// HotWindowGroups lowers the groups at which a window of a blind
	// aggregation goes cold, cache or not (exec's SetHotWindowGroups; 0:
	// its default). Tests and crash audits set a few.
	HotWindowGroups int
}

// NewCacheBudget is a budget of mb megabytes; nil (unlimited) when mb <= 0.
func NewCacheBudget(mb int) *CacheBudget {
	if mb <= 0 {
		return nil
	}
	return &CacheBudget{bytes: int64(mb) << 20}
}

// share is one task's part of the budget.
func (b *CacheBudget) share() int64 { return b.bytes / max(b.tasks.Load(), 1) }

// groupStore is what a cached aggregation needs of the state store.
type groupStore interface {
	NewPending(stream string) *state.Pending
	GroupWindows(stream string) ([]int64, error)
	MoveAccsToGroups(stream string, groups []uint16) (int, error)
	MigrateLegacy(stream string, p int32, owned []uint16) (int, error)
	HasKeyGroups(stream string, p int32) (bool, error)
	RekeyScope(stream string, p int32, kgOf func(key []byte) (uint16, error)) (int, error)
}

// slotOverhead is the memory of a group in the grouper beyond its key and
// accumulators: its slot description, key-table entry (at the table's
// load), slot list entry and marks.
const slotOverhead = 120

// sessionOverhead is slotOverhead for a session: its slot, its own
// record, and its entries in the maps by key and by slot (measured: 10^6
// sessions in memory take about 450 bytes each beyond their encoding).
const sessionOverhead = 450

// groupCache is a HashAgg's link to its groups in Pebble: the groups it
// evicted since the last commit (pending, written with that commit) and
// the reads of the groups not in memory (exec.GroupStore).
type groupCache struct {
	pending *state.Pending
	groups  []uint16     // the key groups scanned (nil: every one of the scope)
	budget  *CacheBudget // nil: unlimited (nothing is evicted)
	// overhead is slotOverhead, or sessionOverhead for sessions.
	overhead int64
	// slotBytes estimates a group's memory: overhead plus the mean
	// size of its key and encoded accumulators, learned from evictions.
	slotBytes int64
	// stamped: each stored group starts with when it was last changed
	// (ms, uvarint), for state_ttl.
	stamped bool
	now     func() time.Time
	buf     []byte
	// delta is the id of the next partial of a blind group (exec's
	// StateRef.Partial) this task stores: Gen is the input offset the
	// task restarted at, Seq counts from 0. Unique: every partial a run
	// commits comes from input it read, so its commits' offsets, and the
	// next run's Gen, are past the Gen it wrote under (state never goes
	// back to input it has folded in).
	delta state.DeltaID
	// writes gathers a commit's changed groups, to be written in key
	// order (its memory is reused from one commit to the next).
	writes state.GroupWrites
	// sources is a merge stage's latest partial of each source per group
	// in memory (HashAgg.bySource): a group is stored as them, not as its
	// accumulators, since a source's next partial replaces its last.
	// merged builds what the close reads of a stored group: their merge.
	sources map[string]map[int32][]byte
	merged  func(dst []byte, encs [][]byte) ([]byte, error)
	// srcBytes and srcN sum the sources stored by evictions since the
	// last estimate: in memory a merge stage's group is those as well.
	srcBytes, srcN int64
}

// nextDelta is a fresh partial's id.
func (g *groupCache) nextDelta() state.DeltaID {
	id := g.delta
	g.delta.Seq++
	return id
}

// stamp prefixes a group's encoding with the time now when stored groups
// are stamped.
func (g *groupCache) stamp(val []byte) []byte {
	if !g.stamped {
		return val
	}
	g.buf = binary.AppendUvarint(g.buf[:0], uint64(g.now().UnixMilli()))
	return append(g.buf, val...)
}

// StoredAccs is a stored group's accumulators as read from the store: its
// value less the time stamp a stream with state_ttl puts first.
func StoredAccs(val []byte, stateTTL bool) []byte {
	g := groupCache{stamped: stateTTL}
	return g.unstamp(val)
}

// unstamp is a stored group's encoding without its stamp.
func (g *groupCache) unstamp(val []byte) []byte {
	if !g.stamped {
		return val
	}
	_, n := binary.Uvarint(val)
	return val[max(n, 0):]
}

var _ exec.GroupStore = (*groupCache)(nil)

func (g *groupCache) Load(refs []exec.StateRef, found func(i int, val []byte) error) error {
	rs := make([]state.GroupRef, len(refs))
	for i, r := range refs {
		rs[i] = state.GroupRef{Window: r.Window, KG: r.KG, Key: r.Key}
	}
	if err := g.pending.Load(rs, func(i int, val []byte) error { return found(i, g.unstamp(val)) }); err != nil {
		return fmt.Errorf("read groups from state: %w", err)
	}
	return nil
}

func (g *groupCache) Evict(ref exec.StateRef, val []byte) error {
	if g.sources != nil {
		return g.evictMerged(ref, val)
	}
	if ref.Partial {
		return g.pending.PutDelta(ref.Window, ref.KG, ref.Key, g.nextDelta(), g.stamp(val))
	}
	return g.pending.Put(ref.Window, ref.KG, ref.Key, g.stamp(val))
}

func (g *groupCache) Scan(window int64) exec.GroupCursor {
	if g.sources != nil {
		return &mergedCursor{GroupCursor: g.pending.ScanWindow(window, g.groups), merged: g.merged}
	}
	return g.pending.ScanWindow(window, g.groups)
}

func (g *groupCache) ScanDeltas(window int64) exec.GroupCursor {
	return g.pending.ScanDeltas(window, g.groups)
}

// maxGroups is how many groups the task may hold in memory now: its share
// less what its pending evictions, evicted-key filters and held rows of
// cold windows take, over a group's estimated size;
// never below a floor that lets a batch make progress.
func (g *groupCache) maxGroups(a *exec.Aggregator) int {
	avail := g.budget.share() - int64(g.pending.Bytes()) - int64(a.FilterBytes()) - int64(a.BufferedBytes())
	return int(max(avail/g.slotBytes, 64))
}

// maxPending bounds the evicted groups a commit writes at once. Pebble
// turns a commit batch larger than half a memtable into a "flushable
// batch" that every read then binary-searches until it is flushed: a miss
// in such a batch costs several times one in the memtable. 8 MB keeps
// commits well below that (the memtable is 64 MB).
const maxPending = 8 << 20

// pendingDue reports whether the evicted groups should be committed now:
// they take a quarter of the task's share, or maxPending. They stay in
// memory until a commit writes them.
func (g *groupCache) pendingDue() bool {
	if g.budget == nil {
		return false
	}
	n := int64(g.pending.Bytes())
	return n > maxPending || n > g.budget.share()/4
}

// heldDue reports whether the rows of cold windows a blind aggregation
// holds (exec's blindrows.go) should be committed now: they take half the
// task's share. Past all of it they are written to the store before the
// commit, as evicted groups are (SetBufferLimit).
func (g *groupCache) heldDue(a *exec.Aggregator) bool {
	return g.budget != nil && int64(a.HeldBytes()) > g.budget.share()/2
}

// evict brings the groups in memory back within the task's share.
func (g *groupCache) evict(a *exec.Aggregator) error {
	if g.budget == nil {
		return nil
	}
	a.SetBufferLimit(int(g.budget.share())) // shares follow the tasks running
	limit := g.maxGroups(a)
	if a.Table.Len() <= limit {
		return nil
	}
	// A tenth below the limit, so eviction runs once per many batches,
	// not on every one.
	mean, err := a.EvictTo(limit - limit/10)
	if mean > 0 && g.srcN > 0 {
		mean += int(g.srcBytes / g.srcN)
		g.srcBytes, g.srcN = 0, 0
	}
	if mean > 0 {
		g.slotBytes = (3*g.slotBytes + g.overhead + int64(mean)) / 4
	}
	return err
}
