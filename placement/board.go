package placement

import (
	"sort"
	"sync"
)

// Snapshot is one partition's check as SHOW PARTITIONS prints it.
type Snapshot struct {
	Partition  int32
	Verdict    int
	WellPlaced int
	Counts     string
	Transition string
	// Owned is how many key groups the partition owns on its count.
	Owned int
	// Pos is the next offset the partition reads.
	Pos int64
}

// Board collects the snapshots of a stream's partitions; the tasks write,
// SHOW PARTITIONS reads.
type Board struct {
	mu    sync.Mutex
	parts map[int32]Snapshot
}

// NewBoard is an empty board.
func NewBoard() *Board { return &Board{parts: map[int32]Snapshot{}} }

// Put records a partition's snapshot.
func (b *Board) Put(s Snapshot) {
	b.mu.Lock()
	b.parts[s.Partition] = s
	b.mu.Unlock()
}

// All lists the snapshots by partition.
func (b *Board) All() []Snapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Snapshot, 0, len(b.parts))
	for _, s := range b.parts {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// Misplaced lists the partitions whose verdict is -1, in order.
func (b *Board) Misplaced() []int32 {
	var out []int32
	for _, s := range b.All() {
		if s.Verdict == Misplaced {
			out = append(out, s.Partition)
		}
	}
	return out
}
