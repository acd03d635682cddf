// Package dataflow is the streaming runtime: the operator contract, the
// task loop that drives a chain of operators over one input partition, and
// the stage that runs a task per partition of the topic it reads.
//
// A task is one input partition of one stage. Its loop fetches that
// partition's records, pushes each batch through its operators, moves its
// watermark, and commits at one point: everything the batches produced
// (outputs, late rows, dead letters, internal-topic records) is
// acknowledged by Kafka first; then the operators' state, the input offset
// and the watermark go to Pebble in one batch; then the offset goes to the
// stage's consumer group, so Kafka's own tools show its lag. A crash
// anywhere before the Pebble commit replays the batch (at-least-once); a
// crash after it loses nothing. An exactly-once stage makes each commit a
// Kafka transaction instead (txn.go).
//
// The runtime never sees the server: it gets a Kafka client, a state
// store, a clock, metrics and a plan through the small interfaces below.
package dataflow

import (
	"context"
	"time"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
)

// Op is one operator of a task's chain. A task calls its operators from
// its own goroutine only, in this order: Open once, then any number of
// Process and OnWatermark calls, each commit's Commit, and Close once.
// What Process or OnWatermark return goes on to the next operator's
// Process; nil means nothing for now.
type Op interface {
	// Open restores the operator's state for the task: only what the
	// task's partition owns.
	Open(ctx context.Context, env *Env) error
	// Process consumes one batch.
	Process(ctx context.Context, b *Batch) (*Batch, error)
	// OnWatermark tells the operator where the task's watermark stands:
	// it closes what that closes (and, on a FLUSH, hands over what it
	// holds).
	OnWatermark(ctx context.Context, wm Watermark) (*Batch, error)
	// Commit writes the operator's state changes into the task's commit.
	// Every record it produced has been acknowledged when it is called.
	Commit(ctx context.Context, c *Commit) error
	// Close releases what Open took.
	Close()
}

// Batch is what flows between operators. At the source it is one fetch of
// one partition: the records and the rows decoded from them. After an
// aggregation it is the rows of closed windows; after a projection the
// output rows.
type Batch struct {
	Partition int32
	// Data holds the rows as columns.
	Data *exec.Batch
	// Recs are the input records; row i of Data came from Recs[Src[i]].
	// Nil once rows no longer correspond to records (after aggregation).
	Recs []*kafkaio.Record
	Src  []int
	// MaxTime is the largest event time among the rows (HasTime false:
	// none had one).
	MaxTime int64
	HasTime bool
	// Keys are the rows' Kafka keys when the operator that made them
	// chose them (an upsert stream's group keys, a windowed stream's panes'
	// group keys: nil for a NULL key); nil: none.
	Keys [][]byte
	// Panes are the rows' windows when the rows are a windowed
	// aggregation's panes (nil: they are not panes). With the group key in
	// Keys (Keys nil: a keyless window) they are each pane's identity,
	// which the sink writes into the record's key and headers.
	Panes []Pane
	// Final marks rows of a window's final pane (false: an early fire).
	Final bool
	// Rows are the projected output rows (after a projection).
	Rows [][]any
	// Tombstones are keys whose group an upsert stream deletes (it stopped
	// satisfying HAVING): the sink writes each as a record with no value.
	Tombstones [][]byte
	// Next chains further batches (say one per window closed at once).
	Next *Batch
	// More, when set, yields the batches that follow this one before
	// Next, one at a time and only when asked (nil: no more): a window
	// closed from state on disk is emitted a chunk at a time, never whole.
	More func() (*Batch, error)
}

// Pane is the window a pane row belongs to, [Start, End) in epoch
// milliseconds: one TUMBLE or HOP window instance, or a session's bounds.
// The early fires and the final pane of a TUMBLE or HOP window have the
// same Pane; a session's end moves on as rows extend it (its start stays,
// unless a row merges it into an earlier session of its key).
type Pane struct{ Start, End int64 }

// Following is the batch after b: the next one More yields, else Next.
func (b *Batch) Following() (*Batch, error) {
	if b.More == nil {
		return b.Next, nil
	}
	m, err := b.More()
	if err != nil || m == nil {
		return b.Next, err
	}
	m.Next, m.More = b.Next, b.More
	return m, nil
}

// Watermark is the task's watermark as an operator sees it.
type Watermark struct {
	WM  int64
	Has bool
	// Flush: a FLUSH read the partition to its end; hand over everything.
	Flush bool
	// Idle: the partition is idle (confirmed on a fresh end offset, or by
	// a FLUSH).
	Idle bool
	Now  time.Time
	// Next is the next offset the task reads.
	Next int64
	// Replay: an exactly-once task is catching its state up with a
	// transaction committed before a crash; what the operators produce is
	// dropped (it is in Kafka already), and the windows they close are
	// retired, not emitted.
	Replay bool
}

// Commit is one commit of a task, as operators contribute to it.
type Commit struct {
	State *state.Batch
	// Offset is where the task restarts after this commit: the next
	// offset to read, unless an operator needs to read from further back
	// (it lowers it).
	Offset int64
	// Closed is the watermark the task's windows are closed up to, set by
	// the operator that closes them (HasClosed false: none).
	Closed    int64
	HasClosed bool
	// Applied is how far the task has read, when Offset is further back.
	Applied int64
}

// Restart lowers the commit's restart offset to off.
func (c *Commit) Restart(off int64) {
	if off < c.Offset {
		c.Offset = off
	}
}

// Provisional is an operator that holds something outside the task's
// state (a dead letter claimed) until what the task produced is safely in
// Kafka: Confirmed when a commit's records are acknowledged (at-least-once)
// or its transaction committed (exactly-once); Abandoned when the task
// fails before that (the transaction aborted, or the batch will be read
// again), so that nothing is taken for written that may not be.
type Provisional interface {
	Confirmed()
	Abandoned()
}

// Producer sends records for a task; Flush (the task's, at its commit)
// waits until Kafka acknowledged them.
type Producer interface {
	Produce(ctx context.Context, rec *kafkaio.Record)
	// ProduceOr hands a record its topic refuses as too large to tooLarge
	// instead of failing the commit.
	ProduceOr(ctx context.Context, rec *kafkaio.Record, tooLarge func(*kafkaio.Record))
}

// Store is what tasks and operators need of the state store.
type Store interface {
	Partitions(name string) (map[int32]state.PartitionMeta, error)
	TaskValue(name string, p int32, key string) ([]byte, error)
	AccsOfGroups(name string, groups []uint16, fn func(kg uint16, key []byte, window int64, val []byte) error) error
	NewBatch(name string) *state.Batch
	// NewScopedBatch is a task's commit: its groups go to its partition's
	// scope of the stream's state (state.Scope).
	NewScopedBatch(name string, p int32) *state.Batch
	// CheckSpace refuses a commit while the disk is nearly full
	// (state.ErrDiskFull): the task stalls, and retries.
	CheckSpace() error
	// The changelog's side (changelog.go): how far this disk applied a
	// partition's changelog, its state whole, and writes made at open.
	ChangelogPosition(name string, p int32) (int64, bool, error)
	HasScope(name string, p int32) (bool, error)
	DropScope(name string, p int32) error
	NewRestore(name string, p int32) *state.Restore
	DropUnmarkedRuns(name string, p int32) (int, error)
	EachScopeKey(name string, p int32, fn func(key, val []byte) error) error
	Watch(name string, p int32) (stop func() []state.Change)
}

// Env is what a task gives its operators.
type Env struct {
	// Name names the task's stage (the stream, or the hop) in metrics and
	// logs; State names its state in the store.
	Name  string
	State string
	// Scope names the task's own share of the state (state.Scope of State
	// and Partition): its groups, read and written.
	Scope string
	// Partition is the task's input partition, of Partitions.
	Partition  int32
	Partitions int
	// Restored is what the task's last commit recorded.
	Restored state.PartitionMeta
	Store    Store
	Out      Producer
	Metrics  *Metrics
	// Counts are the task's counters (SHOW STREAMS): operators add what
	// they count, the task commits them with its state.
	Counts *TaskCounts
	Now    func() time.Time
	Log    Logger
	// ExactlyOnce: the task commits in transactions (txn.go).
	ExactlyOnce bool
}

// Reread reports whether the record at offset off of the task's input
// was read, and counted, before the task's restart: a combine's
// pre-aggregation restarts further back than it had read (its unshipped
// windows), and what it reads again is a replay, not new input.
func (e *Env) Reread(off int64) bool { return off < e.Restored.Applied }

// Groups lists the key groups the task owns on its input's count: where a
// murmur2 producer sends their keys. Its state may hold others (keys a
// producer placed otherwise, the NULL key's group, keys that moved away
// after a count change and are not cleaned up yet): it reads its whole
// scope.
func (e *Env) Groups() []uint16 { return state.OwnedGroups(e.Partition, e.Partitions) }

// Logger is the part of slog.Logger the runtime logs through.
type Logger interface {
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}
