package dataflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/window"
)

// Kafka is what the runtime needs of Kafka.
type Kafka interface {
	EndOffsets(ctx context.Context, topic string) (map[int32]int64, error)
	Partitions(ctx context.Context, topic string) (int, error)
	// NewGroupConsumer joins group as a member reading topic; hooks open
	// and close the tasks of the partitions it is given.
	NewGroupConsumer(group, topic string, maxPoll int, sessionTimeout time.Duration, instance string, hooks kafkaio.GroupHooks) (Consumer, error)
	// ReadPartition reads a partition to its current end, read_committed.
	ReadPartition(ctx context.Context, topic string, p int32, from int64, fn func(*kafkaio.Record) error) (int64, error)
	// GroupAssignment and NewPartitionFollower serve standby copies.
	GroupAssignment(ctx context.Context, group, topic string) (kafkaio.Assignment, error)
	NewPartitionFollower(topic string) (ChangelogFollower, error)
	NewPending() Pending
	// NewTxnProducer opens a task's transactional producer, fencing
	// earlier holders of id; StableOffsets reads what the last committed
	// transactions left in a consumer group on the partitions given (none:
	// every partition; exactly-once stages only).
	NewTxnProducer(ctx context.Context, id string) (TxnProducer, error)
	StableOffsets(ctx context.Context, group, topic string, parts ...int32) (map[int32]kafkaio.Committed, error)
}

// TxnProducer is a task's transactional producer: what the task produces
// between two commits is one transaction, which Commit ends together with
// the input offset.
type TxnProducer interface {
	Pending
	Commit(ctx context.Context, c kafkaio.TxnCommit) error
	Abort(ctx context.Context) error
	ID() string
	Close()
}

// WatermarkBoard publishes a task's own watermark to the app's other
// processes (asynchronously: a value lost or late only holds an idle
// partition back a little longer).
type WatermarkBoard interface {
	Publish(group string, p int32, wm int64)
}

// NotePeer records the own watermark of partition p, whose task runs on
// another process.
func (s *Stage) NotePeer(p int32, wm int64) { s.peers.Set(p, wm) }

// Consumer reads the partitions of one topic its group assigns. The group
// moves no partition from one Poll's return to the next Poll (or Close),
// so what a poll returned reaches the tasks that own it.
type Consumer interface {
	Poll(ctx context.Context) ([]kafkaio.FetchPart, error)
	// Release starts fetching a partition the assignment held (its task
	// restored in the background), at offset at.
	Release(p int32, at int64)
	// AllowRebalance lets the group rebalance before the next Poll, once
	// every fetch of the last one has its task.
	AllowRebalance()
	Close()
}

// Pending produces a task's records and waits for their acknowledgement.
type Pending interface {
	Producer
	Flush(ctx context.Context) error
}

// Deps are what stages share: Kafka, the state store, metrics, the clock
// and the logger.
type Deps struct {
	Kafka   Kafka
	Store   Store
	Metrics *Metrics
	Now     func() time.Time
	Log     *slog.Logger
	// Watermarks, when set, shares each task's own watermark with the
	// app's other processes (an idle partition advances no further than
	// its peers', wherever they run); nil: peers are this process's only.
	Watermarks WatermarkBoard
	// AfterTxn, when set, runs between an exactly-once task's transaction
	// commit and its state write: the narrowest crash window, where the
	// audit injects its crashes (TURBINESQL_CRASH_AFTER_TXN).
	AfterTxn func()
	// BeforeOpen, when set, runs before each task of a stage (named by its
	// consumer group) opens; an error fails the opening as the task's own
	// would, failing the stage (OnFail) and, in its first assignment, its
	// start. Tests inject start failures with it.
	BeforeOpen func(group string, partition int32) error
}

// StageConfig describes one stage: the topic it reads, a task per
// partition, the operator chain each task runs.
type StageConfig struct {
	// Name labels metrics and logs (the stream's name, or the hop's).
	Name string
	// State names the stage's state in the store.
	State string
	// Group is the consumer group the stage's offsets are committed to.
	Group string
	// Topic is read, all of its Partitions.
	Topic      string
	Partitions int
	// From is where a task starts on partition p when its state has read
	// less (a new stage: nothing): From[p]. A stream reading another
	// stream's output starts where that output begins (catalog.Stream's
	// Start), never on records of the topic from before it. nil: the
	// log's start.
	From map[int32]int64
	// Ops builds the operator chain of partition p's task.
	Ops func(p int32) []Op
	// Delay and IdleTimeout shape the event time of tasks whose chain has
	// no Clock of its own (window.Partition).
	Delay       int64
	IdleTimeout time.Duration
	// Stats sums the counters of the stage's tasks, committed with their
	// state, into the stream's (or the hop's).
	Stats *Stats
	// CommitEvery is the commit cadence; MaxPoll bounds a batch.
	CommitEvery time.Duration
	MaxPoll     int
	// Reports: the stage's watermark is the stream's (its last stage),
	// for the watermark and idleness gauges.
	Reports bool
	// Watch holds the partition counts, at start, of other topics the
	// stage depends on (a hop's source); OnResize is called once when
	// Topic's count or one of them changes.
	Watch    map[string]int
	OnResize func()
	// Writes are the topics the stage's operators write (the output
	// topic, a hop's or combine's internal topic, a late-data topic): one
	// deleted under the stage fails it with a TopicGone, as a deleted
	// input does, rather than leave it running with nowhere to write.
	Writes []string
	// MetadataEvery is how often the stage looks for added partitions (0:
	// every 5 s).
	MetadataEvery time.Duration
	// ExactlyOnce: partition p's task produces everything through its
	// transactional producer ({Group}-{p}), each of its commits is one
	// transaction (records, changelog, a progress record to ProgressTopic,
	// the input offset to Group), and a restart replays into state,
	// producing nothing, what a transaction committed after the state's
	// last write.
	ExactlyOnce   bool
	ProgressTopic string
	// Holder names this process in every commit's progress (a random
	// number per server run), so a server whose commit failed can tell
	// whether another one has committed the stage's partitions since.
	Holder uint64
	// Changelog is the stage's changelog topic (a partition per input
	// partition; required): every commit of a task writes its state
	// changes there, with the input offset, and a task opening on a disk
	// that is behind restores from it.
	Changelog string
	// SessionTimeout is how long the consumer group keeps the partitions
	// of a silent process before moving them (0: the client's default).
	SessionTimeout time.Duration
	// Node names this process in the stage's consumer group (a static
	// member: a restart under the same name takes its partitions back at
	// once). Empty: a dynamic member.
	Node string
	// Standbys is how many other processes keep a warm copy of each
	// partition's state (standby.go); it needs Node.
	Standbys int
	// OnFail is called once, on its own goroutine, when the stage fails:
	// an error that is a *TxnAborted can be cured by starting the stage
	// again from its state.
	OnFail func(err error)
	// Deferred: StartStage returns once the stage has joined its group,
	// without waiting for the first assignment; the caller waits with
	// AwaitAssigned. A process starting many stages starts them all
	// first: each join of a group with other members costs a rebalance
	// round (a heartbeat or more), and waiting for them one by one made
	// a restart of a node with 13 streams take 10 s.
	Deferred bool
}

// Stage runs a task per partition of its topic that its consumer group
// assigns to this process.
type Stage struct {
	cfg   StageConfig
	deps  Deps
	log   *slog.Logger
	peers *window.Peers
	cons  Consumer
	// standby keeps warm copies of partitions other processes run (nil:
	// none).
	standby *standbys

	tmu   sync.RWMutex
	tasks map[int32]*task
	// restoring: tasks of partitions assigned here that restore their
	// state from the changelog in the background (restore.go); their
	// partitions are not fetched until they open.
	restoring map[int32]*restoringTask
	// fenced: tasks of partitions just given to this process, their
	// transactional producers open (earlier holders fenced), not yet
	// opened: adding made them, assigned opens them.
	fenced map[int32]*task
	wakeMu sync.Mutex
	wake   context.CancelFunc // ends the poll under way (nil: none)

	runCtx    context.Context
	cancel    context.CancelFunc
	loops     sync.WaitGroup // the poll and watch loops
	wg        sync.WaitGroup // the tasks
	leaveOnce sync.Once

	mu      sync.Mutex
	current chan struct{} // assignment()
	err     error
	openErr error           // of an assignment
	stalls  map[int32]error // tasks stalled on a full disk
	wms     map[int32]Watermark
	endsAt  time.Time
	ends    map[int32]int64
	// endsMarks: the peers' own watermarks taken before ends was fetched.
	endsMarks window.PeerMarks
	endsMu    sync.Mutex
}

// StartStage starts the stage: it joins the stage's consumer group, which
// assigns the topic's partitions among the processes of the app, and opens
// a task for each partition this process is given, restoring its state
// from the changelog first. It returns once the first assignment is done.
func StartStage(ctx context.Context, cfg StageConfig, deps Deps) (*Stage, error) {
	if cfg.Changelog == "" {
		return nil, fmt.Errorf("start %s: no changelog topic", cfg.Name)
	}
	s := newStage(cfg, deps)
	if cfg.Standbys > 0 && cfg.Node != "" {
		// Before joining: the first assignment claims its partitions.
		s.standby = &standbys{s: s, warm: map[int32]bool{}, local: map[int32]bool{}}
	}
	cons, err := deps.Kafka.NewGroupConsumer(cfg.Group, cfg.Topic, cfg.MaxPoll, cfg.SessionTimeout, cfg.Node, kafkaio.GroupHooks{
		Adding: s.adding, Assigned: s.assigned, Revoked: s.revoked, Lost: s.lost, Joined: s.noteJoined})
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	s.mu.Lock()
	s.cons = cons
	s.mu.Unlock()
	s.loops.Add(2)
	go func() { defer s.loops.Done(); s.poll(s.runCtx) }()
	go func() { defer s.loops.Done(); s.watch(s.runCtx) }()
	if s.standby != nil {
		s.loops.Add(1)
		go func() { defer s.loops.Done(); s.standby.run(s.runCtx) }()
	}
	if cfg.Deferred {
		return s, nil
	}
	if err := s.AwaitAssigned(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// newStage is a stage that runs no task yet: StartStage joins its
// consumer group, a Driver opens its tasks itself.
func newStage(cfg StageConfig, deps Deps) *Stage {
	s := &Stage{cfg: cfg, deps: deps, peers: window.NewPeers(), tasks: map[int32]*task{}, restoring: map[int32]*restoringTask{}, fenced: map[int32]*task{}, wms: map[int32]Watermark{}, stalls: map[int32]error{},
		current: make(chan struct{}), log: deps.Log.With("stage", cfg.Name)}
	s.runCtx, s.cancel = context.WithCancel(context.Background())
	if cfg.Stats != nil {
		cfg.Stats.Track(cfg.State, cfg.Partitions, deps.Store)
	}
	return s
}

// AwaitAssigned waits for the stage's first assignment (at most
// joinTimeout: then the stage keeps waiting for its group in the
// background), and returns the error of opening its tasks. The first
// assignment opens this process's tasks: StartStage waits for it, so a
// task that cannot open fails the start, and a FLUSH right after finds
// the tasks there. A Deferred stage whose tasks could not open has failed
// already (OnFail, Err), as any later failure does.
func (s *Stage) AwaitAssigned(ctx context.Context) error {
	select {
	case <-s.assignment():
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(joinTimeout):
		s.log.Warn("no partitions assigned yet; the stage keeps waiting for its consumer group", "group", s.cfg.Group, "waited", joinTimeout)
	}
	return s.firstErr()
}

// joinTimeout bounds how long a start waits for its first assignment.
const joinTimeout = 30 * time.Second

// slowOpen is how long fencing an assignment's tasks and reading their
// positions may take before it is logged: it runs in the group's
// assignment callback, and a member stuck there does not rejoin the
// group's next rebalance (kafkaio's rebalance timeout is 2/5 of the
// session).
const slowOpen = 2 * time.Second

// noteJoined records that the group gave this member its assignment.
func (s *Stage) noteJoined() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.current:
	default:
		close(s.current)
	}
}

// firstErr is the error of the first assignment, if it failed: the
// stage's failure, which is its cause. A stage that failed while its
// tasks opened (one of them fenced because the group moved its partition
// meanwhile) stops the opening of the others, which then fail with the
// stage's cancelled context; a start that reported that ("context
// canceled") left the stream failed for good, where the failure that
// stopped it (TaskMigrated) is one a restart cures.
func (s *Stage) firstErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.openErr != nil && s.err != nil {
		return s.err
	}
	return s.openErr
}

// adding fences the earlier holders of partitions the group is giving
// this process, before the consumer reads their committed offsets, when
// those offsets stay unstable for deadHolderGrace: the consumer's read
// waits while a transaction commits one of them, and a holder killed
// between committing its offset in a transaction and ending it leaves
// that transaction open until the broker times it out (TxnTimeout, 60 s).
// Opening the transactional producer aborts it at once. On Apache Kafka
// the 3-node audit saw a SIGKILLed node's tasks unopened for over 60 s
// otherwise.
//
// Offsets that are stable (or soon are: a live holder's commit leaves its
// offset pending for milliseconds) are fenced by assigned, after the
// consumer's read, as before: fencing as soon as a partition is given
// cut short the last moments of a previous holder that had not yet heard
// it lost the partition (a member slow to rejoin a rebalance keeps its
// partitions until it does), which failed its stage as fenced.
func (s *Stage) adding(parts []int32) {
	ctx := s.runCtx
	if !s.cfg.ExactlyOnce || ctx.Err() != nil {
		// No transactions: offsets are always stable. Or stopping: the
		// group is being left.
		return
	}
	var todo []int32
	s.tmu.RLock()
	for _, p := range parts {
		if s.tasks[p] == nil && s.restoring[p] == nil && s.fenced[p] == nil {
			todo = append(todo, p)
		}
	}
	s.tmu.RUnlock()
	if len(todo) == 0 {
		return
	}
	gctx, cancel := context.WithTimeout(ctx, deadHolderGrace)
	_, err := s.deps.Kafka.StableOffsets(gctx, s.cfg.Group, s.cfg.Topic, todo...)
	cancel()
	if !errors.Is(err, kafkaio.ErrUnstable) || ctx.Err() != nil {
		return // stable (or unreadable: assigned finds out)
	}
	s.log.Info("a transaction keeps partitions' offsets unstable; fencing their earlier holders now", "group", s.cfg.Group, "partitions", todo, "waited", deadHolderGrace)
	// A partition that cannot be fenced here is tried again by
	// assigned, which fails the stage if it cannot.
	tasks, _ := s.fenceTasks(ctx, todo)
	s.tmu.Lock()
	for _, t := range tasks {
		s.fenced[t.p] = t
	}
	s.tmu.Unlock()
}

// fenceTasks fences the earlier holders of parts (fenceTask), one after
// another, each partition claimed from the standbys first. It returns the
// tasks fenced, and why the others could not be (their claims given back).
//
// Side by side (16 at once) was tried against the rebalance storms of a
// loaded machine, where 60 to 100 fencings one after another outlast a
// rebalance timeout; it made a fresh stream's start fail with
// INVALID_TXN_STATE on a changelog commit under load (TestGrowWithoutTool,
// 100 partitions), so it waits until a fencing cannot overlap another of
// the same transactional id.
func (s *Stage) fenceTasks(ctx context.Context, parts []int32) ([]*task, map[int32]error) {
	var tasks []*task
	errs := map[int32]error{}
	for _, p := range parts {
		s.standby.claim(p)
		t, err := s.fenceTask(ctx, p)
		if err != nil {
			s.standby.release(p)
			errs[p] = err
			continue
		}
		tasks = append(tasks, t)
	}
	return tasks, errs
}

// deadHolderGrace is how long adding lets the offsets of partitions given
// to this process stay unstable before it takes their holder for dead.
const deadHolderGrace = 2 * time.Second

// takeFenced removes and returns the fenced, unopened task of p (nil:
// none).
func (s *Stage) takeFenced(p int32) *task {
	s.tmu.Lock()
	defer s.tmu.Unlock()
	t := s.fenced[p]
	delete(s.fenced, p)
	return t
}

// takeTasks removes the tasks of parts from m (s.tasks or s.fenced) and
// returns them.
func (s *Stage) takeTasks(m map[int32]*task, parts []int32) []*task {
	var out []*task
	s.tmu.Lock()
	defer s.tmu.Unlock()
	for _, p := range parts {
		if t := m[p]; t != nil {
			out = append(out, t)
			delete(m, p)
		}
	}
	return out
}

// dropFenced closes the producers of fenced tasks of parts that will not
// open here.
func (s *Stage) dropFenced(parts []int32) {
	for _, t := range s.takeTasks(s.fenced, parts) {
		t.closeProducers()
		s.standby.release(t.p)
	}
}

// assigned opens the tasks of partitions the group gave this process and
// returns the offset each reads from. A task that cannot open fails the
// stage.
func (s *Stage) assigned(parts []int32) (at map[int32]int64, held []int32) {
	defer s.noteJoined()
	ctx := s.runCtx
	at = map[int32]int64{}
	if ctx.Err() != nil {
		return at, nil // stopping: the group is being left
	}
	var fresh []*task
	var unfenced []int32
	start := time.Now()
	for _, p := range parts {
		if s.task(p) != nil || s.isRestoring(p) {
			continue
		}
		if t := s.takeFenced(p); t != nil {
			fresh = append(fresh, t)
			continue
		}
		unfenced = append(unfenced, p)
	}
	newly, errs := s.fenceTasks(ctx, unfenced)
	fresh = append(fresh, newly...)
	for _, p := range slices.Sorted(maps.Keys(errs)) {
		s.openFailed(fmt.Errorf("start %s partition %d: %w", s.cfg.Name, p, errs[p]))
	}
	if len(fresh) == 0 {
		return at, nil
	}
	// Read once for every task given, and only now that every earlier
	// holder is fenced (its open transaction aborted): these ends and
	// offsets are final.
	fenced := time.Now()
	pos, err := s.positions(ctx, fresh)
	if took := time.Since(start); took > slowOpen {
		// The group's next rebalance waits for this member meanwhile.
		s.log.Warn("opening the tasks of an assignment was slow", "group", s.cfg.Group, "partitions", parts,
			"fencing", fenced.Sub(start).Round(time.Millisecond), "positions", time.Since(fenced).Round(time.Millisecond))
	}
	if err != nil {
		for _, t := range fresh {
			t.closeProducers()
			s.standby.release(t.p)
		}
		s.openFailed(fmt.Errorf("start %s: %w", s.cfg.Name, err))
		return at, nil
	}
	for _, t := range fresh {
		if s.restoreInBackground(t, pos) {
			held = append(held, t.p)
			at[t.p] = pos.input[t.p] // not fetched: Release sets where
			continue
		}
		if err := s.openTask(ctx, t, pos); err != nil {
			t.closeProducers()
			s.standby.release(t.p)
			s.openFailed(fmt.Errorf("start %s partition %d: %w", s.cfg.Name, t.p, err))
			continue
		}
		s.runTask(t)
		at[t.p] = t.part.Next
	}
	s.log.Info("partitions assigned", "group", s.cfg.Group, "partitions", parts, "owned", s.Partitions(), "restoring", held)
	return at, held
}

// runTask starts an opened task's loop.
func (s *Stage) runTask(t *task) {
	s.started(t)
	tctx, cancel := context.WithCancel(s.runCtx)
	t.cancel = cancel
	s.wg.Add(1)
	go func() { defer s.wg.Done(); t.run(tctx) }()
}

// started records an opened task as running: the stage's watermark
// counts it from where its state closed windows.
func (s *Stage) started(t *task) {
	s.tmu.Lock()
	s.tasks[t.p] = t
	s.tmu.Unlock()
	if t.env.Restored.HasClosed {
		s.mu.Lock()
		s.wms[t.p] = Watermark{WM: t.env.Restored.Closed, Has: true}
		s.mu.Unlock()
	}
}

// positions are what tasks opening need of Kafka: the input's ends, the
// changelog's, and (exactly-once) the offsets committed transactions left.
type positions struct {
	input, changelog map[int32]int64
	committed        map[int32]kafkaio.Committed
}

// positions reads them for tasks: the committed offsets of the tasks'
// partitions only, which their fencing has just made stable. Another
// partition's offset may stay unstable until its dead holder's
// transaction times out, and this runs in the group's assignment
// callback, which must return for the member to take part in the group's
// next rebalance (kafkaio.StableOffsets).
func (s *Stage) positions(ctx context.Context, tasks []*task) (positions, error) {
	var pos positions
	var err error
	if pos.input, err = s.deps.Kafka.EndOffsets(ctx, s.cfg.Topic); err != nil {
		return pos, err
	}
	if pos.changelog, err = s.deps.Kafka.EndOffsets(ctx, s.cfg.Changelog); err != nil {
		return pos, fmt.Errorf("changelog %s: %w", s.cfg.Changelog, err)
	}
	if s.cfg.ExactlyOnce {
		parts := make([]int32, len(tasks))
		for i, t := range tasks {
			parts[i] = t.p
		}
		pos.committed, err = s.deps.Kafka.StableOffsets(ctx, s.cfg.Group, s.cfg.Topic, parts...)
	}
	return pos, err
}

// openFailed fails the stage for a task that could not open (and the
// start, if this was the first assignment).
func (s *Stage) openFailed(err error) {
	s.mu.Lock()
	if s.openErr == nil {
		s.openErr = err
	}
	s.mu.Unlock()
	s.fail(err)
}

// revoked commits and closes the tasks of partitions the group moves
// away: each task's last commit is written before this returns, so the
// next owner starts where it ended.
func (s *Stage) revoked(parts []int32) { s.closeTasks(parts, true) }

// lost closes the tasks of partitions this process lost without a
// handover: another process may run them already, so they commit nothing.
// Until the group assigns again, a FLUSH waits.
func (s *Stage) lost(parts []int32) {
	s.mu.Lock()
	select {
	case <-s.current:
		s.current = make(chan struct{})
	default:
	}
	s.mu.Unlock()
	s.closeTasks(parts, false)
}

func (s *Stage) closeTasks(parts []int32, commit bool) {
	s.dropFenced(parts)
	s.cancelRestores(parts)
	closing := s.takeTasks(s.tasks, parts)
	for _, t := range closing {
		if !commit {
			t.noFinal.Store(true)
		}
		t.cancel()
	}
	for _, t := range closing {
		<-t.done
		s.standby.release(t.p)
		s.mu.Lock()
		delete(s.wms, t.p)
		delete(s.stalls, t.p)
		s.mu.Unlock()
	}
	if len(closing) > 0 {
		verb := "partitions handed over"
		if !commit {
			verb = "partitions lost (this process fell out of its consumer group; their last commits stand)"
		}
		s.log.Info(verb, "group", s.cfg.Group, "partitions", parts, "owned", s.Partitions())
	}
}

// task is partition p's task on this process (nil: not here).
func (s *Stage) task(p int32) *task {
	s.tmu.RLock()
	defer s.tmu.RUnlock()
	return s.tasks[p]
}

// ownTasks is a snapshot of the tasks this process runs.
func (s *Stage) ownTasks() []*task {
	s.tmu.RLock()
	defer s.tmu.RUnlock()
	out := make([]*task, 0, len(s.tasks))
	for _, t := range s.tasks {
		out = append(out, t)
	}
	return out
}

// fenceTask starts partition p's task with its transactional producer,
// which fences the partition's earlier holder: its open transaction is
// aborted, so what the changelog and the group hold is final after.
func (s *Stage) fenceTask(ctx context.Context, p int32) (*task, error) {
	t := &task{st: s, p: p, in: make(chan kafkaio.FetchPart, 1), reqs: make(chan *flushReq), done: make(chan struct{})}
	tx, err := s.deps.Kafka.NewTxnProducer(ctx, s.txnID(p))
	if err != nil {
		return nil, err
	}
	t.clog = tx
	if s.cfg.ExactlyOnce {
		t.txn, t.out = tx, tx
	} else {
		t.out = s.deps.Kafka.NewPending()
	}
	return t, nil
}

// openTask brings the state on this disk up to the changelog, then
// restores the task's operators from it.
func (s *Stage) openTask(ctx context.Context, t *task, pos positions) error {
	cfg, deps, p := s.cfg, s.deps, t.p
	if deps.BeforeOpen != nil {
		if err := deps.BeforeOpen(cfg.Group, p); err != nil {
			return err
		}
	}
	if err := t.restoreChangelog(ctx, pos.changelog[p]); err != nil {
		return err
	}
	metas, err := deps.Store.Partitions(cfg.State)
	if err != nil {
		return err
	}
	m := metas[p]
	// Nothing before From is the input's: a task whose state has read
	// less (none: a new stream) fetches from there. m stays as the state
	// says (Restored: what the operators find, and whether it resumed).
	next := max(m.Offset, cfg.From[p])
	part := window.NewPartition(p, cfg.Delay, cfg.IdleTimeout, deps.Now, s.peers, next, m.MaxTime, m.HasTime)
	if m.HasClosed {
		part.Restore(m.Closed)
	}
	part.OnIdle = idleLogger(s.log, cfg.Topic, p)
	// Know the partition's end before the first fetch: a partition whose
	// end is unknown would count as read to its end.
	part.SawEnd(pos.input[p])
	t.part = part
	if t.txn != nil {
		t.planReplay(m, pos.committed[p], s.log)
	}
	t.ops = cfg.Ops(p)
	for _, op := range t.ops {
		if _, ok := op.(markerSender); ok {
			part.FeedsMerge = true
		}
	}
	// The counters as the state (just brought up to the changelog) has
	// them: what the commits of whoever ran the partition counted.
	if t.counts, err = restoreCounts(deps.Store, cfg.State, p); err != nil {
		return err
	}
	t.sw = &switchOut{Producer: t.out}
	t.env = &Env{Name: cfg.Name, State: cfg.State, Scope: state.Scope(cfg.State, p), Partition: p, Partitions: cfg.Partitions, Restored: m, Store: deps.Store, Out: t.sw,
		Metrics: deps.Metrics, Counts: t.counts, Now: deps.Now, Log: s.log, ExactlyOnce: t.txn != nil}
	stop := deps.Store.Watch(cfg.State, p)
	err = t.open(ctx)
	t.opened = stop()
	if err != nil {
		for _, op := range t.ops {
			op.Close()
		}
		return err
	}
	if cfg.Stats != nil {
		cfg.Stats.opened(cfg.State, p, t.counts)
	}
	return nil
}

// txnID is partition p's transactional id, {group}-{p}: an exactly-once
// task's transactions hold everything it writes, an at-least-once task's
// its changelog and input offset.
func (s *Stage) txnID(p int32) string { return s.cfg.Group + "-" + strconv.Itoa(int(p)) }

// Stop lets every task finish its batch and commit, then leaves the
// consumer group.
func (s *Stage) Stop() {
	s.cancel()
	// The poll loop ends first: no poll of its may hold the group's
	// rebalance block while it is left. Leaving waits for an assignment
	// callback under way (it opens no task once stopping); only then are
	// all the tasks known, each finishing with its last commit.
	s.loops.Wait()
	s.leaveGroup()
	s.wg.Wait()
	s.dropRestored()
	s.tmu.Lock()
	left := slices.Collect(maps.Keys(s.fenced))
	s.tmu.Unlock()
	s.dropFenced(left)
}

// poll hands each fetched partition to its task.
func (s *Stage) poll(ctx context.Context) {
	retrying := false // after a fetch error
	var dest []*task  // the task of each fetch of the last poll
	for {
		// A restore that ends wakes the poll (wakePoll), which may wait
		// on held partitions only; one that ended before the wake was
		// set is found by polling briefly while any restores.
		pctx, cancel := context.WithCancel(ctx)
		s.setPollWake(cancel)
		if s.restoringCount() > 0 {
			pctx, cancel = context.WithTimeout(pctx, restoredCheck)
		}
		parts, err := s.cons.Poll(pctx)
		s.setPollWake(nil)
		cancel()
		if ctx.Err() != nil || s.Err() != nil {
			return
		}
		s.startRestored()
		if err != nil {
			// A fetch error (the broker out of reach, a leader moving) is
			// retried: the consumer resumes where it was, and the tasks
			// commit nothing they have not read.
			if !retrying {
				s.deps.Log.Warn("cannot read input; retrying", "stage", s.cfg.Name, "topic", s.cfg.Topic, "err", err)
			}
			retrying = true
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		if retrying {
			s.deps.Log.Info("reading input again", "stage", s.cfg.Name, "topic", s.cfg.Topic)
			retrying = false
		}
		// Each fetch goes to the task that owned its partition when the
		// poll returned, resolved while the group cannot rebalance: a
		// task started later for the same partition (it moved away and
		// came back) starts at its committed offset and must never get
		// a fetch of its predecessor's.
		dest = dest[:0]
		for _, fp := range parts {
			dest = append(dest, s.task(fp.Partition))
		}
		allowed := false
		for i, fp := range parts {
			t := dest[i]
			if t == nil {
				continue
			}
			select {
			case t.in <- fp:
				continue
			default:
			}
			if !allowed {
				// The task is busy (a large batch, a commit, a window's
				// close): the group may rebalance meanwhile, so this
				// member answers a rebalance within its timeout instead
				// of after the hand-off. A task the rebalance closes
				// drops its fetch (done).
				s.cons.AllowRebalance()
				allowed = true
			}
			select {
			case t.in <- fp:
			case <-t.done: // handed over meanwhile
			case <-ctx.Done():
				return
			}
		}
	}
}

// watch notices partitions added to the topics the stage depends on.
func (s *Stage) watch(ctx context.Context) {
	counts := map[string]int{s.cfg.Topic: s.cfg.Partitions}
	for t, n := range s.cfg.Watch {
		counts[t] = n
	}
	gone := map[string]int{} // topics missing from metadata, checks in a row
	// missing says whether topic is gone for good: twice in a row, so a
	// metadata answer from a broker still catching up is not taken for a
	// deletion.
	missing := func(topic string, n int, err error) bool {
		if err != nil || n > 0 {
			delete(gone, topic)
			return false
		}
		gone[topic]++
		return gone[topic] >= 2
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.metadataEvery()):
		}
		for _, topic := range s.cfg.Writes {
			if n, err := s.deps.Kafka.Partitions(ctx, topic); missing(topic, n, err) {
				s.fail(&TopicGone{Topic: topic, Output: true})
				return
			}
		}
		for topic, was := range counts {
			n, err := s.deps.Kafka.Partitions(ctx, topic)
			if missing(topic, n, err) {
				s.fail(&TopicGone{Topic: topic})
				return
			}
			if err != nil || n == 0 || n == was {
				continue
			}
			s.deps.Log.Info("input topic changed its partition count", "stage", s.cfg.Name, "topic", topic, "partitions", n, "was", was)
			if s.cfg.OnResize != nil {
				go s.cfg.OnResize()
			}
			return
		}
	}
}

func (s *Stage) metadataEvery() time.Duration {
	if s.cfg.MetadataEvery > 0 {
		return s.cfg.MetadataEvery
	}
	return 5 * time.Second
}

// Err is the stage's failure, nil while it runs.
func (s *Stage) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Stage) fail(err error) {
	err = s.writeGone(err)
	s.mu.Lock()
	first := s.err == nil
	if first {
		s.err = err
	}
	s.mu.Unlock()
	if first {
		s.deps.Log.Error("stage failed", "stage", s.cfg.Name, "err", err)
		// Its partitions go to the app's other processes (or wait for
		// this stage's restart), rather than stay with a member that
		// processes nothing. Its tasks and loops stop first (a failed
		// stage's tasks commit nothing more), as in Stop.
		go func() {
			s.cancel()
			s.loops.Wait()
			s.leaveGroup()
		}()
		if s.cfg.OnFail != nil {
			go s.cfg.OnFail(err)
		}
	}
}

// leaveGroup leaves the stage's consumer group (once): its partitions are
// handed over, its tasks closed.
func (s *Stage) leaveGroup() {
	s.leaveOnce.Do(func() {
		if cons := s.consumer(); cons != nil {
			cons.Close()
		}
	})
}

func (s *Stage) consumer() Consumer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cons
}

// assignment is closed while the stage's consumer group has given this
// process its share (possibly none); open while it rejoins after losing
// its partitions.
func (s *Stage) assignment() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current
}

func (s *Stage) now() time.Time { return s.deps.Now() }

func (s *Stage) noteStall(p int32, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.stalls, p)
	} else {
		s.stalls[p] = err
	}
}

// Stalled is why the stage's tasks wait (a full disk), nil while none does.
func (s *Stage) Stalled() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, err := range s.stalls {
		return err
	}
	return nil
}

func (s *Stage) commitEvery() time.Duration {
	if s.cfg.CommitEvery > 0 {
		return s.cfg.CommitEvery
	}
	return time.Second
}

func (s *Stage) tickEvery() time.Duration {
	return min(s.commitEvery(), 250*time.Millisecond)
}

// freshEnd is partition p's log end offset, fetched at or after `after`
// (one ListOffsets serves every task asking at once), with the peers' own
// watermarks as this process knew them before that fetch was sent: an
// idle partition may advance as far as those (window.Partition).
func (s *Stage) freshEnd(ctx context.Context, p int32, after time.Time) (int64, window.PeerMarks, error) {
	s.endsMu.Lock()
	defer s.endsMu.Unlock()
	if s.ends == nil || s.endsAt.Before(after) {
		at := s.now()
		// Before the request goes out: a peer watermark learned while it
		// is under way may come from rows written after the end it finds.
		marks := s.peers.Marks()
		ends, err := s.deps.Kafka.EndOffsets(ctx, s.cfg.Topic)
		if err != nil {
			return 0, window.PeerMarks{}, err
		}
		s.ends, s.endsAt, s.endsMarks = ends, at, marks
	}
	return s.ends[p], s.endsMarks, nil
}

func (s *Stage) noteWatermark(p int32, wm Watermark) {
	s.mu.Lock()
	s.wms[p] = wm
	s.mu.Unlock()
	if !s.cfg.Reports {
		return
	}
	m := s.deps.Metrics
	low, ok, idle := s.Watermark()
	if ok {
		m.Watermark.WithLabelValues(s.cfg.Name).Set(float64(low) / 1000)
		m.WatermarkLag.WithLabelValues(s.cfg.Name).Set(float64(s.now().UnixMilli()-low) / 1000)
	}
	m.IdlePartitions.WithLabelValues(s.cfg.Name).Set(float64(idle))
}

// Watermark is the lowest watermark among the stage's tasks (ok false
// while none has one), and how many of its partitions are idle.
func (s *Stage) Watermark() (wm int64, ok bool, idle int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.wms {
		if w.Idle {
			idle++
		}
		if w.Has && (!ok || w.WM < wm) {
			wm, ok = w.WM, true
		}
	}
	return wm, ok, idle
}

// ErrTopicGone fails a stage one of whose topics was deleted under it:
// reading an input would wait forever, and every write to an output
// fails. The error is a *TopicGone, naming the topic.
var ErrTopicGone = errors.New("topic no longer exists")

// TopicGone is the failure of a stage whose input (Output false) or
// output topic was deleted while it ran. It is not cured by starting the
// stage again in place: the stream is dropped, or restarted once the
// topic exists again (a restart creates the topics a stream writes).
type TopicGone struct {
	Topic  string
	Output bool
}

func (e *TopicGone) Error() string {
	if e.Output {
		return fmt.Sprintf("output topic no longer exists: %s (DROP the stream, or ALTER STREAM ... RESTART, which creates it again)", e.Topic)
	}
	return fmt.Sprintf("input topic no longer exists: %s (DROP the stream, or create the topic again and ALTER STREAM ... RESTART)", e.Topic)
}

func (e *TopicGone) Is(target error) bool { return target == ErrTopicGone }

// writeGone turns err into a TopicGone when it is a write Kafka refused
// because its topic does not exist and the topic is indeed gone from the
// metadata. Without the look, a broker not yet aware of a new topic would
// pass for a deletion; and without the change, an exactly-once commit
// that failed on a deleted topic would be restarted in place (TxnAborted)
// and fail again, again and again.
func (s *Stage) writeGone(err error) error {
	var we *kafkaio.WriteError
	if !errors.As(err, &we) || !kafkaio.IsUnknownTopic(we.Err) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, perr := s.deps.Kafka.Partitions(ctx, we.Topic); perr != nil || n > 0 {
		return err
	}
	return &TopicGone{Topic: we.Topic, Output: true}
}

// ErrStopped answers a FLUSH sent to a stage that stopped.
var ErrStopped = errors.New("stopped")

// FlushPhase runs one phase of a FLUSH over the tasks this process owns.
// Reach (close false): each task reads its partition up to targets[p] and
// shares its own watermark. Close: each closes what a FLUSH that read its
// partition there closes (it is idle at its end) and commits. A FLUSH runs
// reach on every task of the stage, on every process, before close on
// any, so each closes on its peers' final watermarks.
//
// It returns the partitions it ran on. A task handed to another process
// meanwhile (a rebalance) is left out, not a failure: the process that runs
// it now answers for it, so the caller checks which partitions were
// covered.
func (s *Stage) FlushPhase(ctx context.Context, targets map[int32]int64, close bool) ([]int32, error) {
	// While the group reassigns, the tasks to flush are not known yet.
	select {
	case <-s.assignment():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	type sent struct {
		p int32
		r *flushReq
	}
	var reqs []sent
	for _, t := range s.ownTasks() {
		r := &flushReq{close: close, target: targets[t.p], done: make(chan error, 1)}
		select {
		case t.reqs <- r:
			reqs = append(reqs, sent{t.p, r})
		case <-t.done: // handed over, or the stage stops
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var covered []int32
	for _, q := range reqs {
		select {
		case err := <-q.r.done:
			switch {
			case errors.Is(err, errTaskClosed):
			case err != nil:
				return nil, err
			default:
				covered = append(covered, q.p)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if s.runCtx.Err() != nil {
		return nil, fmt.Errorf("%s: %w", s.cfg.Name, ErrStopped)
	}
	slices.Sort(covered)
	return covered, nil
}

// InputPartitions is how many partitions of its topic the stage was
// started on (its tasks across every process).
func (s *Stage) InputPartitions() int { return s.cfg.Partitions }

// Topic is the topic the stage reads.
func (s *Stage) Topic() string { return s.cfg.Topic }

// Group is the stage's consumer group.
func (s *Stage) Group() string { return s.cfg.Group }

// Partitions is how many tasks the stage runs.
func (s *Stage) Partitions() int {
	s.tmu.RLock()
	defer s.tmu.RUnlock()
	return len(s.tasks)
}

// Owned lists the partitions whose tasks run on this process.
func (s *Stage) Owned() []int32 {
	var out []int32
	for _, t := range s.ownTasks() {
		out = append(out, t.p)
	}
	slices.Sort(out)
	return out
}
