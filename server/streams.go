package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/placement"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/streamplan"
	"github.com/turbinesql/turbinesql/types"
)

// This file composes running streams out of dataflow stages; the runtime
// itself (tasks, operators, commits) lives in package dataflow.

// stream is a running stream: the stages that compute it.
type stream struct {
	def   *catalog.Stream
	plan  *planner.Plan
	spec  streamSpec
	stats *dataflow.Stats
	hop   *sharedHop // repartition: the shared hop in front
	// hopStats are the hop's counters (nil: no hop), kept while the
	// stream is stopped: what the hop could not decode counts for it.
	hopStats *dataflow.Stats
	pre      *dataflow.Stage // combine: the pre-aggregation stage
	final    *dataflow.Stage // the stage that writes the output
	// board shows the placement check of each input partition (nil: the
	// stream is not checked).
	board *placement.Board
	err   error // it could not start (final is nil)
	// stopped: held stopped by ALTER STREAM ... STOP (no stages run).
	stopped bool
}

// streamSpec is the partition counts a stream was started with.
type streamSpec struct {
	nIn  int // input topic
	outN int // output topic
	nRep int // repartition topic (repartition)
	nCmb int // combine topic (combine)
	// declaredRep: repartition_partitions was set (a shared hop with
	// another count is refused).
	declaredRep bool
}

// sharedHop is a running repartition hop, shared by the streams with the
// same (topic, column).
type sharedHop struct {
	stage *dataflow.Stage
	topic string
	outN  int
	refs  int
	// stats: the records the hop could not decode (skipped or
	// dead-lettered) count for every stream behind it.
	stats *dataflow.Stats
	// cfg is the hop stage's; eos: it is exactly-once (some stream behind
	// it is).
	cfg dataflow.StageConfig
	eos bool
	// starter is the stream whose start started the hop (hopFor): a
	// failure of the hop's first start (stage still nil) fails that
	// stream's start, and recoverHop restarts the stream.
	starter string
}

// status is what SHOW STREAMS (and the console) print of a stream's
// health: running; failed with the error of whichever of its stages
// failed (the shared hop in front included); or degraded, running with
// results known wrong, and why (MisplacedInputError).
func (r *stream) status() (string, error) {
	if r.stopped {
		return "stopped", nil
	}
	if r.err != nil {
		return "failed", r.err
	}
	if r.hop != nil {
		if err := r.hop.stage.Err(); err != nil {
			return "failed", fmt.Errorf("repartition hop %s: %w", r.hop.topic, err)
		}
	}
	stages := []*dataflow.Stage{r.pre, r.final}
	if r.hop != nil {
		stages = append(stages, r.hop.stage)
	}
	for _, st := range stages {
		if st != nil {
			if err := st.Err(); err != nil {
				return "failed", err
			}
		}
	}
	for _, st := range stages {
		if st != nil {
			if err := st.Stalled(); err != nil {
				return "stalled: disk full", err
			}
		}
	}
	if err := r.misplaced(); err != nil {
		return statusDegraded, err
	}
	return "running", nil
}

// counters are what SHOW STREAMS and the console count for the stream:
// its stages' counters, committed with their state, and those of the
// repartition hop in front: what the hop could not decode was read from
// the source for this stream too (skipped or dead-lettered there).
func (r *stream) counters() dataflow.Counters {
	c := r.stats.Load()
	if r.hopStats != nil {
		hc := r.hopStats.Load()
		c = c.Plus(dataflow.Counters{In: hc.Skipped + hc.DLQ, Skipped: hc.Skipped, DLQ: hc.DLQ})
	}
	return c
}

// idleStream is a stream of the catalog whose stages do not run here
// (held stopped, or it could not start), listed with the counters its
// stages last committed to this process's state, as they count when they
// run (startStream), rather than zeros.
func (s *Server) idleStream(def *catalog.Stream, p *planner.Plan, spec streamSpec) *stream {
	r := &stream{def: def, plan: p, spec: spec, stats: &dataflow.Stats{}}
	if p == nil || s.store == nil {
		return r
	}
	switch p.Strategy {
	case streamplan.StrategyRepartition:
		r.stats.Track(def.Name, spec.nRep, s.store)
		r.hopStats = &dataflow.Stats{}
		r.hopStats.Track("__hop/"+s.hopTopic(def, p), spec.nIn, s.store)
	case streamplan.StrategyCombine:
		r.stats.Track(def.Name, spec.nCmb, s.store)
		r.stats.Track("__cmb/"+combineTopic(s.cfg.AppID, p.Input.Topic, def.Name), spec.nIn, s.store)
	default:
		r.stats.Track(def.Name, spec.nIn, s.store)
	}
	return r
}

// recordHeadroom is what a topic holding copies of another's records
// (dead letters, late rows, a repartition hop's) adds to its
// max.message.bytes for the headers the copies carry.
const recordHeadroom = 64 << 10

// sizedLike is the config of a topic that must hold any record of topic
// (its max.message.bytes plus headroom); nil (broker defaults) when that
// cannot be read.
func (s *Server) sizedLike(ctx context.Context, topic string) map[string]*string {
	n, err := s.kafka.MaxMessageBytes(ctx, topic)
	if err != nil {
		s.log.Warn("cannot read max.message.bytes; creating with the broker's default", "of", topic, "err", err)
		return nil
	}
	v := strconv.Itoa(n + recordHeadroom)
	return map[string]*string{"max.message.bytes": &v}
}

// exactlyOnce makes a stage exactly-once: the task of partition p
// produces everything through its transactional producer, named by the
// stage's consumer group and p (turbine-{app}-{stream}-p for a stream's
// final stage; the hop's topic, or the combine's, for theirs).
func (s *Server) exactlyOnce(ctx context.Context, cfg *dataflow.StageConfig) error {
	topic := streamplan.TopicName(streamplan.Topic{Kind: streamplan.TopicProgress, App: s.cfg.AppID})
	if !s.progressReady.Load() {
		if err := s.kafka.EnsureCompacted(ctx, topic, 1); err != nil {
			return fmt.Errorf("progress topic %s: %w", topic, err)
		}
		s.progressReady.Store(true)
	}
	cfg.ExactlyOnce = true
	cfg.ProgressTopic = topic
	cfg.Holder = s.instance
	return nil
}

// startStage starts a stage with its changelog (named after its consumer
// group, with a partition per input partition).
func (s *Server) startStage(ctx context.Context, cfg dataflow.StageConfig) (*dataflow.Stage, error) {
	cfg.Changelog = changelogTopic(cfg.Group)
	if err := s.kafka.EnsureCompacted(ctx, cfg.Changelog, cfg.Partitions); err != nil {
		return nil, fmt.Errorf("changelog of %s: %w", cfg.Name, err)
	}
	cfg.SessionTimeout, cfg.Node, cfg.Standbys = s.cfg.SessionTimeout, s.nodeID, s.cfg.StandbyReplicas
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	s.joinMu.Lock()
	cfg.Deferred = s.deferJoins
	s.joinMu.Unlock()
	st, err := dataflow.StartStage(ctx, cfg, s.deps())
	if err != nil || !cfg.Deferred {
		return st, err
	}
	s.joinMu.Lock()
	deferred := s.deferJoins
	if deferred {
		s.joins = append(s.joins, st)
	}
	s.joinMu.Unlock()
	if deferred {
		return st, nil
	}
	// The replay's wait is over: wait here.
	if err := st.AwaitAssigned(ctx); err != nil {
		st.Stop()
		return nil, err
	}
	return st, nil
}

// afterJoin runs fn once the stages started so far have their first
// assignment: now, or when the catalog's replay has waited for them (a
// start line tells how many partitions resumed from state, known only
// then).
func (s *Server) afterJoin(fn func()) {
	s.joinMu.Lock()
	if s.deferJoins {
		s.joined = append(s.joined, fn)
		fn = nil
	}
	s.joinMu.Unlock()
	if fn != nil {
		fn()
	}
}

// awaitJoins waits for the first assignment of every stage started while
// joins were deferred, all at once, and starts further stages waiting for
// their own. A stage whose tasks could not open has failed by then, and
// its stream shows it as any later failure.
func (s *Server) awaitJoins(ctx context.Context) {
	s.joinMu.Lock()
	stages, joined := s.joins, s.joined
	s.joins, s.joined, s.deferJoins = nil, nil, false
	s.joinMu.Unlock()
	defer func() {
		for _, fn := range joined {
			fn()
		}
	}()
	start := s.clock()
	eachConcurrently(stages, len(stages), func(st *dataflow.Stage) {
		_ = st.AwaitAssigned(ctx) // the stage logged and recorded it
	})
	if len(stages) > 0 {
		s.log.Info("stages joined their groups", "stages", len(stages), "took", s.clock().Sub(start).Round(time.Millisecond))
	}
}

// changelogTopic names the changelog of the stage whose consumer group is
// group (streamplan.ChangelogTopic).
func changelogTopic(group string) string { return streamplan.ChangelogTopic(group) }

// groupName is the consumer group of a stream's final stage.
func (s *Server) groupName(stream string) string { return streamplan.StageGroup(s.cfg.AppID, stream) }

// combineTopic names a combine hop's internal topic (and its partial
// stage's consumer group).
func combineTopic(app, topic, windowName string) string {
	return streamplan.CombineTopic(app, topic, windowName)
}

func (s *Server) deps() dataflow.Deps {
	return dataflow.Deps{Kafka: runtimeKafka{s.kafka}, Store: s.store, Metrics: s.metrics, Now: s.clock, Log: s.log, AfterTxn: s.cfg.AfterTxn, BeforeOpen: s.cfg.beforeOpen, Watermarks: s.watermarks}
}

// runtimeKafka gives the runtime the Kafka client through its interfaces.
type runtimeKafka struct{ *kafkaio.Client }

func (k runtimeKafka) NewGroupConsumer(group, topic string, maxPoll int, session time.Duration, instance string, hooks kafkaio.GroupHooks) (dataflow.Consumer, error) {
	return k.Client.NewGroupConsumer(group, topic, maxPoll, session, instance, hooks)
}

func (k runtimeKafka) NewPending() dataflow.Pending { return k.Client.NewPending() }

func (k runtimeKafka) NewPartitionFollower(topic string) (dataflow.ChangelogFollower, error) {
	return k.Client.NewPartitionFollower(topic)
}

func (k runtimeKafka) NewTxnProducer(ctx context.Context, id string) (dataflow.TxnProducer, error) {
	return k.Client.NewTxnProducer(ctx, id, dataflow.TxnTimeout)
}

// inputTime is the event-time column (-1: none), the watermark delay and
// the idle timeout of a plan's input.
func inputTime(p *planner.Plan) (tsIdx int, delay int64, idle time.Duration) {
	tsIdx = -1
	if wm := p.Input.Watermark; wm != nil {
		tsIdx, delay = p.Input.Schema.Index(wm.Column), wm.DelayMs
	}
	if p.Window != nil && tsIdx != p.Window.TimeIdx {
		// The window's time column is event time even without a WATERMARK clause.
		tsIdx = p.Window.TimeIdx
	}
	return tsIdx, delay, idleTimeout(p.Input.Source)
}

func idleTimeout(src *catalog.Source) time.Duration {
	ms := int64(DefaultIdleTimeoutMs)
	if src != nil && src.IdleTimeoutMs > 0 {
		ms = src.IdleTimeoutMs
	}
	return time.Duration(ms) * time.Millisecond
}

// observer feeds a source's statistics (nil for a stream's output).
func (s *Server) observer(src *catalog.Source) func(*exec.Batch) {
	if src == nil {
		return nil
	}
	return s.statsFor(src).observe
}

// startStream starts the stages of a stream.
func (s *Server) startStream(ctx context.Context, def *catalog.Stream, p *planner.Plan, spec streamSpec) (*stream, error) {
	r := &stream{def: def, plan: p, spec: spec, stats: &dataflow.Stats{}}
	// The stream graph says what the stages are, what they write under
	// which guarantee and through which internal topics; the operators are
	// still built from the plan here (dataflow's builders are the next
	// step).
	g := planner.BuildGraph(def, p, s.cfg.AppID)
	final0 := g.Final()
	tsIdx, delay, idle := inputTime(p)
	maxOut, err := s.kafka.MaxMessageBytes(ctx, def.Topic)
	if err != nil {
		s.log.Warn("cannot read the output topic's max.message.bytes; oversized rows are caught when Kafka refuses them", "topic", def.Topic, "err", err)
		maxOut = 0
	}
	final := dataflow.StageConfig{
		Name: def.Name, State: def.Name, Group: final0.Group,
		Topic: p.Input.Topic, Partitions: spec.nIn, Delay: delay, IdleTimeout: idle, Stats: r.stats,
		CommitEvery: s.commitEvery(), MaxPoll: s.pollRecords(), MetadataEvery: s.cfg.MetadataInterval, Reports: true,
		OnResize: func() { s.restartAfterResize(def.Name) },
		Writes:   []string{def.Topic},
	}
	if late := def.Options.LateDataTopic; late != "" {
		final.Writes = append(final.Writes, late)
	}
	eos := g.Guarantee == streamplan.ExactlyOnce
	if eos {
		if err := s.exactlyOnce(ctx, &final); err != nil {
			return nil, err
		}
	}
	final.OnFail = func(err error) { s.recoverStream(def.Name, err) }
	tail := func() []dataflow.Op {
		out := []dataflow.Op{}
		if p.Aggregate {
			out = append(out, &dataflow.HashAgg{Plan: p, LatenessMs: def.Options.AllowedLatenessMs, LateDataTopic: def.Options.LateDataTopic,
				EmitEvery: time.Duration(def.Options.EmitEveryMs) * time.Millisecond, DLQ: s.dlqPartitions,
				Merge: p.Strategy == streamplan.StrategyCombine, Cache: s.cache,
				StateTTL: time.Duration(def.Options.StateTTLMs) * time.Millisecond})
			// An upsert stream keyed by its group key deletes a group that
			// stops satisfying HAVING (with message_key, records of several
			// groups share a key: a tombstone would delete them all).
			tombs := p.Window == nil && def.Options.MessageKey == ""
			out = append(out, &dataflow.Project{Filter: p.Having, Exprs: p.Project, AddFinal: def.Options.EmitEveryMs > 0, Tombstones: tombs})
		} else {
			out = append(out, &dataflow.Project{Filter: p.Filter, Exprs: p.Project})
		}
		spec := g.Sink()
		return append(out, &dataflow.Sink{Topic: spec.Topic, Partitions: r.spec.outN, Schema: spec.Output, MessageKey: spec.MessageKey,
			OnError: spec.OnError, DLQTopic: spec.DLQTopic, DLQ: s.dlqPartitions, MaxBytes: maxOut})
	}
	// A row of a source without an event time has no window: the source's
	// on_error handles it (a stream's output keeps counting it as late).
	needTime := p.Window != nil && p.Input.Source != nil
	timeIdx := -1
	if needTime {
		timeIdx = p.Window.TimeIdx
	}
	switch p.Strategy {
	case streamplan.StrategyRepartition:
		h, err := s.hopFor(ctx, def.Name, s.hopTopic(def, p), p.Input.Source, p.RepartitionBy, spec.nIn, spec.nRep, spec.declaredRep, eos)
		if err != nil {
			return nil, err
		}
		r.hop, r.hopStats = h, h.stats
		final.Topic, final.Partitions = h.topic, h.outN
		final.Watch = map[string]int{p.Input.Topic: spec.nIn}
		final.Ops = func(int32) []dataflow.Op {
			return append([]dataflow.Op{&dataflow.Markers{Sources: spec.nIn},
				&dataflow.Source{Input: p.Input, TimeIdx: -1, NeedsSeq: p.NeedsSeq, CountIn: true, DLQ: s.dlqPartitions,
					Letters: s.letters, FromHop: true, TimeRequired: needTime, TimeRequiredIdx: timeIdx}}, tail()...)
		}
	case streamplan.StrategyCombine:
		topic := g.Exchange(streamplan.ExchangeCombine).Topic
		pre := dataflow.StageConfig{
			Name: def.Name, State: "__cmb/" + topic, Group: topic,
			Topic: p.Input.Topic, From: p.Input.From, Partitions: spec.nIn, Delay: delay, IdleTimeout: idle, Stats: r.stats,
			CommitEvery: s.commitEvery(), MaxPoll: s.pollRecords(), MetadataEvery: s.cfg.MetadataInterval,
			OnResize: final.OnResize, Writes: []string{topic},
			Ops: func(int32) []dataflow.Op {
				return []dataflow.Op{
					&dataflow.Source{Input: p.Input, TimeIdx: p.Window.TimeIdx, NeedsSeq: p.NeedsSeq, Observe: s.observer(p.Input.Source), CountIn: true,
						DLQ: s.dlqPartitions, Letters: s.letters, TimeRequired: needTime, TimeRequiredIdx: timeIdx},
					&dataflow.PartialAgg{Plan: p, Topic: topic, Partitions: spec.nCmb, EmitEvery: time.Duration(def.Options.EmitEveryMs) * time.Millisecond},
				}
			},
		}
		if eos {
			if err := s.exactlyOnce(ctx, &pre); err != nil {
				return nil, err
			}
		}
		pre.OnFail = final.OnFail
		st, err := s.startStage(ctx, pre)
		if err != nil {
			return nil, err
		}
		r.pre = st
		lag := &dataflow.LagBoard{Gauge: s.metrics.CombineLag, Now: s.clock}
		final.Topic, final.Partitions = topic, spec.nCmb
		final.Watch = map[string]int{p.Input.Topic: spec.nIn}
		final.Ops = func(int32) []dataflow.Op {
			return append([]dataflow.Op{&dataflow.Markers{Sources: spec.nIn, Lag: lag}}, tail()...)
		}
	default:
		// Read directly: a stream's input begins where its output does.
		final.From = p.Input.From
		if checked(p) {
			r.board = placement.NewBoard()
		}
		final.Ops = func(int32) []dataflow.Op {
			ops := []dataflow.Op{&dataflow.Source{Input: p.Input, TimeIdx: tsIdx, NeedsSeq: p.NeedsSeq,
				Observe: s.observer(p.Input.Source), CountIn: true, DLQ: s.dlqPartitions, Letters: s.letters,
				TimeRequired: needTime, TimeRequiredIdx: timeIdx}}
			if r.board != nil {
				ops = append(ops, s.placementOp(p, r.board))
			}
			return append(ops, tail()...)
		}
	}
	st, err := s.startStage(ctx, final)
	if err != nil {
		r.stop(s)
		return nil, err
	}
	r.final = st
	s.log.Info("plan chosen", "stream", def.Name, "strategy", p.Strategy, "rule", p.Rule, "reason", p.Reason)
	s.afterJoin(func() {
		s.log.Info("stream started", "stream", def.Name, "input", def.Input, "output", def.Topic, "partitions", spec.nIn,
			"restored_partitions", restored(st), "strategy", p.Strategy)
	})
	return r, nil
}

// restored is how many of a stage's partitions resumed from state (an
// offset committed before), for the start line of the log.
func restored(st *dataflow.Stage) int {
	return st.Resumed()
}

// stop stops the stream's stages (the shared hop when it was the last
// stream using it). Callers hold s.mu.
func (r *stream) stop(s *Server) {
	if r.final != nil {
		r.final.Stop()
		r.final = nil
		s.log.Info("stream stopped", "stream", r.def.Name)
	}
	if r.pre != nil {
		r.pre.Stop()
		r.pre = nil
	}
	if r.hop != nil {
		s.releaseHop(r.hop)
		r.hop = nil
	}
}

// stopAll stops every stream and hop and forgets them (the server
// closing). Each stage's Stop lets its tasks commit, leaves its consumer
// group and waits for the handover; one after another, a dozen streams
// could take longer than serve's shutdown budget, so up to stopParallel
// stages stop at once. Stages meet only through Kafka topics, so the
// order does not matter: a hop stopping before the streams behind it
// leaves them less to read, nothing wrong. Callers hold s.mu.
func (s *Server) stopAll() {
	var stages []*dataflow.Stage
	var names []string
	for name, r := range s.streams {
		for _, st := range []*dataflow.Stage{r.final, r.pre} {
			if st != nil {
				stages = append(stages, st)
			}
		}
		if r.final != nil {
			names = append(names, name)
		}
		r.final, r.pre, r.hop = nil, nil, nil
		delete(s.streams, name)
	}
	for topic, h := range s.hops {
		stages = append(stages, h.stage)
		delete(s.hops, topic)
	}
	t0 := time.Now()
	stopConcurrently(stages, stopParallel)
	sort.Strings(names)
	s.log.Info("streams stopped", "streams", names, "stages", len(stages), "seconds", fmt.Sprintf("%.2f", time.Since(t0).Seconds()))
}

// stopParallel bounds the stages stopping at once: each stop sends its
// tasks' last commits (a transaction each under exactly-once) and a
// LeaveGroup, and a few hundred streams should not hit the broker with
// all of them in the same instant.
const stopParallel = 8

// stopper is what stopConcurrently stops.
type stopper interface{ Stop() }

// stopConcurrently calls Stop on every one of xs, at most limit at a time,
// and returns when all have returned.
func stopConcurrently[T stopper](xs []T, limit int) {
	eachConcurrently(xs, limit, func(x T) { x.Stop() })
}

// eachConcurrently calls fn on every one of xs, at most limit at a time,
// and returns when all calls have returned.
func eachConcurrently[T any](xs []T, limit int, fn func(T)) {
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for _, x := range xs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(x)
		}()
	}
	wg.Wait()
}

// hopTopic is the repartition topic a stream reads: the hop generation
// its catalog record names, the first one for a stream recorded before
// hops had generations.
func (s *Server) hopTopic(def *catalog.Stream, p *planner.Plan) string {
	if def != nil && def.Hop != "" {
		return def.Hop
	}
	return streamplan.RepartitionTopic(s.cfg.AppID, p.Input.Topic, []string{p.RepartitionBy})
}

// hopGeneration is the hop generation a repartition stream being created
// reads. A new statement (persist) takes the first generation of its
// (topic, column) not sealed in the log this node has followed; should a
// seal land between that and the stream's record, the ledger rejects the
// record and the statement fails, asking to run it again. A stream from
// the catalog takes the generation its record names.
func (s *Server) hopGeneration(name string, p *planner.Plan, persist bool) string {
	base := streamplan.RepartitionTopic(s.cfg.AppID, p.Input.Topic, []string{p.RepartitionBy})
	s.catMu.Lock()
	defer s.catMu.Unlock()
	l := s.cf.ledger
	if l == nil {
		return base
	}
	if !persist {
		if e, ok := l.Get(catalog.KindStream, name); ok && e.Hop != "" {
			return e.Hop
		}
		return base
	}
	for n := 1; ; n++ {
		if t := streamplan.HopGeneration(base, n); !isSealed(l, t) {
			return t
		}
	}
}

func isSealed(l *catalog.Ledger, topic string) bool {
	_, ok := l.Sealed(topic)
	return ok
}

// hopFor returns the running hop of topic, a generation of the hop of
// (source, column), starting it for the first stream that needs it. nOut
// is the internal topic's partition count (repartition_partitions, default
// the source's count); an existing topic with another count is refused.
// stream is the stream starting: if the hop has to start for it and that
// fails, the stream is what recovers (recoverHop).
func (s *Server) hopFor(ctx context.Context, stream, topic string, src *catalog.Source, column string, nIn, nOut int, declared, eos bool) (*sharedHop, error) {
	if err := s.checkHop(ctx, topic, nOut, declared); err != nil {
		return nil, err
	}
	if h, ok := s.hops[topic]; ok {
		if eos && !h.eos {
			if err := s.upgradeHop(ctx, h); err != nil {
				return nil, err
			}
		}
		h.refs++
		return h, nil
	}
	// checkHop refused a count not dividing 960 unless allowed; allowed, it
	// is logged here, once a start for the hop however many streams share it.
	if err := s.keyedCount(topic, nOut, "repartition_partitions", "hop_source", src.Topic, "by", column); err != nil {
		return nil, err
	}
	if _, err := s.kafka.EnsureTopic(ctx, topic, nOut, s.sizedLike(ctx, src.Topic)); err != nil {
		return nil, err
	}
	rel := &catalog.Relation{Name: src.Name, Topic: src.Topic, Schema: src.Schema, Source: src}
	stats := &dataflow.Stats{}
	tsIdx, delay := -1, int64(0)
	if wm := src.Watermark; wm != nil {
		tsIdx, delay = src.Schema.Index(wm.Column), wm.DelayMs
	}
	colIdx := src.Schema.Index(column)
	var timeCols []int
	for i, c := range src.Schema {
		if c.Type == types.Timestamp {
			timeCols = append(timeCols, i)
		}
	}
	cfg := dataflow.StageConfig{
		Name: topic, State: "__hop/" + topic, Group: topic,
		Topic: src.Topic, Partitions: nIn, Delay: delay, IdleTimeout: idleTimeout(src), Stats: stats,
		CommitEvery: s.commitEvery(), MaxPoll: s.pollRecords(), MetadataEvery: s.cfg.MetadataInterval,
		Writes: []string{topic},
		Ops: func(int32) []dataflow.Op {
			return []dataflow.Op{
				// CountIn: the hop's records_in series, per source
				// partition, are what the console shows it read.
				&dataflow.Source{Input: rel, TimeIdx: tsIdx, Observe: s.observer(src), DLQ: s.dlqPartitions, Letters: s.letters, CountIn: true},
				&dataflow.Exchange{Topic: topic, Partitions: nOut, Col: colIdx, TimeCols: timeCols},
			}
		},
	}
	h := &sharedHop{topic: topic, outN: nOut, refs: 1, stats: stats, eos: eos, starter: stream}
	if eos {
		if err := s.exactlyOnce(ctx, &cfg); err != nil {
			return nil, err
		}
	}
	cfg.OnFail = func(err error) { s.recoverHop(h, err) }
	st, err := s.startStage(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("repartition hop %s: %w", topic, err)
	}
	h.stage, h.cfg = st, cfg
	s.hops[topic] = h
	s.afterJoin(func() {
		s.log.Info("repartition hop started", "hop", topic, "source", src.Topic, "by", column, "partitions", nOut, "restored_partitions", st.Resumed())
	})
	return h, nil
}

// checkHop says why a stream cannot read repartition topic (a hop
// generation) with nOut partitions, creating nothing: a running hop of
// another count when repartition_partitions was declared, a count that
// does not divide 960, or a topic that exists with another count.
func (s *Server) checkHop(ctx context.Context, topic string, nOut int, declared bool) error {
	if h, ok := s.hops[topic]; ok {
		if declared && h.outN != nOut {
			return sql.Errorf(sql.CodeInvalidParameter, "repartition topic %q runs with %d partitions, not the %d requested", topic, h.outN, nOut).
				WithHint("streams sharing a repartition hop share its topic: drop repartition_partitions or set it to %d", h.outN)
		}
		return nil
	}
	if err := state.CheckDivisor(topic, nOut, "repartition_partitions"); err != nil && !s.cfg.AllowNonDivisor {
		return &sql.Error{Code: sql.CodeInvalidParameter, Message: err.Error(), Err: err}
	}
	have, err := s.kafka.Partitions(ctx, topic)
	if err != nil {
		return err
	}
	if have > 0 && have != nOut {
		return sql.Errorf(sql.CodeInvalidParameter, "repartition topic %q exists with %d partitions, not %d", topic, have, nOut).
			WithHint("changing the count would move every key: delete the topic deliberately, or set repartition_partitions = %d", have)
	}
	return nil
}

// upgradeHop restarts an at-least-once hop as exactly-once, for the
// first exactly-once stream behind it: its copies then ride the hop's
// transactions. (Readers drop a copy they applied already either way; the
// transaction also keeps a crashed hop's copies out of read_committed
// readers until they commit.)
func (s *Server) upgradeHop(ctx context.Context, h *sharedHop) error {
	cfg := h.cfg
	if err := s.exactlyOnce(ctx, &cfg); err != nil {
		return err
	}
	h.stage.Stop()
	st, err := s.startStage(ctx, cfg)
	if err != nil {
		// Back as it was: the streams already behind it keep running.
		if old, rerr := s.startStage(ctx, h.cfg); rerr == nil {
			h.stage = old
		}
		return fmt.Errorf("repartition hop %s, exactly-once: %w", h.topic, err)
	}
	h.stage, h.cfg, h.eos = st, cfg, true
	return nil
}

// releaseHop drops one stream's use of the hop, stopping it after the last.
func (s *Server) releaseHop(h *sharedHop) {
	h.refs--
	if h.refs > 0 {
		return
	}
	h.stage.Stop()
	delete(s.hops, h.topic)
	s.log.Info("repartition hop stopped", "hop", h.topic)
	s.metrics.ForgetHop(h.topic)
}

// restartStream stops a stream and starts it again from its state (ALTER
// STREAM ... RESTART, or its input's partition count changed). A stream
// that cannot start stays listed as failed, with the reason.
func (s *Server) restartStream(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	def, ok := s.cat.Stream(name)
	if !ok {
		return &catalog.ErrNotFound{Name: name}
	}
	failed := &stream{def: def, stats: &dataflow.Stats{}}
	if r, ok := s.streams[name]; ok {
		if r.stopped {
			return errStreamStopped
		}
		r.stop(s)
		delete(s.streams, name)
		failed.stats, failed.hopStats = r.stats, r.hopStats // what it committed
	}
	r, err := s.startFromCatalog(ctx, def)
	if err != nil {
		failed.err = err
		s.streams[name] = failed
		return err
	}
	s.streams[name] = r
	return nil
}

// startFromCatalog plans a stream of the catalog again and starts it.
func (s *Server) startFromCatalog(ctx context.Context, def *catalog.Stream) (*stream, error) {
	stmt, err := sql.Parse(def.SQL)
	if err != nil {
		return nil, err
	}
	cs, ok := stmt.(*sql.CreateStream)
	if !ok {
		return nil, fmt.Errorf("catalog entry of %s is not a CREATE STREAM", def.Name)
	}
	d, p, err := s.planStream(cs, def.SQL)
	if err != nil {
		return nil, err
	}
	spec, err := s.prepareStream(ctx, d, p, cs.Options, false)
	if err != nil {
		return nil, err
	}
	return s.startStream(ctx, def, p, spec)
}

// restartAfterResize restarts a stream whose input changed its partition
// count, so its tasks cover the new partitions.
func (s *Server) restartAfterResize(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.restartStream(ctx, name); err != nil && !errors.Is(err, errStreamStopped) {
		s.log.Error("stream cannot run on its input's new partition count", "stream", name, "err", err)
	}
}
