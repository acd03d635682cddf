package dataflow

import (
	"context"
	"fmt"

	"github.com/turbinesql/turbinesql/kafkaio"
)

// Driver runs the tasks of one stage on its caller's goroutine, one event
// at a time. The events are those a task's loop (task.run) waits for: a
// fetch, a tick, a FLUSH, a stop; each is handled by the same methods the
// loop calls, in the order the caller scripts, with no consumer group and
// no timers. That makes an operator's behaviour under the real commit
// point (what it produced acknowledged, then its state, offset and
// watermark written together) testable step by step: dataflow/optest
// builds its harness on it. A server runs stages with StartStage.
//
// A Driver is one process's life: after a failure (Err) or a crash, the
// caller opens a new one over the same store and Kafka, as a restarted
// process would.
type Driver struct{ s *Stage }

// NewDriver is a driver of the stage cfg over deps, with no task open.
func NewDriver(cfg StageConfig, deps Deps) (*Driver, error) {
	if cfg.Changelog == "" {
		return nil, fmt.Errorf("drive %s: no changelog topic", cfg.Name)
	}
	return &Driver{s: newStage(cfg, deps)}, nil
}

// Open opens partition p's task as an assignment does (fencing its
// transactional id, bringing its state up to the changelog, restoring its
// operators), then starts it as its loop starts (a first commit). clock,
// when set, decides the task's watermark, as a hop's markers do; nil: the
// partition's event time and idleness do (window.Partition).
func (d *Driver) Open(ctx context.Context, p int32, clock Clock) error {
	s := d.s
	if s.task(p) != nil {
		return fmt.Errorf("drive %s: partition %d is open already", s.cfg.Name, p)
	}
	t, err := s.fenceTask(ctx, p)
	if err != nil {
		return fmt.Errorf("drive %s partition %d: %w", s.cfg.Name, p, err)
	}
	pos, err := s.positions(ctx, []*task{t})
	if err == nil {
		err = s.openTask(ctx, t, pos)
	}
	if err != nil {
		t.closeProducers()
		return fmt.Errorf("drive %s partition %d: %w", s.cfg.Name, p, err)
	}
	if clock != nil {
		t.clock = clock
	}
	s.started(t)
	t.begin(ctx)
	return d.Err()
}

// opened is partition p's open task, or an error naming it.
func (d *Driver) opened(p int32) (*task, error) {
	if t := d.s.task(p); t != nil {
		return t, nil
	}
	return nil, fmt.Errorf("drive %s: partition %d is not open", d.s.cfg.Name, p)
}

// Fetch hands one fetch to its partition's task, as the poll loop does:
// the task pushes it through its chain, and commits if the commit
// interval has passed. A stalled task (a full disk) reads nothing: its
// stall is returned.
func (d *Driver) Fetch(ctx context.Context, fp kafkaio.FetchPart) error {
	t, err := d.opened(fp.Partition)
	if err != nil {
		return err
	}
	if t.stalled != nil {
		return fmt.Errorf("%s stalled: %w", d.s.cfg.Name, t.stalled)
	}
	t.fetched(ctx, fp)
	return d.Err()
}

// Process hands b to the first operator of partition p's chain, as the
// loop hands each operator what the one before it made: for operators
// whose input is rows, not records (a sink, a projection, a join's side).
// The offset does not move; the next commit writes what b changed.
func (d *Driver) Process(ctx context.Context, p int32, b *Batch) error {
	t, err := d.opened(p)
	if err != nil {
		return err
	}
	b.Partition = p
	t.try(ctx, func() error {
		t.uncommitted = true
		return t.push(ctx, 0, b)
	})
	return d.Err()
}

// Tick is one tick of partition p's loop: it confirms idleness on a fresh
// end offset, and commits if a commit is due (the interval, a moved
// watermark, an early fire, a stall's retry).
func (d *Driver) Tick(ctx context.Context, p int32) error {
	t, err := d.opened(p)
	if err != nil {
		return err
	}
	t.ticked(ctx)
	return d.stalledOr(t)
}

// Commit makes partition p's task commit now, as its loop does at start:
// the operators see the watermark, what they produced is acknowledged,
// their state, the offset and the watermark are written.
func (d *Driver) Commit(ctx context.Context, p int32) error {
	t, err := d.opened(p)
	if err != nil {
		return err
	}
	t.try(ctx, func() error { return t.commit(ctx, false) })
	return d.stalledOr(t)
}

// stalledOr is the stage's failure, or t's stall.
func (d *Driver) stalledOr(t *task) error {
	if err := d.Err(); err != nil {
		return err
	}
	if t.stalled != nil {
		return fmt.Errorf("%s stalled: %w", d.s.cfg.Name, t.stalled)
	}
	return nil
}

// Flush runs a FLUSH over the open tasks, as FlushPhase does: every task
// reaches targets[p] (it must have read that far: fetch first), then every
// task closes what a FLUSH that read it there closes, and commits.
func (d *Driver) Flush(ctx context.Context, targets map[int32]int64) error {
	for _, phase := range []bool{false, true} {
		for _, p := range d.s.Owned() {
			t := d.s.task(p)
			r := &flushReq{close: phase, target: targets[p], done: make(chan error, 1)}
			if left := t.answer(ctx, []*flushReq{r}); len(left) > 0 {
				return fmt.Errorf("FLUSH of %s: partition %d has read to offset %d, short of the target %d", d.s.cfg.Name, p, t.part.Next, targets[p])
			}
			if err := <-r.done; err != nil {
				return err
			}
		}
	}
	return nil
}

// Stop stops partition p's task as a handover does: a last commit if it
// has read anything since its last, then its operators close.
func (d *Driver) Stop(p int32) {
	if t := d.take(p); t != nil {
		t.finish()
		t.close()
	}
}

// Crash drops partition p's task as a lost partition is dropped: nothing
// more is committed, its operators close, and what they held that no
// commit wrote is gone. (The caller models a crash of the disk itself by
// reopening the store from what it synced.)
func (d *Driver) Crash(p int32) {
	if t := d.take(p); t != nil {
		t.noFinal.Store(true)
		t.close()
	}
}

// take removes partition p's task from the stage (nil: none).
func (d *Driver) take(p int32) *task {
	ts := d.s.takeTasks(d.s.tasks, []int32{p})
	if len(ts) == 0 {
		return nil
	}
	d.s.mu.Lock()
	delete(d.s.wms, p)
	delete(d.s.stalls, p)
	d.s.mu.Unlock()
	return ts[0]
}

// Close stops every open task (Stop) and the stage.
func (d *Driver) Close() {
	for _, p := range d.s.Owned() {
		d.Stop(p)
	}
	d.s.cancel()
}

// Err is the stage's failure (nil while it runs): a Driver that failed
// handles no more events; open a new one, as a restart does.
func (d *Driver) Err() error { return d.s.Err() }

// Stage is the stage the driver runs (its watermark, its peers).
func (d *Driver) Stage() *Stage { return d.s }

// Env is partition p's task's environment (nil: not open).
func (d *Driver) Env(p int32) *Env {
	if t := d.s.task(p); t != nil {
		return t.env
	}
	return nil
}

// Ops is partition p's task's operator chain (nil: not open).
func (d *Driver) Ops(p int32) []Op {
	if t := d.s.task(p); t != nil {
		return t.ops
	}
	return nil
}

// Next is the next offset partition p's task reads (0: not open).
func (d *Driver) Next(p int32) int64 {
	if t := d.s.task(p); t != nil {
		return t.part.Next
	}
	return 0
}

// Given is the watermark partition p's task last gave its operators at a
// commit (zero: not open, or none yet).
func (d *Driver) Given(p int32) Watermark {
	if t := d.s.task(p); t != nil {
		return t.given
	}
	return Watermark{}
}
