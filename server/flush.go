package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/turbinesql/turbinesql/barrier"
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/streamplan"
)

// FLUSH returns once every task of every running stream, on every process
// of the app, has processed everything written to its input before the
// call, closed the windows that closes, and committed. The processes share
// the tasks through consumer groups, so FLUSH is a barrier through Kafka
// (package barrier): this process cuts it into steps, runs each over its
// own tasks first, and when that does not cover every partition (other
// processes own some), sends the step on turbine-{app-id}-flush and waits
// for the acknowledgements of the others. One process alone never writes
// to that topic.

// flushTopic carries FLUSH steps and their acknowledgements.
func (s *Server) flushTopic() string {
	return streamplan.TopicName(streamplan.Topic{Kind: streamplan.TopicFlush, App: s.cfg.AppID})
}

// flushTopicConfig: the records matter only while their FLUSH runs.
var flushTopicConfig = map[string]*string{"cleanup.policy": ptr("delete"), "retention.ms": ptr("3600000")}

func ptr(s string) *string { return &s }

const (
	// flushStepTimeout bounds one step: the processes that own the tasks
	// have that long to answer (a rebalance under way included).
	flushStepTimeout = time.Minute
	// flushResend is how long a step waits for acknowledgements before it
	// is sent again (a process that rejoined missed it, or a task moved).
	flushResend = 2 * time.Second
	// flushRecoveries is how many self-restarts of failed streams one
	// FLUSH waits for (recover.go's restartable failures).
	flushRecoveries = 4
)

// flush runs FLUSH. A stream whose exactly-once transaction Kafka did not
// take, or whose task was fenced because the group moved its partition
// (a rebalance while the FLUSH ran), restarts by itself (recover.go):
// FLUSH waits for that restart and flushes again, rather than report a
// failure that mends itself within seconds.
func (s *Server) flush(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		failed, err := s.flushStages(ctx)
		if err != nil {
			return err
		}
		if len(failed) == 0 {
			s.settleOutputs(ctx)
			return nil
		}
		if attempt == flushRecoveries || !allRecover(failed) {
			return flushFailures(failed)
		}
		if err := s.awaitRestart(ctx, failed, attempt); err != nil {
			return err
		}
	}
}

// settleOutputs waits, up to settleTimeout, until what the FLUSH
// committed to the exactly-once streams' output topics is readable
// read_committed: Kafka writes a transaction's commit markers after the
// commit returns, and a SELECT on a stream right after FLUSH must see its
// panes. Past the bound the FLUSH returns anyway (an open transaction of
// new input may not end for a while; its rows are not the FLUSH's).
func (s *Server) settleOutputs(ctx context.Context) {
	s.mu.Lock()
	var topics []string
	for _, r := range s.streams {
		if r.def != nil && r.final != nil && r.def.Options.Guarantee == streamplan.ExactlyOnce && !slices.Contains(topics, r.def.Topic) {
			topics = append(topics, r.def.Topic)
		}
	}
	s.mu.Unlock()
	_, errs := s.settledEnds(ctx, topics)
	for t, err := range errs {
		s.log.Debug("FLUSH: cannot read the ends of an output topic", "topic", t, "err", err)
	}
}

// flushStage is a stage a FLUSH runs, with the streams it serves.
type flushStage struct {
	stage   *dataflow.Stage
	streams []string
	// behindHop: it reads a hop's internal topic, so it runs after the
	// stages that read the sources.
	behindHop bool
}

// flushStagesNow lists the running stages: the hops', then each stream's.
// Streams that could not start are returned in failed.
func (s *Server) flushStagesNow() (stages []flushStage, failed map[string]error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	failed = map[string]error{}
	byHop := map[*sharedHop][]string{}
	var names []string
	for name, r := range s.streams {
		names = append(names, name)
		if r.hop != nil {
			byHop[r.hop] = append(byHop[r.hop], name)
		}
	}
	sort.Strings(names)
	var topics []string
	for topic := range s.hops {
		topics = append(topics, topic)
	}
	sort.Strings(topics)
	for _, topic := range topics {
		if h := s.hops[topic]; h.stage != nil {
			stages = append(stages, flushStage{stage: h.stage, streams: byHop[h]})
		}
	}
	for _, name := range names {
		r := s.streams[name]
		if r.err != nil {
			failed[name] = r.err
		}
		if r.pre != nil {
			stages = append(stages, flushStage{stage: r.pre, streams: []string{name}})
		}
		if r.final != nil {
			stages = append(stages, flushStage{stage: r.final, streams: []string{name}, behindHop: r.hop != nil || r.pre != nil})
		}
	}
	return stages, failed
}

// flushStages runs one FLUSH over every process: the stages that read the
// sources, then those behind hops, each in two steps (reach, then close).
// Streams feeding streams need rounds: it repeats until the topics the
// first level reads have not moved since the last round (at most 20). A failed stream is returned in failed, and the others still
// complete.
func (s *Server) flushStages(ctx context.Context) (failed map[string]error, err error) {
	f := &clusterFlush{s: s, id: s.nodeID + "-" + strconv.FormatInt(s.flushSeq.Add(1), 10), failed: map[string]error{}}
	defer f.close()
	var prev map[string]map[int32]int64
	for round := 0; round < 20; round++ {
		stages, notStarted := s.flushStagesNow()
		// A stream that could not start here has no stage, so no step
		// names it (runStep's acknowledgement does only while some other
		// stage runs a step): without this, a process whose only stream
		// failed to start returned success at once, nothing flushed.
		for name, err := range notStarted {
			f.fail(name, err)
		}
		all := map[string]map[int32]int64{}
		for _, behind := range []bool{false, true} {
			var level []flushStage
			for _, st := range stages {
				if st.behindHop == behind {
					level = append(level, st)
				}
			}
			ends, want := f.targets(ctx, level, behind)
			if !behind && round > 0 && sameEnds(prev, ends) {
				// Nothing the first level reads moved since the last
				// round: it ran to the end.
				return f.failed, nil
			}
			if !behind {
				s.flushRounds.Inc()
			}
			if len(ends) == 0 {
				continue
			}
			for _, closing := range []bool{false, true} {
				if err := f.step(ctx, ends, want, closing); err != nil {
					return nil, err
				}
			}
			if !behind {
				// Only the topics the first level reads say whether another
				// round is needed (a stream reads a stream's output, whose
				// end moved with the panes this round wrote). The internal
				// topics behind hops move at every commit (watermark markers,
				// transaction markers) and this round read them to where
				// the first level left them.
				for t, e := range ends {
					all[t] = e
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		prev = all
	}
	return f.failed, nil
}

func newFlushRounds(reg prometheus.Registerer) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "turbine_flush_rounds_total",
		Help: "Rounds of the FLUSHes this process ran: a round reads every stage's input to its end and closes; another round runs only when a stream's output that another stream reads moved."})
	reg.MustRegister(c)
	return c
}

// clusterFlush is one FLUSH this process coordinates.
type clusterFlush struct {
	s      *Server
	id     string
	index  int
	failed map[string]error
	inbox  *barrier.Inbox
	unsub  func()
}

func (f *clusterFlush) close() {
	if f.unsub != nil {
		f.unsub()
	}
}

func (f *clusterFlush) fail(name string, err error) {
	if _, ok := f.failed[name]; !ok {
		f.failed[name] = err
	}
}

// targets reads the end offsets of the topics a level's stages read, and
// what a step over them must cover. A stage whose topic cannot be read
// fails its streams. Behind a hop (settle), the ends are read once the
// transactions the level before committed are readable (settledEnds).
func (f *clusterFlush) targets(ctx context.Context, level []flushStage, settle bool) (map[string]map[int32]int64, map[string]barrier.Stage) {
	ends := map[string]map[int32]int64{}
	want := map[string]barrier.Stage{}
	read := f.s.kafka.EndOffsets
	if settle {
		var topics []string
		for _, st := range level {
			if t := st.stage.Topic(); !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
		settled, errs := f.s.settledEnds(ctx, topics)
		read = func(_ context.Context, topic string) (map[int32]int64, error) {
			return settled[topic], errs[topic]
		}
	}
	for _, st := range level {
		topic := st.stage.Topic()
		e, ok := ends[topic]
		if !ok {
			var err error
			if e, err = read(ctx, topic); err != nil {
				for _, name := range st.streams {
					f.fail(name, err)
				}
				continue
			}
			ends[topic] = e
		}
		want[st.stage.Group()] = barrier.Stage{Partitions: st.stage.InputPartitions(), Streams: st.streams}
	}
	return ends, want
}

// settleTimeout bounds how long a FLUSH step waits for the hop topics'
// committed records to become readable (their markers land within
// milliseconds; an open transaction may not end for a minute).
const settleTimeout = 2 * time.Second

// settledEnds reads the read_committed end of each partition of topics
// (side by side, under one settleTimeout) once it has reached the log end
// as it is now. Kafka writes a
// transaction's commit markers after the commit returns, so right after
// the first level's close committed its copies, a read_committed end can
// still stop short of them: a step reading only to there would close
// nothing of them, and no later round would (rounds follow the first
// level's topics). The wait is bounded: a transaction the hop opened
// since (new input) or a fenced writer's never commits in time, and then
// the end as it stands is taken.
func (s *Server) settledEnds(ctx context.Context, topics []string) (map[string]map[int32]int64, map[string]error) {
	deadline := time.Now().Add(settleTimeout)
	var mu sync.Mutex
	ends, errs := map[string]map[int32]int64{}, map[string]error{}
	eachConcurrently(topics, len(topics), func(t string) {
		e, err := s.settledEnd(ctx, t, deadline)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs[t] = err
			return
		}
		ends[t] = e
	})
	return ends, errs
}

// settledEnd is settledEnds of one topic, until deadline.
func (s *Server) settledEnd(ctx context.Context, topic string, deadline time.Time) (map[int32]int64, error) {
	logEnds, err := s.kafka.LogEnds(ctx, topic)
	if err != nil {
		return nil, err
	}
	for {
		ends, err := s.kafka.EndOffsets(ctx, topic)
		if err != nil {
			return nil, err
		}
		settled := true
		for p, le := range logEnds {
			settled = settled && ends[p] >= le
		}
		if settled || time.Now().After(deadline) {
			return ends, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// step runs one step: here first; then, unless that covered every
// partition, on every process through the flush topic, until their
// acknowledgements do.
func (f *clusterFlush) step(ctx context.Context, ends map[string]map[int32]int64, want map[string]barrier.Stage, closing bool) error {
	st := barrier.Step{Flush: f.id, Origin: f.s.nodeID, Index: f.index, Close: closing, Targets: ends}
	f.index++
	cov := barrier.NewCoverage(want)
	ack, local := f.s.runStep(ctx, st)
	cov.Add(ack)
	deadline := time.Now().Add(flushStepTimeout)
	for !cov.Settled() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			missing := cov.Missing()
			return &sql.Error{Code: sql.CodeObjectInUse,
				Message: fmt.Sprintf("FLUSH: no process of app %s ran %s within %s", f.s.cfg.AppID, barrier.Summary(missing), flushStepTimeout),
				HintMsg: "SHOW TASKS <stream> shows which process holds each partition; a process that just joined or left may still be rebalancing"}
		}
		if cov.Restoring() {
			// Partitions restore their state: waiting for that is
			// progress, not silence.
			deadline = time.Now().Add(flushStepTimeout)
		}
		cov.Retry()
		if err := f.send(ctx, st); err != nil {
			return err
		}
		st.Attempt++
		resend := time.After(flushResend)
	wait:
		for !cov.Settled() {
			select {
			case <-f.inbox.Ready():
				for _, a := range f.inbox.Take(st.Index) {
					cov.Add(a)
				}
			case <-resend:
				break wait
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	for name, why := range cov.Failed() {
		if err, ok := local[name]; ok {
			f.fail(name, err)
		} else {
			f.fail(name, &remoteFailure{msg: why.Msg, recovers: why.Recovers})
		}
	}
	return nil
}

// send writes step st to the flush topic, subscribing to its answers first.
func (f *clusterFlush) send(ctx context.Context, st barrier.Step) error {
	if f.inbox == nil {
		select {
		case <-f.s.flushFollowing:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return fmt.Errorf("FLUSH: cannot read %s", f.s.flushTopic())
		}
		f.inbox, f.unsub = f.s.flushAcks.Subscribe(f.id)
	}
	rec := &kafkaio.Record{Topic: f.s.flushTopic(), Partition: 0, Key: []byte(f.id), Value: barrier.EncodeStep(st)}
	if err := f.s.kafka.ProduceSync(ctx, []*kafkaio.Record{rec}); err != nil {
		return fmt.Errorf("FLUSH: send a step to the app's other processes: %w", err)
	}
	return nil
}

// remoteFailure is a stream's failure on another process; recovers: that
// process said the stream restarts by itself.
type remoteFailure struct {
	msg      string
	recovers bool
}

func (e *remoteFailure) Error() string { return e.msg + " (on another process)" }

// runStep runs a FLUSH step over the tasks this process owns. The
// acknowledgement says which partitions of which stages it covered; local
// holds the failures with their errors (the acknowledgement only has
// their text).
func (s *Server) runStep(ctx context.Context, st barrier.Step) (ack barrier.Ack, local map[string]error) {
	ack = barrier.Ack{Flush: st.Flush, Index: st.Index, Node: s.nodeID, Covered: map[string][]int32{}, Failed: map[string]string{}}
	if st.Close {
		// Idle partitions close on their peers' watermarks: those the
		// other processes shared in the reach step must be read first.
		s.awaitWatermarks(ctx)
	}
	stages, local := s.flushStagesNow()
	// The stages of a step are independent (they meet only through
	// Kafka), and a close step commits each task (a transaction under
	// exactly-once): one after another, a dozen streams made each step
	// take seconds. Up to stopParallel run at once, as stops do.
	var mu sync.Mutex
	var run []flushStage
	for _, fs := range stages {
		if _, ok := st.Targets[fs.stage.Topic()]; !ok {
			continue
		}
		if r := fs.stage.Restoring(); len(r) > 0 {
			if ack.Restoring == nil {
				ack.Restoring = map[string][]int32{}
			}
			ack.Restoring[fs.stage.Group()] = r
		}
		run = append(run, fs)
	}
	eachConcurrently(run, stopParallel, func(fs flushStage) {
		covered, err := fs.stage.FlushPhase(ctx, st.Targets[fs.stage.Topic()], st.Close)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			for _, name := range fs.streams {
				if _, ok := local[name]; !ok {
					local[name] = err
				}
			}
			return
		}
		ack.Covered[fs.stage.Group()] = covered
	})
	for name, err := range local {
		ack.Failed[name] = err.Error()
		if _, ok := restartable(err); ok {
			ack.Recovers = append(ack.Recovers, name)
		}
	}
	if !st.Close {
		// The reach step shared each task's own watermark: it must be in
		// Kafka before the acknowledgement says so.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := s.watermarks.out.Flush(wctx); err != nil {
			s.log.Debug("sharing watermarks for a FLUSH", "err", err)
		}
		cancel()
	}
	return ack, local
}

// answerStep runs a step another process (or this one, for its own
// coordination) sent, and acknowledges it.
func (s *Server) answerStep(ctx context.Context, st barrier.Step) {
	ctx, cancel := context.WithTimeout(ctx, flushStepTimeout)
	defer cancel()
	ack, _ := s.runStep(ctx, st)
	if ctx.Err() != nil {
		return // stopping: the coordinator sends it again to whoever runs the tasks now
	}
	rec := &kafkaio.Record{Topic: s.flushTopic(), Partition: 0, Key: []byte(st.Flush), Value: barrier.EncodeAck(ack)}
	if err := s.kafka.ProduceSync(ctx, []*kafkaio.Record{rec}); err != nil {
		s.log.Warn("cannot acknowledge a FLUSH step; its coordinator sends it again", "flush", st.Flush, "err", err)
	}
}

// followFlushes reads the flush topic from its end: steps are run and
// acknowledged, acknowledgements go to the FLUSHes this process
// coordinates. Kafka out of reach, it tries again.
func (s *Server) followFlushes(ctx context.Context) {
	var ready sync.Once
	for ctx.Err() == nil {
		err := s.followFlushesOnce(ctx, func() { ready.Do(func() { close(s.flushFollowing) }) })
		if err != nil && ctx.Err() == nil {
			s.log.Debug("following the flush topic", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (s *Server) followFlushesOnce(ctx context.Context, following func()) error {
	tail, _, err := s.kafka.NewTail(ctx, s.flushTopic(), kafkaio.TailFromEnd, nil)
	if err != nil {
		return err
	}
	defer tail.Close()
	following()
	for {
		recs, _, err := tail.Poll(ctx)
		if err != nil {
			return err
		}
		for _, r := range recs {
			step, ack, err := barrier.Decode(r.Value)
			switch {
			case errors.Is(err, barrier.ErrVersion):
				// A newer process's FLUSH (a rolling upgrade under way):
				// this one cannot read the step, so that FLUSH waits for
				// its partitions until they move or it times out.
				s.log.Warn("skipping a flush topic record of a newer release: upgrade this process", "offset", r.Offset, "err", err)
			case err != nil:
				s.log.Debug("skipping a flush topic record", "offset", r.Offset, "err", err)
			case step != nil && step.Origin == s.nodeID && step.Attempt == 0:
				// This process ran it just before sending it; a step sent
				// again (a partition moved here meanwhile) runs again.
			case step != nil:
				go s.answerStep(ctx, *step)
			case ack != nil:
				s.flushAcks.Deliver(*ack)
			}
		}
	}
}

// awaitWatermarks waits (briefly) until this process has read every
// watermark other processes shared before now.
func (s *Server) awaitWatermarks(ctx context.Context) {
	ends, err := s.kafka.EndOffsets(ctx, s.watermarkTopic())
	if err != nil {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.wmRead.Load() < ends[0] && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
}

// allRecover reports whether every failure is one the stream restarts
// by itself from (recover.go's restartable), here or where it failed.
func allRecover(failed map[string]error) bool {
	for _, err := range failed {
		var remote *remoteFailure
		if errors.As(err, &remote) {
			if !remote.recovers {
				return false
			}
			continue
		}
		if _, ok := restartable(err); !ok {
			return false
		}
	}
	return true
}

// awaitRestart waits until every stream in failed runs again (or is gone),
// at most as long as recover.go's longest back-off. A stream that failed
// on another process restarts there, out of sight: attempt n (from 0)
// gives it 2^(n+1) s, which covers that process's back-off for its n+1th
// restart in a row (recover.go: 1 s, 2 s, 4 s, ...).
func (s *Server) awaitRestart(ctx context.Context, failed map[string]error, attempt int) error {
	deadline := time.Now().Add(40 * time.Second)
	remoteUntil := time.Now()
	for _, err := range failed {
		var remote *remoteFailure
		if errors.As(err, &remote) {
			remoteUntil = time.Now().Add(time.Second << (attempt + 1))
		}
	}
	for time.Now().Before(deadline) {
		running := time.Now().After(remoteUntil)
		s.mu.Lock()
		for name, err := range failed {
			var remote *remoteFailure
			if errors.As(err, &remote) {
				continue // it restarts on its process (remoteUntil)
			}
			if r, ok := s.streams[name]; ok && r.failing() { // a failed hop in front included
				running = false
			}
		}
		s.mu.Unlock()
		if running {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func sameEnds(a, b map[string]map[int32]int64) bool {
	if a == nil || len(a) != len(b) {
		return a != nil && len(a) == 0 && len(b) == 0
	}
	for t, pa := range a {
		pb, ok := b[t]
		if !ok || len(pa) != len(pb) {
			return false
		}
		for p, o := range pa {
			if pb[p] != o {
				return false
			}
		}
	}
	return true
}

// flushFailures reports the streams a FLUSH could not complete (nil: none).
func flushFailures(failed map[string]error) error {
	if len(failed) == 0 {
		return nil
	}
	var parts []string
	var errs []error
	for name, err := range failed {
		parts = append(parts, fmt.Sprintf("stream %s failed: %v", name, err))
		errs = append(errs, err)
	}
	sort.Strings(parts)
	code := sql.CodeObjectInUse
	for _, err := range errs {
		if errors.Is(err, state.ErrDiskFull) {
			code = "53100" // disk_full
		}
	}
	return &sql.Error{Code: code, Message: "FLUSH: " + strings.Join(parts, "; "),
		HintMsg: "every other stream was flushed; fix the cause (or set on_error on the source), then ALTER STREAM <name> RESTART", Err: errors.Join(errs...)}
}
