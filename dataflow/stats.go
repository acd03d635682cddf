package dataflow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Counters are the counts SHOW STREAMS prints for a stream.
type Counters struct {
	In      int64 // input records read (the source's, for hops too)
	Out     int64 // records written to the output topic
	Late    int64 // late rows routed or dropped
	Skipped int64 // records skipped (undecodable, no event time, too large)
	DLQ     int64 // records dead-lettered
}

// Plus is c and o added up.
func (c Counters) Plus(o Counters) Counters {
	return Counters{In: c.In + o.In, Out: c.Out + o.Out, Late: c.Late + o.Late, Skipped: c.Skipped + o.Skipped, DLQ: c.DLQ + o.DLQ}
}

// Minus is c less o.
func (c Counters) Minus(o Counters) Counters {
	return c.Plus(Counters{In: -o.In, Out: -o.Out, Late: -o.Late, Skipped: -o.Skipped, DLQ: -o.DLQ})
}

// IsZero reports whether every count is 0.
func (c Counters) IsZero() bool { return c == Counters{} }

// CountersKey names a task's counters among its task values (state's
// PutTaskValue): they are committed with the state and input offset they
// describe, so they travel with the partition in its changelog and
// survive any restart.
const CountersKey = "counters"

// countersVersion leads the stored form, so a later release can change it
// knowingly.
const countersVersion = 1

// errCountersVersion is a task's counters stored by a newer release.
var errCountersVersion = errors.New("counters stored by a newer release")

// encode is the stored form: the version, then each count as a varint.
func (c Counters) encode() []byte {
	b := []byte{countersVersion}
	for _, n := range []int64{c.In, c.Out, c.Late, c.Skipped, c.DLQ} {
		b = binary.AppendVarint(b, n)
	}
	return b
}

// decodeCounters reads what encode wrote (nil: nothing counted yet).
func decodeCounters(v []byte) (Counters, error) {
	if len(v) == 0 {
		return Counters{}, nil
	}
	if v[0] != countersVersion {
		return Counters{}, fmt.Errorf("%w (version %d; this release reads %d)", errCountersVersion, v[0], countersVersion)
	}
	var n [5]int64
	rest := v[1:]
	for i := range n {
		x, k := binary.Varint(rest)
		if k <= 0 {
			return Counters{}, fmt.Errorf("counters %x: truncated", v)
		}
		n[i], rest = x, rest[k:]
	}
	return Counters{In: n[0], Out: n[1], Late: n[2], Skipped: n[3], DLQ: n[4]}, nil
}

// TaskCounts are one task's counters. Its operators add to the pending
// counts (from the task's goroutine) as they go; the task's commit writes
// committed plus pending into the same batch (Pebble, and the changelog)
// as the state and input offset they describe, then folds pending into
// committed. Whatever is pending when a task dies uncommitted is lost
// with the rest of its uncommitted work, and counted again when its input
// is read again: a restart, clean or not, neither resets nor doubles a
// count.
type TaskCounts struct {
	In, Out, Late, Skipped, DLQ atomic.Int64 // pending: since the last commit

	mu        sync.Mutex
	committed Counters
}

// pending is what was counted since the last commit.
func (tc *TaskCounts) pending() Counters {
	return Counters{In: tc.In.Load(), Out: tc.Out.Load(), Late: tc.Late.Load(), Skipped: tc.Skipped.Load(), DLQ: tc.DLQ.Load()}
}

// Load is the task's counts now: committed and pending.
func (tc *TaskCounts) Load() Counters {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.committed.Plus(tc.pending())
}

// committedPlus is the committed counts plus p. Only the task's own
// goroutine changes them, and it calls this.
func (tc *TaskCounts) committedPlus(p Counters) Counters {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.committed.Plus(p)
}

// fold moves p (pending counts a commit has just written) into the
// committed counts.
func (tc *TaskCounts) fold(p Counters) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.committed = tc.committed.Plus(p)
	tc.In.Add(-p.In)
	tc.Out.Add(-p.Out)
	tc.Late.Add(-p.Late)
	tc.Skipped.Add(-p.Skipped)
	tc.DLQ.Add(-p.DLQ)
}

// Stats are a stream's counters (or a repartition hop's), shared by the
// stages that work for it: the sum over every partition of each stage, of
// the live counts of the tasks running here and, for a partition whose
// task does not (it runs on another process, or has not opened yet, or
// the stream is stopped), the counts last committed to this process's
// state (a standby copy keeps them current).
type Stats struct {
	mu     sync.Mutex
	stages map[string]*stageStats // by the stage's state name
}

// stageStats are one stage's share of a Stats.
type stageStats struct {
	partitions int
	store      counterStore
	tasks      map[int32]*TaskCounts // running here
}

// counterStore is what Stats reads of the state store.
type counterStore interface {
	TaskValue(name string, p int32, key string) ([]byte, error)
}

// Track counts the stage whose state is named state, of partitions
// partitions, into s (StartStage does; a server tracks the stages of a
// stream that does not run, so that it shows what they committed). A
// stage started again under the same state, after a restart or a resize,
// replaces its entry: its tasks count once.
func (s *Stats) Track(state string, partitions int, store counterStore) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stages == nil {
		s.stages = map[string]*stageStats{}
	}
	st := s.stages[state]
	if st == nil {
		st = &stageStats{tasks: map[int32]*TaskCounts{}}
		s.stages[state] = st
	}
	st.partitions, st.store = partitions, store
}

// opened makes tc the counts of partition p of the stage, for as long as
// its task runs here.
func (s *Stats) opened(state string, p int32, tc *TaskCounts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.stages[state]; st != nil {
		st.tasks[p] = tc
	}
}

// closed forgets tc (the task of partition p ended): its committed counts
// are read from the state from now on. A newer task of p that opened
// meanwhile stays.
func (s *Stats) closed(state string, p int32, tc *TaskCounts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.stages[state]; st != nil && st.tasks[p] == tc {
		delete(st.tasks, p)
	}
}

// Load is the stream's counts: summed over its stages' partitions.
func (s *Stats) Load() Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum Counters
	for state, st := range s.stages {
		for p := range int32(st.partitions) {
			if tc := st.tasks[p]; tc != nil {
				sum = sum.Plus(tc.Load())
				continue
			}
			if st.store == nil {
				continue
			}
			// A partition not running here: what its last commit
			// this process knows of recorded. An unreadable value
			// counts nothing here; the task opening on it fails loudly.
			if v, err := st.store.TaskValue(state, p, CountersKey); err == nil {
				if c, err := decodeCounters(v); err == nil {
					sum = sum.Plus(c)
				}
			}
		}
	}
	return sum
}

// restoreCounts is partition p's counts as its state recorded them.
func restoreCounts(store counterStore, state string, p int32) (*TaskCounts, error) {
	v, err := store.TaskValue(state, p, CountersKey)
	if err != nil {
		return nil, err
	}
	c, err := decodeCounters(v)
	if err != nil {
		return nil, fmt.Errorf("counters of %s partition %d: %w", state, p, err)
	}
	return &TaskCounts{committed: c}, nil
}
