package dataflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	NewConsumer(topic string, assign map[int32]int64, maxPoll int) (Consumer, error)
	NewPending() Pending
	CommitOffsets(ctx context.Context, group, topic string, offsets map[int32]int64) error
	// NewTxnProducer opens a task's transactional producer, fencing
	// earlier holders of id; StableOffsets reads what the last committed
	// transactions left in a consumer group (exactly-once stages only).
	NewTxnProducer(ctx context.Context, id string) (TxnProducer, error)
	StableOffsets(ctx context.Context, group, topic string) (map[int32]kafkaio.Committed, error)
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

// Consumer reads the partitions of one topic.
type Consumer interface {
	Poll(ctx context.Context) ([]kafkaio.FetchPart, error)
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
	// AfterTxn, when set, runs between an exactly-once task's transaction
	// commit and its state write: the narrowest crash window, where the
	// audit injects its crashes (TURBINESQL_CRASH_AFTER_TXN).
	AfterTxn func()
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
	// Ops builds the operator chain of partition p's task.
	Ops func(p int32) []Op
	// Delay and IdleTimeout shape the event time of tasks whose chain has
	// no Clock of its own (window.Partition).
	Delay       int64
	IdleTimeout time.Duration
	Stats       *Stats
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
	// MetadataEvery is how often the stage looks for added partitions (0:
	// every 5 s).
	MetadataEvery time.Duration
	// TxnID, when set, makes the stage exactly-once: partition p's task
	// produces through the transactional producer TxnID(p), each of its
	// commits is one transaction (records, a progress record to
	// ProgressTopic, the input offset to Group), and a restart replays
	// into state, producing nothing, what a transaction committed after
	// the state's last write.
	TxnID         func(p int32) string
	ProgressTopic string
	// Holder names this process in every commit's progress (a random
	// number per server run), so a server whose commit failed can tell
	// whether another one has committed the stage's partitions since.
	Holder uint64
	// OnFail is called once, on its own goroutine, when the stage fails:
	// an error that is a *TxnAborted can be cured by starting the stage
	// again from its state.
	OnFail func(err error)
}

// Stage runs a task per partition of its topic.
type Stage struct {
	cfg   StageConfig
	deps  Deps
	peers *window.Peers
	tasks map[int32]*task
	cons  Consumer

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	err    error
	stalls map[int32]error // tasks stalled on a full disk
	wms    map[int32]Watermark
	endsAt time.Time
	ends   map[int32]int64
	endsMu sync.Mutex
}

// StartStage restores every task from the store and starts reading.
func StartStage(ctx context.Context, cfg StageConfig, deps Deps) (*Stage, error) {
	s := &Stage{cfg: cfg, deps: deps, peers: window.NewPeers(), tasks: map[int32]*task{}, wms: map[int32]Watermark{}, stalls: map[int32]error{}}
	metas, err := deps.Store.Partitions(cfg.State)
	if err != nil {
		return nil, err
	}
	ends, err := deps.Kafka.EndOffsets(ctx, cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	log := deps.Log.With("stage", cfg.Name)
	txns, committed, err := openTxns(ctx, cfg, deps)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	closeTxns := func() {
		for _, tx := range txns {
			tx.Close()
		}
	}
	assign := map[int32]int64{}
	for p := int32(0); p < int32(cfg.Partitions); p++ {
		m := metas[p]
		part := window.NewPartition(p, cfg.Delay, cfg.IdleTimeout, deps.Now, s.peers, m.Offset, m.MaxTime, m.HasTime)
		if m.HasClosed {
			part.Restore(m.Closed)
		}
		part.OnIdle = idleLogger(log, cfg.Topic, p)
		// Know the partition's end before the first fetch: a partition
		// whose end is unknown would count as read to its end.
		part.SawEnd(ends[p])
		t := &task{st: s, p: p, ops: cfg.Ops(p), part: part,
			in: make(chan kafkaio.FetchPart, 1), reqs: make(chan *flushReq), done: make(chan struct{}), groupOff: -1}
		if tx := txns[p]; tx != nil {
			t.txn, t.out = tx, tx
			delete(txns, p) // the task closes it
			t.planReplay(m, committed[p], log)
		} else {
			t.out = deps.Kafka.NewPending()
		}
		t.sw = &switchOut{Producer: t.out}
		t.env = &Env{Name: cfg.Name, State: cfg.State, Scope: state.Scope(cfg.State, p), Partition: p, Partitions: cfg.Partitions, Restored: m, Store: deps.Store, Out: t.sw,
			Metrics: deps.Metrics, Stats: cfg.Stats, Now: deps.Now, Log: log, ExactlyOnce: t.txn != nil}
		if err := t.open(ctx); err != nil {
			t.close()
			for _, o := range s.tasks {
				o.close()
			}
			closeTxns()
			return nil, fmt.Errorf("start %s partition %d: %w", cfg.Name, p, err)
		}
		s.tasks[p] = t
		assign[p] = m.Offset
		if m.HasClosed {
			s.wms[p] = Watermark{WM: m.Closed, Has: true}
		}
	}
	cons, err := deps.Kafka.NewConsumer(cfg.Topic, assign, cfg.MaxPoll)
	if err != nil {
		for _, t := range s.tasks {
			t.close()
		}
		closeTxns()
		return nil, err
	}
	s.cons = cons
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for _, t := range s.tasks {
		s.wg.Add(1)
		go func(t *task) { defer s.wg.Done(); t.run(runCtx) }(t)
	}
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.poll(runCtx) }()
	go func() { defer s.wg.Done(); s.watch(runCtx) }()
	return s, nil
}

// Stop lets every task finish its batch and commit, then closes.
func (s *Stage) Stop() {
	s.cancel()
	s.wg.Wait()
	s.cons.Close()
}

// poll hands each fetched partition to its task.
func (s *Stage) poll(ctx context.Context) {
	retrying := false // after a fetch error
	for {
		parts, err := s.cons.Poll(ctx)
		if ctx.Err() != nil {
			return
		}
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
		for _, fp := range parts {
			t := s.tasks[fp.Partition]
			if t == nil {
				continue
			}
			select {
			case t.in <- fp:
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
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.metadataEvery()):
		}
		for topic, was := range counts {
			n, err := s.deps.Kafka.Partitions(ctx, topic)
			if err == nil && n == 0 {
				// Twice in a row, so a metadata answer from a broker still
				// catching up is not taken for a deletion.
				if gone[topic]++; gone[topic] >= 2 {
					s.fail(fmt.Errorf("%w: %s (DROP the stream, or create the topic again and ALTER STREAM ... RESTART)", ErrTopicGone, topic))
					return
				}
				continue
			}
			delete(gone, topic)
			if err != nil || n == was {
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
	s.mu.Lock()
	first := s.err == nil
	if first {
		s.err = err
	}
	s.mu.Unlock()
	if first {
		s.deps.Log.Error("stage failed", "stage", s.cfg.Name, "err", err)
		if s.cfg.OnFail != nil {
			go s.cfg.OnFail(err)
		}
	}
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
// (one ListOffsets serves every task asking at once).
func (s *Stage) freshEnd(ctx context.Context, p int32, after time.Time) (int64, error) {
	s.endsMu.Lock()
	defer s.endsMu.Unlock()
	if s.ends == nil || s.endsAt.Before(after) {
		at := s.now()
		ends, err := s.deps.Kafka.EndOffsets(ctx, s.cfg.Topic)
		if err != nil {
			return 0, err
		}
		s.ends, s.endsAt = ends, at
	}
	return s.ends[p], nil
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

// ErrTopicGone fails a stage whose input topic (or a topic it depends on)
// was deleted: reading it would wait forever.
var ErrTopicGone = errors.New("input topic no longer exists")

// ErrStopped answers a FLUSH sent to a stage that stopped.
var ErrStopped = errors.New("stopped")

// Flush returns once every task has read its partition up to targets,
// closed what that closes (a FLUSH reads partitions to their end: they
// are idle) and committed. Every task reaches its target before any
// closes, so each closes on its peers' final watermarks.
func (s *Stage) Flush(ctx context.Context, targets map[int32]int64) error {
	for _, phase := range []bool{false, true} {
		var reqs []*flushReq
		for p, t := range s.tasks {
			r := &flushReq{close: phase, target: targets[p], done: make(chan error, 1)}
			select {
			case t.reqs <- r:
			case <-t.done:
				return fmt.Errorf("%s: %w", s.cfg.Name, ErrStopped)
			case <-ctx.Done():
				return ctx.Err()
			}
			reqs = append(reqs, r)
		}
		for _, r := range reqs {
			select {
			case err := <-r.done:
				if err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// Topic is the topic the stage reads.
func (s *Stage) Topic() string { return s.cfg.Topic }

// Partitions is how many tasks the stage runs.
func (s *Stage) Partitions() int { return len(s.tasks) }
