package dataflow

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/window"
)

// task runs the operator chain of one input partition of a stage.
type task struct {
	st    *Stage
	p     int32
	env   *Env
	ops   []Op
	clock Clock // the chain's own watermark (behind a hop); nil: part's
	part  *window.Partition
	out   Pending
	sw    *switchOut  // out as the operators see it
	txn   TxnProducer // out, when the stage is exactly-once
	// clog writes the changelog and commits the input offset: txn, or
	// (at-least-once) a transactional producer of its own, so a commit's
	// changes appear whole or not at all.
	clog TxnProducer
	// opened are changes operators made at open, outside a commit (a
	// migration, a cleanup): the first commit logs them. bootstrap: the
	// state on this disk predates the changelog, so the first commit logs
	// all of it.
	opened    []state.Change
	bootstrap bool
	// cancel stops the task; noFinal: it was lost, not handed over, so it
	// must not commit on its way out.
	cancel  context.CancelFunc
	noFinal atomic.Bool

	// An exactly-once task replays up to replayTo (0: no replay), producing
	// nothing, then gives its operators replayWM (txn.go).
	replayTo int64
	replayWM Watermark
	replayed int

	in   chan kafkaio.FetchPart
	reqs chan *flushReq
	done chan struct{}

	uncommitted bool
	// broken: a commit failed after the operators had handed over their
	// changes (closed windows, deletions, dirty groups) to a batch that
	// was never written. Their memory no longer holds what the next
	// commit would need, so this task commits nothing more; the stage
	// restarts from the state (or the process stops) instead.
	broken     bool
	lastCommit time.Time
	// stalled: the last commit found the disk full. The task reads nothing
	// more and retries its commit every tick until there is room again.
	stalled error
	given   Watermark // the watermark last given to the operators
	// shared is the own watermark last published to the app's other
	// processes (Deps.Watermarks).
	shared   int64
	sharedOK bool

	batchSeconds prometheus.Observer // looked up once, not per batch
	lag          prometheus.Gauge
	// counts are the task's counters (SHOW STREAMS), committed with its
	// state (stats.go).
	counts *TaskCounts
}

// commitTimeout bounds one commit's wait for Kafka: how long its records
// in flight may go unacknowledged (commitContext), and the transaction's
// end (the records left in flight then are at most kafkaio's batchBound).
const commitTimeout = 30 * time.Second

// commitMax bounds a commit in all, whatever it waits on: a commit of
// hundreds of millions of records could need more.
const commitMax = 10 * time.Minute

// stalledProducer is a producer that tells when Kafka has stopped
// acknowledging its records (kafkaio.Pending.Stalled).
type stalledProducer interface {
	Stalled(d time.Duration) bool
}

// commitContext is the context of one commit, apart from parent's end:
// it ends when Kafka has acknowledged none of the task's records in flight
// for commitTimeout, or after commitMax. Not after a fixed time: a commit that closes a window
// of millions of groups writes panes and changelog for longer than that
// while Kafka answers all along (at 10^7 keys with a 1 GB cache, a close
// outran 30 s, failed its stream, and would have again at every restart).
func (t *task) commitContext(parent context.Context) (context.Context, context.CancelFunc) {
	capped, uncap := context.WithTimeout(context.WithoutCancel(parent), commitMax)
	ctx, cancel := context.WithCancelCause(capped)
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for _, p := range []Pending{t.out, t.clog} {
				if s, ok := p.(stalledProducer); ok && s.Stalled(commitTimeout) {
					cancel(fmt.Errorf("Kafka acknowledged none of the commit's records for %s: %w", commitTimeout, context.DeadlineExceeded))
					return
				}
			}
		}
	}()
	return ctx, func() { close(stop); cancel(nil); uncap() }
}

// errBroken refuses a commit after one that failed half-way (task.broken).
var errBroken = errors.New("an earlier commit failed after the operators handed over their changes; the stream must restart from its state")

// errTaskClosed answers a FLUSH request to a task that closed before it
// could answer (handed over, or its stage stopped).
var errTaskClosed = errors.New("task closed")

// flushReq asks a task to reach target (phase reach), or to close what a
// FLUSH that read it to target closes and commit (phase close).
type flushReq struct {
	close  bool
	target int64
	done   chan error
}

func (t *task) open(ctx context.Context) error {
	t.batchSeconds = t.env.Metrics.BatchSeconds.WithLabelValues(t.env.Name)
	t.lag = t.env.Metrics.ConsumerLag.WithLabelValues(t.env.Name, t.st.cfg.Topic, strconv.Itoa(int(t.p)))
	for _, op := range t.ops {
		if err := op.Open(ctx, t.env); err != nil {
			return err
		}
	}
	if c, ok := t.ops[0].(Clock); ok {
		t.clock = c
	}
	return nil
}

func (t *task) close() {
	// A task that ends without confirming its last claims (its final
	// commit failed or was not tried) cannot vouch for them.
	t.each(Provisional.Abandoned)
	for _, op := range t.ops {
		op.Close()
	}
	t.closeProducers()
	// From now on the stream's counts read what the task last committed
	// (what it counted since is read, and counted, again by whoever runs
	// the partition next).
	if st := t.st.cfg.Stats; st != nil {
		st.closed(t.st.cfg.State, t.p, t.counts)
	}
}

func (t *task) closeProducers() { t.clog.Close() }

// each calls f on the task's Provisional operators.
func (t *task) each(f func(Provisional)) {
	for _, op := range t.ops {
		if p, ok := op.(Provisional); ok {
			f(p)
		}
	}
}

// run is the task's loop: batches, ticks (commit cadence, idleness, early
// fires) and FLUSH requests, until ctx ends; then a last commit, so a
// clean stop replays nothing. Each event is handled by one method (begin,
// fetched, ticked, answer, finish), which a Driver calls one at a time:
// the loop itself only chooses the next event.
func (t *task) run(ctx context.Context) {
	defer close(t.done)
	defer t.close()
	tick := time.NewTicker(t.st.tickEvery())
	defer tick.Stop()
	var pending []*flushReq
	t.begin(ctx)
	for {
		select {
		case <-ctx.Done():
			for _, r := range pending {
				r.done <- errTaskClosed
			}
			t.finish()
			return
		case fp := <-t.inUnlessStalled():
			t.fetched(ctx, fp)
		case <-tick.C:
			t.ticked(ctx)
		case r := <-t.reqs:
			pending = append(pending, r)
		}
		pending = t.answer(ctx, pending)
	}
}

// begin starts the task's loop: readers of a hop hear from every source
// partition at once, and windows already due at start close at once.
func (t *task) begin(ctx context.Context) {
	t.lastCommit = t.st.now()
	t.try(ctx, func() error { return t.commit(ctx, false) })
}

// fetched pushes one fetch through the chain, and commits when the commit
// interval has passed.
func (t *task) fetched(ctx context.Context, fp kafkaio.FetchPart) {
	start := time.Now()
	t.try(ctx, func() error { return t.process(ctx, fp) })
	if t.uncommitted && t.st.now().Sub(t.lastCommit) >= t.st.commitEvery() {
		t.try(ctx, func() error { return t.commit(ctx, false) })
	}
	t.batchSeconds.Observe(time.Since(start).Seconds())
}

// ticked is a tick of the loop's ticker (onTick).
func (t *task) ticked(ctx context.Context) {
	t.try(ctx, func() error { return t.onTick(ctx) })
}

// finish is a clean stop's last commit, so the next start replays
// nothing; a task that was lost (noFinal), broke or whose stage failed
// commits nothing more.
func (t *task) finish() {
	if t.uncommitted && t.st.Err() == nil && !t.broken && !t.noFinal.Load() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := t.commit(cctx, false); err != nil {
			t.env.Log.Warn("final commit failed; the input since the last commit will be read again", "partition", t.p, "err", err)
		}
		cancel()
	}
}

// try runs f unless the stage has failed, and fails the stage on error;
// a full disk stalls the task instead.
func (t *task) try(ctx context.Context, f func() error) {
	if t.st.Err() != nil {
		return
	}
	err := f()
	switch {
	case err == nil, ctx.Err() != nil:
	case errors.Is(err, state.ErrDiskFull):
		if t.stalled == nil {
			t.env.Log.Error("stalled: the state's disk is full", "partition", t.p, "err", err)
		}
		t.stalled = err
		t.st.noteStall(t.p, err)
	default:
		if t.txn != nil {
			// Nothing of the failed batch may become visible: abort now
			// rather than leave readers waiting for the broker's timeout.
			actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if aerr := t.txn.Abort(actx); aerr != nil {
				t.env.Log.Warn("cannot abort the transaction; the broker aborts it on timeout", "partition", t.p, "err", aerr)
			}
			cancel()
		}
		// Whatever the failed commit or batch produced may not be in
		// Kafka: the records are read again, by this task or the next.
		t.each(Provisional.Abandoned)
		// At-least-once tasks commit their changelog and offsets in a
		// transaction of the same id, so they are fenced the same way.
		if errors.Is(err, kafkaio.ErrFenced) {
			t.st.fail(&TaskMigrated{Partition: t.p, Err: err})
			return
		}
		t.st.fail(fmt.Errorf("partition %d: %w", t.p, err))
	}
}

// inUnlessStalled is the task's input, or nil (nothing) while it stalls.
func (t *task) inUnlessStalled() <-chan kafkaio.FetchPart {
	if t.stalled != nil {
		return nil
	}
	return t.in
}

// answer answers the FLUSH requests the task can: reach once it has read
// up to the target, close (after every task reached its target) by closing
// what that closes and committing.
func (t *task) answer(ctx context.Context, pending []*flushReq) []*flushReq {
	keep := pending[:0]
	for _, r := range pending {
		if err := t.st.Err(); err != nil {
			r.done <- err
			continue
		}
		if t.stalled != nil {
			r.done <- fmt.Errorf("%s stalled: %w", t.st.cfg.Name, t.stalled)
			continue
		}
		if t.part.Next < r.target {
			keep = append(keep, r)
			continue
		}
		if !r.close {
			// Processes running the input's other partitions close
			// on this watermark: it goes out before the answer.
			t.shareWatermark()
			r.done <- nil
			continue
		}
		t.part.FlushedTo(r.target)
		t.try(ctx, func() error { return t.commit(ctx, true) })
		switch {
		case t.st.Err() != nil:
			r.done <- t.st.Err()
		case t.stalled != nil:
			r.done <- fmt.Errorf("%s stalled: %w", t.st.cfg.Name, t.stalled)
		default:
			r.done <- nil
		}
	}
	return keep
}

// process pushes one fetch of the partition through the chain.
func (t *task) process(ctx context.Context, fp kafkaio.FetchPart) error {
	t.part.SawEnd(fp.HighWatermark)
	recs := fp.Records
	for len(recs) > 0 && recs[0].Offset < t.part.Next { // already applied
		recs = recs[1:]
	}
	if t.replaying() {
		n := 0
		for n < len(recs) && recs[n].Offset < t.replayTo {
			n++
		}
		if n > 0 {
			t.sw.discard = true
			err := t.processRecs(ctx, recs[:n])
			t.sw.discard = false
			if err != nil {
				return err
			}
			t.replayed += n
			recs = recs[n:]
		}
		t.skipTo(min(fp.Next, t.replayTo))
		if t.part.Next >= t.replayTo {
			if err := t.finishReplay(ctx); err != nil {
				return err
			}
		}
	}
	if err := t.processRecs(ctx, recs); err != nil {
		return err
	}
	t.skipTo(fp.Next)
	return nil
}

// skipTo moves the partition's position past records that carry no data
// (a transaction's markers).
func (t *task) skipTo(next int64) {
	if next > t.part.Next {
		t.part.Skip(next)
		t.uncommitted = true
	}
}

// processRecs pushes records of the partition through the chain.
func (t *task) processRecs(ctx context.Context, recs []*kafkaio.Record) error {
	if len(recs) == 0 {
		return nil
	}
	out, err := t.ops[0].Process(ctx, &Batch{Partition: t.p, Recs: recs})
	if err != nil {
		return err
	}
	var maxTime int64
	hasTime := false
	if t.clock == nil && out != nil {
		maxTime, hasTime = out.MaxTime, out.HasTime
	}
	if err := t.push(ctx, 1, out); err != nil {
		return err
	}
	t.part.Read(recs[len(recs)-1].Offset+1, maxTime, hasTime)
	t.uncommitted = true
	t.reportLag()
	return nil
}

// reportLag sets the partition's consumer lag gauge.
func (t *task) reportLag() {
	t.lag.Set(float64(max(t.part.End-t.part.Next, 0)))
}

// push hands b (and the batches chained to it) to operator i onwards.
func (t *task) push(ctx context.Context, i int, b *Batch) error {
	for b != nil && i < len(t.ops) {
		out, err := t.ops[i].Process(ctx, b)
		if err != nil {
			return err
		}
		if err := t.push(ctx, i+1, out); err != nil {
			return err
		}
		if b, err = b.Following(); err != nil {
			return err
		}
	}
	return nil
}

// onTick confirms idleness on a fresh end offset, and commits when input
// is pending past the commit interval, when the watermark or idleness
// moved, or when an operator asks for time (EMIT EVERY).
func (t *task) onTick(ctx context.Context) error {
	if t.clock == nil {
		// Without a fresh end offset (Kafka out of reach) the partition
		// cannot be confirmed idle: it holds its watermark, and the next
		// tick asks again. Idle, it confirms again while its peers move
		// on (an end from the last tick interval will do): each time it
		// may follow them as far as they were before that fetch.
		var after time.Time
		switch {
		case t.part.Quiet():
			after = t.part.QuietSince()
		case t.part.Following():
			after = t.st.now().Add(-t.st.tickEvery())
		}
		if !after.IsZero() {
			if end, marks, err := t.st.freshEnd(ctx, t.p, after); err == nil {
				t.part.ConfirmIdle(end, marks)
				t.reportLag()
			}
		}
	}
	due := t.stalled != nil || t.uncommitted && t.st.now().Sub(t.lastCommit) >= t.st.commitEvery()
	if !due {
		wm := t.watermark(false)
		due = wm.Has != t.given.Has || wm.WM != t.given.WM || wm.Idle != t.given.Idle
	}
	if !due {
		now := t.st.now()
		for _, op := range t.ops {
			if tk, ok := op.(Ticker); ok && tk.Due(now) {
				due = true
			}
		}
	}
	if !due {
		return nil
	}
	return t.commit(ctx, false)
}

// giveWatermark tells every operator where the watermark stands, pushing
// what each closes through the operators after it.
func (t *task) giveWatermark(ctx context.Context, wm Watermark) error {
	for i, op := range t.ops {
		out, err := op.OnWatermark(ctx, wm)
		if err != nil {
			return err
		}
		if err := t.push(ctx, i+1, out); err != nil {
			return err
		}
	}
	return nil
}

// Ticker is an operator that wants its OnWatermark called when Due says,
// even when nothing else moved (EMIT EVERY's early fires).
type Ticker interface {
	Due(now time.Time) bool
}

// watermark is the task's watermark now.
func (t *task) watermark(flush bool) Watermark {
	w := Watermark{Flush: flush, Idle: t.part.Idle(), Now: t.st.now(), Next: t.part.Next}
	if t.clock != nil {
		w.WM, w.Has = t.clock.Time()
	} else {
		w.WM, w.Has = t.part.Effective()
	}
	return w
}

// commit is the task's one commit point: the operators see the watermark
// (closing windows, shipping partials, sending markers), every record
// produced is acknowledged, then state, offset and watermark are written
// in one Pebble batch, then the offset goes to the stage's consumer group.
func (t *task) commit(ctx context.Context, flush bool) error {
	if t.replaying() {
		return nil // nothing is produced, or committed, before the state caught up
	}
	// Before anything changes: a commit that could not be written would
	// leave the operators believing their state stored.
	if err := t.st.deps.Store.CheckSpace(); err != nil {
		return err
	}
	if t.broken {
		return errBroken
	}
	t.broken = true // until this commit is written whole
	// A commit runs to its end even when the stream stops meanwhile: one
	// cut off half-way (did its transaction end? did Kafka take its
	// offset?) would leave the next start less to trust than a finished
	// one. commitContext ends it when Kafka does not answer.
	ctx, cancel := t.commitContext(ctx)
	defer cancel()
	wm := t.watermark(flush)
	if err := t.giveWatermark(ctx, wm); err != nil {
		return err
	}
	if err := t.out.Flush(ctx); err != nil {
		if t.txn != nil {
			return transient(err)
		}
		return err
	}
	if t.txn == nil {
		// At-least-once: what the operators produced is acknowledged.
		t.each(Provisional.Confirmed)
	}
	c := &Commit{State: t.st.deps.Store.NewScopedBatch(t.st.cfg.State, t.p), Offset: t.part.Next}
	defer c.State.Close()
	for _, op := range t.ops {
		if err := op.Commit(ctx, c); err != nil {
			return err
		}
	}
	// The counters go with the state and offset they describe: in this
	// batch, so in Pebble and the changelog (exactly-once: in the
	// transaction) together with them.
	counted := t.counts.pending()
	if !counted.IsZero() {
		if err := c.State.PutTaskValue(t.p, CountersKey, t.counts.committedPlus(counted).encode()); err != nil {
			return err
		}
	}
	meta := state.PartitionMeta{Offset: c.Offset, MaxTime: t.part.MaxTime, HasTime: t.part.HasTime,
		Closed: c.Closed, HasClosed: c.HasClosed, Applied: c.Applied}
	if err := c.State.PutPartition(t.p, meta); err != nil {
		return err
	}
	last, err := t.logChanges(ctx, c.State) // the commit's last changelog record
	if err != nil {
		return err
	}
	if t.txn == nil {
		// At-least-once: the outputs are acknowledged; the changelog and
		// the input offset commit together.
		cctx, ccancel := context.WithTimeout(ctx, commitTimeout)
		err := t.clog.Commit(cctx, kafkaio.TxnCommit{Group: t.st.cfg.Group, Topic: t.st.cfg.Topic, Partition: t.p, Offset: c.Offset,
			Metadata: encodeProgress(wm, t.st.cfg.Holder)})
		ccancel()
		if err != nil {
			return fmt.Errorf("changelog of partition %d: %w", t.p, err)
		}
	}
	if t.txn != nil {
		// Kafka first: a crash before Pebble's write is caught up by
		// replay (txn.go); the other order would emit twice.
		cctx, ccancel := context.WithTimeout(ctx, commitTimeout)
		err := t.commitTxn(cctx, wm)
		ccancel()
		if err != nil {
			return transient(err)
		}
		t.each(Provisional.Confirmed)
		if h := t.st.deps.AfterTxn; h != nil {
			h()
		}
	}
	// Every commit logs at least the partition's position (PutPartition).
	if err := c.State.PutChangelogPosition(t.p, last.Offset+1); err != nil {
		return err
	}
	t.opened, t.bootstrap = nil, false
	if err := c.State.Commit(); err != nil {
		return err
	}
	t.counts.fold(counted)
	t.broken = false
	t.uncommitted, t.lastCommit, t.given = false, t.st.now(), wm
	t.shareWatermark()
	t.st.noteWatermark(t.p, wm)
	if t.stalled != nil {
		t.env.Log.Info("resumed: the state's disk has room again", "partition", t.p)
		t.stalled = nil
		t.st.noteStall(t.p, nil)
	}
	return nil
}

// shareWatermark publishes the partition's own watermark to the app's
// other processes when it rose since last shared (Deps.Watermarks).
func (t *task) shareWatermark() {
	b := t.st.deps.Watermarks
	if b == nil {
		return
	}
	if own, ok := t.part.Own(); ok && (!t.sharedOK || own > t.shared) {
		b.Publish(t.st.cfg.Group, t.p, own)
		t.shared, t.sharedOK = own, true
	}
}
