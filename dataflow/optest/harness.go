package optest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
)

// WatermarkMode says what moves a task's watermark.
type WatermarkMode uint8

const (
	// EventTime: the task's own, as a server's: the largest event time
	// its chain read minus Config.Delay, idleness confirmed on a fresh
	// end offset (Task.Idle), a FLUSH (Harness.Flush); or, for a chain
	// whose first operator is a dataflow.Clock (a hop's Markers), that
	// operator.
	EventTime WatermarkMode = iota
	// Scripted: the test's (Task.Advance), given to the operators as a
	// hop's markers give theirs; a restart starts without one.
	Scripted
)

// Config describes the stage a Harness runs.
type Config struct {
	// Name names the stage and its state ("s" when empty).
	Name string
	// Topic is the input topic ("in" when empty), of Partitions
	// partitions (1 when 0); Input is how row literals become its records.
	Topic      string
	Partitions int
	Input      Format
	// Ops builds partition p's operator chain, at every (re)open.
	Ops func(p int32) []dataflow.Op
	// Watermarks: what moves the watermark; Delay and IdleTimeout shape
	// the event time's (IdleTimeout 0: 5 s).
	Watermarks  WatermarkMode
	Delay       int64
	IdleTimeout time.Duration
	// CommitEvery is the commit interval (0: 1 s): a fetch or a tick
	// commits once the harness's clock has moved that far since the last
	// commit.
	CommitEvery time.Duration
	// ExactlyOnce: each commit is a Kafka transaction with the outputs.
	ExactlyOnce bool
	// Store tunes the state store (its FS is the harness's own).
	Store state.Options
	// Kafka is shared with other harnesses (nil: one of its own).
	Kafka *Kafka
	// Start is the clock's start (zero: 1970-01-01 00:16:40 UTC).
	Start time.Time
	// Log receives the runtime's logs (nil: discarded).
	Log *slog.Logger
}

// Harness runs one stage, a task per partition the test opens, as one
// process would: over an in-memory Pebble store (a crashable vfs.MemFS)
// and an in-memory Kafka. Every step runs on the test's goroutine through
// the runtime's own task loop (dataflow.Driver), and fails the test when
// the stage fails unless it is a Try step.
type Harness struct {
	tb      T
	cfg     Config
	k       *Kafka
	box     *outbox
	v       *view
	fs      *vfs.MemFS
	store   *state.Store
	metrics *dataflow.Metrics
	drv     *dataflow.Driver
	now     time.Time
	tasks   map[int32]*Task
	log     *slog.Logger
	newDisk bool
}

// T is the part of testing.TB the harness uses (an Example, which has
// no testing.TB, passes its own).
type T interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Cleanup(func())
}

// storeDir is where the store lives on the harness's file system.
const storeDir = "/state"

// New starts a harness; the test's cleanup stops it.
func New(tb T, cfg Config) *Harness {
	tb.Helper()
	if cfg.Name == "" {
		cfg.Name = "s"
	}
	if cfg.Topic == "" {
		cfg.Topic = "in"
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 1
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 5 * time.Second
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Unix(1000, 0)
	}
	if cfg.Ops == nil {
		tb.Fatal("optest: Config.Ops is required")
	}
	h := &Harness{tb: tb, cfg: cfg, k: cfg.Kafka, now: cfg.Start, tasks: map[int32]*Task{}, log: cfg.Log}
	if h.k == nil {
		h.k = NewKafka()
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.k.CreateTopic(cfg.Topic, cfg.Partitions)
	h.box = &outbox{internal: map[string]bool{h.changelog(): true, h.progress(): true}}
	h.v = &view{k: h.k, box: h.box}
	h.fs = vfs.NewCrashableMem()
	if err := h.openStore(); err != nil {
		tb.Fatal(err)
	}
	h.start()
	tb.Cleanup(h.close)
	return h
}

func (h *Harness) changelog() string { return h.cfg.Name + "-changelog" }
func (h *Harness) progress() string  { return h.cfg.Name + "-progress" }

// Group is the stage's consumer group, where its commits' offsets go.
func (h *Harness) Group() string { return "optest-" + h.cfg.Name }

func (h *Harness) openStore() error {
	opts := h.cfg.Store
	opts.FS = h.fs
	st, err := state.Open(storeDir, h.log, opts)
	if err != nil {
		return fmt.Errorf("optest: open the store: %w", err)
	}
	h.store = st
	return nil
}

// start begins a process's life: a driver of the stage, new metrics.
func (h *Harness) start() {
	cfg := h.cfg
	h.metrics = dataflow.NewMetrics(prometheus.NewRegistry())
	sc := dataflow.StageConfig{
		Name: cfg.Name, State: cfg.Name, Group: h.Group(), Topic: cfg.Topic, Partitions: cfg.Partitions,
		Ops: func(p int32) []dataflow.Op {
			t := h.tasks[p]
			return append(cfg.Ops(p), &capture{t: t})
		},
		Delay: cfg.Delay, IdleTimeout: cfg.IdleTimeout, CommitEvery: cfg.CommitEvery,
		ExactlyOnce: cfg.ExactlyOnce, ProgressTopic: h.progress(), Changelog: h.changelog(), Holder: 1,
	}
	deps := dataflow.Deps{Kafka: h.v, Store: h.store, Metrics: h.metrics, Now: func() time.Time { return h.now }, Log: h.log}
	drv, err := dataflow.NewDriver(sc, deps)
	if err != nil {
		h.tb.Fatal(err)
	}
	h.drv = drv
}

// close ends the harness (the test's cleanup): its tasks stop, its store
// closes.
func (h *Harness) close() {
	if h.drv != nil {
		h.drv.Close()
	}
	if h.store == nil {
		return // a reopen failed, and failed the test
	}
	if err := h.store.Close(); err != nil {
		h.tb.Errorf("optest: close the store: %v", err)
	}
}

// Task is partition p's task, opened (its state restored from the store)
// on first use.
func (h *Harness) Task(p int32) *Task {
	h.tb.Helper()
	t := h.tasks[p]
	if t == nil {
		t = &Task{h: h, p: p}
		h.tasks[p] = t
	}
	if h.drv.Env(p) == nil {
		if err := h.open(t); err != nil {
			h.tb.Fatal(err)
		}
	}
	return t
}

// open opens t's task under the current driver.
func (h *Harness) open(t *Task) error {
	var clock dataflow.Clock
	if h.cfg.Watermarks == Scripted {
		t.clock = &scripted{}
		clock = t.clock
	}
	h.v.opening = t.p
	return h.drv.Open(context.Background(), t.p, clock)
}

// opened lists the partitions whose tasks the test opened.
func (h *Harness) opened() []int32 {
	var ps []int32
	for p := range h.tasks {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// Restart stops the process cleanly (each task's last commit, as a
// handover's) and starts it again: the tasks the test opened open again,
// restored from the store (an empty one after LoseDisk: from the
// changelog).
func (h *Harness) Restart() {
	h.tb.Helper()
	h.drv.Close()
	h.reopen(h.store.Close)
}

// Crash kills the process: nothing more is committed, the operators'
// memory is lost, and so is whatever the store had not synced; open
// transactions abort. The tasks the test opened open again from what
// their commits left (LoseDisk: from the changelog alone).
func (h *Harness) Crash() {
	h.tb.Helper()
	for _, p := range h.opened() {
		h.drv.Crash(p)
	}
	h.drv.Close()
	h.reopen(func() error {
		// What a power cut leaves: the synced writes only.
		crashed := h.fs.CrashClone(vfs.CrashCloneCfg{})
		err := h.store.Close()
		h.fs = crashed
		return err
	})
}

// LoseDisk makes the next Restart or Crash come back on an empty disk,
// as on another node: each task restores its state from the changelog
// its commits wrote.
func (h *Harness) LoseDisk() { h.newDisk = true }

// Offline stops the process cleanly, runs fn over the store's directory
// on its file system (an offline tool, or a data dir written by an
// earlier release), and starts it again.
func (h *Harness) Offline(fn func(fs vfs.FS, dir string) error) {
	h.tb.Helper()
	h.drv.Close()
	h.reopen(func() error {
		if err := h.store.Close(); err != nil {
			return err
		}
		return fn(h.fs, storeDir)
	})
}

// reopen ends the store (down), then starts a new process and reopens
// the tasks.
func (h *Harness) reopen(down func() error) {
	h.tb.Helper()
	err := down()
	h.store, h.drv = nil, nil
	if err != nil {
		h.tb.Fatalf("optest: close the store: %v", err)
	}
	if h.newDisk {
		h.fs, h.newDisk = vfs.NewCrashableMem(), false
	}
	if err := h.openStore(); err != nil {
		h.tb.Fatal(err)
	}
	h.start()
	for _, p := range h.opened() {
		if err := h.open(h.tasks[p]); err != nil {
			h.tb.Fatal(err)
		}
	}
}

// Flush runs a FLUSH: every open task reads its partition to its end,
// then closes what a FLUSH closes and commits.
func (h *Harness) Flush() {
	h.tb.Helper()
	if err := h.TryFlush(); err != nil {
		h.tb.Fatal(err)
	}
}

// TryFlush is Flush, returning the failure.
func (h *Harness) TryFlush() error {
	targets := map[int32]int64{}
	for _, p := range h.opened() {
		if err := h.tasks[p].TryPoll(); err != nil {
			return err
		}
		targets[p] = h.k.End(h.cfg.Topic, p)
	}
	return h.drv.Flush(context.Background(), targets)
}

// Take removes and returns what every task made visible since the last
// Take.
func (h *Harness) Take() Output { return h.box.take(-1) }

// Err is the stage's failure in this process's life (nil: none).
func (h *Harness) Err() error { return h.drv.Err() }

// Kafka is the harness's Kafka.
func (h *Harness) Kafka() *Kafka { return h.k }

// Store is the state store (a new one after each Restart or Crash).
func (h *Harness) Store() *state.Store { return h.store }

// Metrics are this process's metrics (new after each Restart or Crash).
func (h *Harness) Metrics() *dataflow.Metrics { return h.metrics }

// Driver is the driver of this process's life, for what the harness does
// not wrap (the stage's watermark, its peers).
func (h *Harness) Driver() *dataflow.Driver { return h.drv }

// Now is the harness's clock, which moves only when the test says
// (Elapse, Task.Tick, Task.Idle).
func (h *Harness) Now() time.Time { return h.now }

// Elapse moves the clock by d.
func (h *Harness) Elapse(d time.Duration) { h.now = h.now.Add(d) }

// Records encodes row literals as records of partition p of the input
// topic, at offsets from off on (Format.Records).
func (h *Harness) Records(p int32, off int64, rows ...string) []*kafkaio.Record {
	h.tb.Helper()
	recs, err := h.cfg.Input.Records(h.cfg.Topic, p, off, rows...)
	if err != nil {
		h.tb.Fatal(err)
	}
	return recs
}

// Task drives partition p's task. It stays valid across Restart and
// Crash: it then drives the task that reopened.
type Task struct {
	h       *Harness
	p       int32
	clock   *scripted
	batches []*dataflow.Batch
}

// Push writes row literals (Config.Input) at offsets from off on into the
// input partition, and hands them to the task as one fetch.
func (t *Task) Push(off int64, rows ...string) {
	t.h.tb.Helper()
	t.PushRecords(t.h.Records(t.p, off, rows...)...)
}

// PushRecords is Push of records built by hand (copies of them, in the
// task's input topic and partition, whatever theirs).
func (t *Task) PushRecords(recs ...*kafkaio.Record) {
	t.h.tb.Helper()
	if err := t.TryPush(recs...); err != nil {
		t.h.tb.Fatal(err)
	}
}

// TryPush is PushRecords, returning the stage's failure.
func (t *Task) TryPush(recs ...*kafkaio.Record) error {
	if len(recs) == 0 {
		return nil
	}
	// The task gets copies in its own topic and partition: the caller's
	// records are left as they are (tests share an input among
	// harnesses running in parallel).
	in := make([]*kafkaio.Record, len(recs))
	for i, r := range recs {
		c := *r
		c.Topic, c.Partition = t.h.cfg.Topic, t.p
		in[i] = &c
		t.h.k.put(&c)
	}
	fp := kafkaio.FetchPart{Partition: t.p, Records: in, Next: in[len(in)-1].Offset + 1,
		HighWatermark: t.h.k.End(t.h.cfg.Topic, t.p)}
	return t.h.drv.Fetch(context.Background(), fp)
}

// Process hands a batch of rows to the chain's first operator (a sink, a
// projection: an operator whose input is rows, not records).
func (t *Task) Process(b *dataflow.Batch) {
	t.h.tb.Helper()
	if err := t.h.drv.Process(context.Background(), t.p, b); err != nil {
		t.h.tb.Fatal(err)
	}
}

// Poll hands the task everything in its input partition from where it
// stands, as its consumer would fetch it: after a restart, what it must
// read again.
func (t *Task) Poll() {
	t.h.tb.Helper()
	if err := t.TryPoll(); err != nil {
		t.h.tb.Fatal(err)
	}
}

// TryPoll is Poll, returning the stage's failure.
func (t *Task) TryPoll() error {
	h := t.h
	end := h.k.End(h.cfg.Topic, t.p)
	fp := kafkaio.FetchPart{Partition: t.p, Records: h.k.Read(h.cfg.Topic, t.p, h.drv.Next(t.p)), Next: end, HighWatermark: end}
	return h.drv.Fetch(context.Background(), fp)
}

// Advance sets the scripted watermark (SetWatermark) and commits: the
// operators see it, as they see any watermark, at the commit.
func (t *Task) Advance(wm int64) {
	t.h.tb.Helper()
	t.SetWatermark(wm)
	t.Commit()
}

// SetWatermark sets the scripted watermark (Config.Watermarks Scripted),
// which the operators see at the task's next commit. A watermark never
// moves back: one below the last leaves it where it is.
func (t *Task) SetWatermark(wm int64) {
	t.h.tb.Helper()
	if t.clock == nil {
		t.h.tb.Fatal("optest: a scripted watermark needs Config.Watermarks = Scripted")
	}
	if !t.clock.has || wm > t.clock.wm {
		t.clock.wm, t.clock.has = wm, true
	}
}

// Commit makes the task commit now.
func (t *Task) Commit() {
	t.h.tb.Helper()
	if err := t.TryCommit(); err != nil {
		t.h.tb.Fatal(err)
	}
}

// TryCommit is Commit, returning the failure (the stage's, or a stall).
func (t *Task) TryCommit() error { return t.h.drv.Commit(context.Background(), t.p) }

// Tick moves the clock by d, then runs one tick of the task's loop: it
// confirms idleness, and commits when one is due.
func (t *Task) Tick(d time.Duration) {
	t.h.tb.Helper()
	t.h.Elapse(d)
	if err := t.h.drv.Tick(context.Background(), t.p); err != nil {
		t.h.tb.Fatal(err)
	}
}

// Idle lets the idle timeout pass with nothing read, and ticks: a task
// that has read its partition to its end confirms it idle on a fresh end
// offset, and commits with its watermark as idleness moves it.
func (t *Task) Idle() {
	t.h.tb.Helper()
	t.Tick(t.h.cfg.IdleTimeout)
}

// Take removes and returns what the task made visible since the last
// Take: at-least-once, what Kafka acknowledged (at its commits' flushes);
// exactly-once, what its committed transactions held.
func (t *Task) Take() Output { return t.h.box.take(t.p) }

// Batches removes and returns the batches the task's last operator
// handed on (a chain without a sink: its output).
func (t *Task) Batches() []*dataflow.Batch {
	out := t.batches
	t.batches = nil
	return out
}

// Counts are the task's counters: what its commits counted and what it
// counted since.
func (t *Task) Counts() dataflow.Counters { return t.env().Counts.Load() }

// Env is the task's environment.
func (t *Task) Env() *dataflow.Env { return t.env() }

func (t *Task) env() *dataflow.Env {
	t.h.tb.Helper()
	env := t.h.drv.Env(t.p)
	if env == nil {
		t.h.tb.Fatalf("optest: partition %d is not open", t.p)
	}
	return env
}

// Ops is the task's operator chain, as Config.Ops built it at its last
// open.
func (t *Task) Ops() []dataflow.Op {
	ops := t.h.drv.Ops(t.p)
	return ops[:len(ops)-1] // the capture
}

// Next is the next offset the task reads.
func (t *Task) Next() int64 { return t.h.drv.Next(t.p) }

// Watermark is the watermark the task last gave its operators.
func (t *Task) Watermark() dataflow.Watermark { return t.h.drv.Given(t.p) }

// Committed is what the task's last commit recorded in the store: where
// it restarts (Offset), how far it read (Applied), what it closed.
func (t *Task) Committed() state.PartitionMeta {
	t.h.tb.Helper()
	metas, err := t.h.store.Partitions(t.h.cfg.Name)
	if err != nil {
		t.h.tb.Fatal(err)
	}
	return metas[t.p]
}

// scripted is a Scripted task's watermark.
type scripted struct {
	wm  int64
	has bool
}

func (s *scripted) Time() (int64, bool) { return s.wm, s.has }

// capture ends every chain: it keeps the batches the last operator hands
// on.
type capture struct{ t *Task }

var _ dataflow.Op = (*capture)(nil)

func (c *capture) Open(context.Context, *dataflow.Env) error { return nil }

func (c *capture) Process(_ context.Context, b *dataflow.Batch) (*dataflow.Batch, error) {
	c.t.batches = append(c.t.batches, b)
	return nil, nil
}

func (c *capture) OnWatermark(context.Context, dataflow.Watermark) (*dataflow.Batch, error) {
	return nil, nil
}

func (c *capture) Commit(context.Context, *dataflow.Commit) error { return nil }

func (c *capture) Close() {}
