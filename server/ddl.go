package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/streamplan"
)

// planStrategy names the recorded strategy of a stream whose cost rule
// chose it (its value: Strategy.Recorded).
const planStrategy = "strategy"

// IsFinalColumn is the BOOLEAN column EMIT EVERY adds to a stream's output
// (planner.IsFinalColumn).
const IsFinalColumn = planner.IsFinalColumn

// DefaultIdleTimeoutMs is a source's idle_timeout when it sets none.
const DefaultIdleTimeoutMs = catalog.DefaultIdleTimeoutMs

func (s *Server) createSource(ctx context.Context, st *sql.CreateSource, text string, persist bool) (*pgwire.Result, error) {
	src, err := planner.SourceFrom(st, text)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if done, err := s.nameTaken(src.Name, st.IfNotExists, persist); done || err != nil {
		return &pgwire.Result{Tag: "CREATE SOURCE"}, err
	}
	want := src.Partitions
	if want == 0 {
		want = 1
	}
	have, err := s.kafka.EnsureTopic(ctx, src.Topic, want, nil)
	if err != nil {
		return nil, err
	}
	if persist && src.Partitions > 0 && have != src.Partitions {
		return nil, sql.Errorf(sql.CodeInvalidParameter, "topic %q exists with %d partitions, not the %d declared", src.Topic, have, src.Partitions).
			WithPos(st.Options["partitions"].Pos).WithHint("declare partitions = %d, or omit partitions to take the topic as it is", have)
	}
	if src.OnError == streamplan.OnErrorDLQ {
		if _, err := s.kafka.EnsureTopic(ctx, src.DLQTopic, 1, s.sizedLike(ctx, src.Topic)); err != nil {
			return nil, err
		}
	}
	if err := s.cat.AddSource(src, persist); err != nil {
		return nil, err
	}
	s.seedDeadLetters(ctx, src)
	s.sampleSource(src)
	return &pgwire.Result{Tag: "CREATE SOURCE"}, nil
}

// planStream validates a CREATE STREAM of the catalog and plans it (a
// restart, a replay, another node's stream): the strategy the rules chose
// when it was created stands, whatever they would choose now.
func (s *Server) planStream(st *sql.CreateStream, text string) (*catalog.Stream, *planner.Plan, error) {
	return s.planStreamAs(st, text, false)
}

// planNewStream validates and plans a statement being run (CREATE STREAM,
// EXPLAIN, ALTER STREAM ... SET): the rules decide afresh, knowing which
// inputs are misplaced (catalog.Relation.Misplaced).
func (s *Server) planNewStream(st *sql.CreateStream, text string) (*catalog.Stream, *planner.Plan, error) {
	return s.planStreamAs(st, text, true)
}

func (s *Server) planStreamAs(st *sql.CreateStream, text string, isNew bool) (*catalog.Stream, *planner.Plan, error) {
	env := planner.StreamEnv{App: s.cfg.AppID, Estimate: func(p *planner.Plan) *planner.Estimate {
		est, err := s.estimate(p)
		if err != nil {
			s.log.Warn("cannot sample the source for the cost rule; deciding without statistics", "stream", st.Name, "err", err)
			return nil
		}
		if est != nil {
			est.SourceStats = s.statsFor(p.Input.Source).line(p.RepartitionBy)
		}
		return est
	}}
	var res planner.Resolver = s.cat
	if isNew {
		res = placedResolver{cat: s.cat, known: s.knownMisplaced()}
	} else {
		recorded, err := s.recordedPlan(st.Name)
		if err != nil {
			return nil, nil, err
		}
		env.Recorded = recorded
	}
	ps, err := planner.PlanStream(res, st, text, env)
	if err != nil {
		return nil, nil, err
	}
	return ps.Def, ps.Plan, nil
}

// createRetries is how many times CREATE STREAM starts a new stream
// again after a failure a restart cures (restartable), 1 s, 2 s and 4 s
// apart.
const createRetries = 3

func (s *Server) createStream(ctx context.Context, st *sql.CreateStream, text string, persist bool) (*pgwire.Result, error) {
	def, p, err := s.planStreamAs(st, text, persist)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if done, err := s.nameTaken(def.Name, st.IfNotExists, persist); done || err != nil {
		return &pgwire.Result{Tag: "CREATE STREAM"}, err
	}
	if persist {
		if err := s.topicTaken(def); err != nil {
			return nil, err
		}
	}
	if p.Strategy == streamplan.StrategyRepartition {
		def.Hop = s.hopGeneration(def.Name, p, persist)
	}
	if !persist {
		keepLegacyPanes(def, s.recordedKeyedPanes(def.Name))
	}
	// Every refusal comes before the first thing the statement makes (a
	// topic, a catalog record): a refused CREATE leaves nothing behind.
	spec, err := s.checkStream(ctx, def, p, st.Options, persist)
	if err != nil {
		return nil, err
	}
	res := &pgwire.Result{Tag: "CREATE STREAM"}
	if persist {
		// A new stream starts from nothing, whatever an earlier one of the same name left.
		if err := s.dropStreamState(def.Name, p); err != nil {
			return nil, err
		}
		if err := s.dropOldGroups(ctx, def.Name, p); err != nil {
			return nil, err
		}
	}
	made, err := s.makeStreamTopics(ctx, def, p, spec)
	if err != nil {
		s.deleteMade(made)
		return nil, err
	}
	if persist {
		// Only now: the earlier stream of the name, if any, has stopped
		// writing (its groups are empty and gone).
		var notice *pgwire.Notice
		if def.Start, notice, err = s.outputStart(ctx, def, made); err != nil {
			s.deleteMade(made)
			return nil, err
		}
		if notice != nil {
			res.Notices = append(res.Notices, *notice)
		}
	} else {
		def.Start = s.recordedStart(def.Name)
	}
	if err := s.cat.AddStream(def, persist); err != nil {
		if persist {
			s.deleteMade(made)
		}
		return nil, err
	}
	if !persist {
		stopped, epoch := s.runOf(def.Name)
		if stopped {
			r := s.idleStream(def, p, spec)
			r.stopped = true
			s.streams[def.Name] = r
			s.log.Info("stream held stopped (ALTER STREAM ... STOP)", "stream", def.Name)
			return res, nil
		}
		if err := s.adoptRunEpoch(def.Name, epoch); err != nil {
			return nil, err
		}
	}
	r, err := s.startStream(ctx, def, p, spec)
	for attempt := 0; err != nil && persist && attempt < createRetries && ctx.Err() == nil; attempt++ {
		// A task fenced while the first assignment opened the others (the
		// group moved its partition: a rebalance under way, another
		// process opening its share slowly) is a failure a restart
		// cures, as recover.go restarts a running stream: the stream
		// starts again rather than the statement fail and take back what
		// the other processes already run.
		what, ok := restartable(err)
		if !ok {
			break
		}
		s.log.Warn("stream "+what, "stream", def.Name, "attempt", attempt+1, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second << attempt):
		}
		r, err = s.startStream(ctx, def, p, spec)
	}
	if err != nil {
		if persist {
			// Taken back: its record (a drop follows it, which
			// compaction keeps alone), the groups and changelogs its
			// stages made, and the topics this statement created.
			_ = s.cat.Drop(catalog.KindStream, def.Name)
			gctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if gerr := s.dropStreamGroups(gctx, def.Name, p); gerr != nil {
				s.log.Warn("cannot delete the consumer groups of a stream that failed to start", "stream", def.Name, "err", gerr)
			}
			cancel()
			s.deleteMade(made)
			return nil, err
		}
		// Replaying the catalog: the stream stays, failed, with the reason.
		s.log.Error("stream cannot start", "stream", def.Name, "err", err)
		r := s.idleStream(def, p, spec)
		r.err = err
		s.streams[def.Name] = r
		return res, nil
	}
	if persist && def.Planned != streamplan.StrategyAuto {
		if err := s.store.PutPlan(def.Name, planStrategy, def.Planned.Recorded()); err != nil {
			return nil, err
		}
	}
	s.streams[def.Name] = r
	res.Notices = append(res.Notices, s.divisorNotices(r)...)
	if n := misplacedNotice(p); persist && n != nil {
		res.Notices = append(res.Notices, *n)
	}
	return res, nil
}

// prepareStream checks a planned stream against its topics and creates
// what it writes (checkStream, then makeStreamTopics). It returns the
// partition counts the stream starts with.
func (s *Server) prepareStream(ctx context.Context, def *catalog.Stream, p *planner.Plan, o sql.Options, persist bool) (streamSpec, error) {
	spec, err := s.checkStream(ctx, def, p, o, persist)
	if err != nil {
		return spec, err
	}
	_, err = s.makeStreamTopics(ctx, def, p, spec)
	return spec, err
}

// checkStream checks a planned stream against its topics, creating
// nothing: the partition counts it would start with, or why it cannot.
func (s *Server) checkStream(ctx context.Context, def *catalog.Stream, p *planner.Plan, o sql.Options, persist bool) (streamSpec, error) {
	var spec streamSpec
	nIn, err := s.kafka.Partitions(ctx, p.Input.Topic)
	if err != nil {
		return spec, err
	}
	if nIn == 0 {
		return spec, sql.Errorf(sql.CodeUndefinedTable, "input topic %q of %s does not exist", p.Input.Topic, p.Input.Name)
	}
	spec.nIn = nIn
	if localKeyed(p) {
		if err := s.keyedCount(p.Input.Topic, nIn, "", "stream", def.Name); err != nil {
			return spec, fmt.Errorf("stream %s refused: %w", def.Name, err)
		}
	}
	have, err := s.kafka.Partitions(ctx, def.Topic)
	if err != nil {
		return spec, err
	}
	switch {
	case have == 0 && def.Partitions > 0:
		spec.outN = def.Partitions
	case have == 0:
		spec.outN = nIn
	case persist && def.Partitions > 0 && have != def.Partitions:
		return spec, sql.Errorf(sql.CodeInvalidParameter, "output topic %q exists with %d partitions, not the %d declared", def.Topic, have, def.Partitions).
			WithPos(o["partitions"].Pos)
	default:
		spec.outN = have
	}
	switch p.Strategy {
	case streamplan.StrategyRepartition:
		spec.nRep = def.Options.RepartitionPartitions
		spec.declaredRep = spec.nRep > 0
		if !spec.declaredRep {
			spec.nRep = nIn
		}
		if err := s.checkHop(ctx, s.hopTopic(def, p), spec.nRep, spec.declaredRep); err != nil {
			return spec, err
		}
	case streamplan.StrategyCombine:
		spec.nCmb = def.Options.CombinePartitions
		switch {
		case len(p.Keys) == 0 && spec.nCmb > 1:
			// Every partial of a window carries the same (empty) key: one
			// partition would get them all and the others only markers.
			return spec, sql.Errorf(sql.CodeInvalidParameter, "combine_partitions = %d: a window without a GROUP BY key merges on one partition", spec.nCmb).
				WithPos(o["combine_partitions"].Pos).WithHint("drop combine_partitions, or set it to 1")
		case len(p.Keys) == 0:
			spec.nCmb = 1
		case spec.nCmb == 0:
			spec.nCmb = nIn
		}
		topic := combineTopic(s.cfg.AppID, p.Input.Topic, def.Name)
		if err := s.keyedCount(topic, spec.nCmb, "combine_partitions", "stream", def.Name); err != nil {
			return spec, err
		}
		have, err := s.kafka.Partitions(ctx, topic)
		if err != nil {
			return spec, err
		}
		if have > 0 && have != spec.nCmb {
			return spec, sql.Errorf(sql.CodeInvalidParameter, "combine topic %q exists with %d partitions, not %d", topic, have, spec.nCmb).
				WithHint("delete the topic deliberately, or set combine_partitions = %d", have)
		}
	}
	return spec, nil
}

// localKeyed reports whether a plan keeps keyed state per partition of
// its input topic: a local aggregation on the input's partition key.
func localKeyed(p *planner.Plan) bool {
	return p.Aggregate && p.PartitionKey >= 0 && p.Strategy == streamplan.StrategyLocal
}

// keyedCount checks the partition count n of a topic whose partitions
// own keyed state: a local stream's input, a repartition or a combine
// topic (option names what sets an internal topic's count). A count that
// does not divide 960 is refused (22023) unless the server runs with
// TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1; then it is logged as a warning
// with attrs (the stream, or the hop), naming the topic, the count, the
// closest valid counts and what to set. Every start creates the catalog's
// streams and hops again through this check, so the warning repeats at
// each start next to each topic concerned, as the seed asks.
func (s *Server) keyedCount(topic string, n int, option string, attrs ...any) error {
	err := state.CheckDivisor(topic, n, option)
	var de *state.DivisorError
	if !errors.As(err, &de) {
		return nil
	}
	if !s.cfg.AllowNonDivisor {
		return &sql.Error{Code: sql.CodeInvalidParameter, Message: err.Error(), Err: err}
	}
	s.log.Warn("keyed state on a partition count that does not divide 960 can be rescaled only to a count that divides 960 (started anyway: TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1)",
		append(attrs, "topic", topic, "partitions", n, "closest_valid", state.ClosestValid(n), "fix", de.Remedy())...)
	return nil
}

// divisorNotices warns the client creating a stream of each topic its
// keyed state lives on whose count does not divide 960 (only possible
// under TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1, keyedCount refuses it
// otherwise): the input of a local aggregation, the repartition topic it
// reads (a hop it shares may run on a count it did not ask for), its
// combine topic.
func (s *Server) divisorNotices(r *stream) []pgwire.Notice {
	p, spec := r.plan, r.spec
	var err error
	switch {
	case localKeyed(p):
		err = state.CheckDivisor(p.Input.Topic, spec.nIn, "")
	case p.Strategy == streamplan.StrategyRepartition && r.hop != nil:
		err = state.CheckDivisor(r.hop.topic, r.hop.outN, "repartition_partitions")
	case p.Strategy == streamplan.StrategyCombine:
		err = state.CheckDivisor(combineTopic(s.cfg.AppID, p.Input.Topic, r.def.Name), spec.nCmb, "combine_partitions")
	}
	var de *state.DivisorError
	if !errors.As(err, &de) {
		return nil
	}
	return []pgwire.Notice{{Severity: "WARNING", Message: de.Warning(),
		Detail: "TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1 let the stream start; each start of the server logs this warning again",
		Hint:   de.Remedy() + " before the stream holds state worth keeping"}}
}

// dropStreamState deletes the state of a stream's stages.
func (s *Server) dropStreamState(name string, p *planner.Plan) error {
	if err := s.store.DropStream(name); err != nil {
		return err
	}
	if p != nil && p.Input != nil {
		return s.store.DropStream("__cmb/" + combineTopic(s.cfg.AppID, p.Input.Topic, name))
	}
	return nil
}

// dropStreamGroups deletes a stream's consumer groups (its final stage's,
// and its combine's pre-aggregation's), their changelogs, and its combine
// topic: an exactly-once stream takes the groups' offsets as committed
// output, every task restores its state from its changelog, and a merge
// stage reads the combine topic from its start, so a new stream of the
// same name would replay its input silently, start from the old stream's
// state, or merge the old stream's partials (of other aggregates: "corrupt
// accumulator encoding"). The topics go only once the groups are gone:
// no process writes them then.
func (s *Server) dropStreamGroups(ctx context.Context, name string, p *planner.Plan) error {
	groups := []string{s.groupName(name)}
	var topics []string
	if p != nil && p.Input != nil {
		cmb := combineTopic(s.cfg.AppID, p.Input.Topic, name)
		groups = append(groups, cmb)
		topics = append(topics, cmb)
	}
	if err := s.kafka.DeleteGroups(ctx, groups...); err != nil {
		return err
	}
	for _, g := range groups {
		topics = append(topics, changelogTopic(g))
	}
	return s.kafka.DeleteTopics(ctx, topics...)
}

// oldGroupsWait is how long a CREATE STREAM waits for the consumer groups
// of an earlier stream of its name to empty: other nodes leave them as
// they follow the DROP, within milliseconds.
const oldGroupsWait = 3 * time.Second

// dropOldGroups deletes what an earlier stream of this name left
// (dropStreamGroups) before a new one starts. A group that keeps members
// means the name runs elsewhere: a stream another node created at the same
// moment, whose record this node has not read yet. The CREATE then fails,
// writing nothing, rather than delete a running stream's groups.
func (s *Server) dropOldGroups(ctx context.Context, name string, p *planner.Plan) error {
	err := s.whenGroupsEmpty(ctx, func() error { return s.dropStreamGroups(ctx, name, p) })
	if kafkaio.IsGroupNotEmpty(err) {
		return &sql.Error{Code: sql.CodeObjectInUse, Err: err,
			Message: fmt.Sprintf("stream %s: a stream of that name runs on another node (its consumer group has members)", name),
			HintMsg: "another node created it at the same moment, or has not stopped an earlier one yet: SHOW STREAMS, then retry or pick another name"}
	}
	return err
}

// nameTaken decides a CREATE whose name exists: IF NOT EXISTS makes it a
// no-op (done), otherwise it is 42P07. Replaying the catalog never collides.
func (s *Server) nameTaken(name string, ifNotExists, persist bool) (done bool, err error) {
	if _, exists := s.cat.Relation(name); !exists || !persist {
		return false, nil
	}
	if ifNotExists {
		return true, nil
	}
	return false, &catalog.ErrExists{Name: name}
}

func (s *Server) drop(st *sql.Drop) (*pgwire.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !st.Cascade {
		return s.dropOne(st)
	}
	// CASCADE: the streams reading it go first, readers before what they
	// read, each dropped as DROP STREAM would (their topics stay: DELETE
	// TOPIC applies to the named stream only). One that cannot be dropped
	// stops the statement there; those before it stay dropped.
	readers := s.cat.Readers(st.Name)
	var notices []pgwire.Notice
	for _, r := range readers {
		res, err := s.dropOne(&sql.Drop{Kind: "STREAM", Name: r})
		if err != nil {
			return nil, fmt.Errorf("DROP %s %s CASCADE: dropping stream %s: %w", st.Kind, st.Name, r, err)
		}
		notices = append(notices, res.Notices...)
	}
	res, err := s.dropOne(st)
	if err != nil {
		return nil, err
	}
	if len(readers) > 0 {
		// PostgreSQL's words: one NOTICE, one detail line a dependent.
		detail := make([]string, len(readers))
		for i, r := range readers {
			detail[i] = "drop cascades to stream " + r
		}
		msg := "drop cascades to stream " + readers[0]
		if len(readers) > 1 {
			msg = fmt.Sprintf("drop cascades to %d other objects", len(readers))
		}
		notices = append([]pgwire.Notice{{Message: msg, Detail: strings.Join(detail, "\n")}}, notices...)
	}
	res.Notices = append(notices, res.Notices...)
	return res, nil
}

// dropOne drops one source or stream (s.mu held); streams reading it
// refuse it (catalog.ErrInUse).
func (s *Server) dropOne(st *sql.Drop) (*pgwire.Result, error) {
	kind := catalog.KindSource
	if st.Kind == "STREAM" {
		kind = catalog.KindStream
	}
	if st.DeleteTopic && kind == catalog.KindSource {
		return nil, sql.Errorf(sql.CodeNotSupported, "DELETE TOPIC applies to DROP STREAM only").
			WithHint("a source's topic is its producers'; delete it with your Kafka tools")
	}
	var exists bool
	var def *catalog.Stream
	if kind == catalog.KindSource {
		_, exists = s.cat.Source(st.Name)
	} else {
		def, exists = s.cat.Stream(st.Name)
	}
	if !exists {
		if had, err := s.dropFailed(kind, st.Name); had || err != nil {
			res := &pgwire.Result{Tag: "DROP " + st.Kind}
			if had && err == nil && st.DeleteTopic {
				// Its record could not be read: its topics are not known.
				res.Notices = []pgwire.Notice{{Severity: "WARNING", Message: fmt.Sprintf("stream %s dropped; its topics are not known (its catalog record could not be applied) and were not deleted", st.Name),
					Hint: "delete them with your Kafka tools"}}
			}
			return res, err
		}
		if st.IfExists {
			return &pgwire.Result{Tag: "DROP " + st.Kind}, nil
		}
		if _, other := s.cat.Relation(st.Name); other {
			return nil, sql.Errorf("42809", "%q is not a %s", st.Name, strings.ToLower(st.Kind)).WithHint("use DROP %s", otherKind(st.Kind))
		}
		return nil, &catalog.ErrNotFound{Name: st.Name}
	}
	if st.DeleteTopic {
		// Checked before anything is dropped: a refused DROP changes nothing.
		if err := s.dropTopicsRefusal(def); err != nil {
			return nil, err
		}
	}
	drop := s.cat.Drop
	if st.DeleteTopic {
		drop = func(_ catalog.Kind, name string) error { return s.cat.DropStreamDeletingTopic(name) }
	}
	if err := drop(kind, st.Name); err != nil {
		return nil, err
	}
	if _, epoch := s.runOf(st.Name); kind == catalog.KindStream && epoch > 0 {
		// Its STOP or START goes too, so that compaction removes it (a
		// new stream of the name would ignore it anyway: catalog.Ledger.Run).
		if err := s.clog.Write(catalog.Change{Kind: catalog.KindRun, Name: st.Name, Op: catalog.OpDrop}); err != nil {
			s.log.Warn("cannot remove the dropped stream's STOP/START record from the catalog; it stays, ignored", "stream", st.Name, "err", err)
		}
	}
	if kind == catalog.KindSource {
		s.statsMu.Lock()
		delete(s.sourceStats, st.Name)
		s.statsMu.Unlock()
	}
	res := &pgwire.Result{Tag: "DROP " + st.Kind}
	var plan *planner.Plan
	if r, ok := s.streams[st.Name]; ok {
		plan = r.plan
		r.stop(s)
		delete(s.streams, st.Name)
		if err := s.dropStreamState(st.Name, r.plan); err != nil {
			return nil, err
		}
		if !st.DeleteTopic {
			// Best effort: a CREATE of the same name deletes them again first.
			gctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := s.dropStreamGroups(gctx, st.Name, r.plan); err != nil {
				s.log.Warn("cannot delete the dropped stream's consumer groups; a new stream of that name deletes them first", "stream", st.Name, "err", err)
			}
			cancel()
		}
		s.metrics.Forget(st.Name)
	}
	if st.DeleteTopic {
		gctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res.Notices = s.deleteStreamTopics(gctx, def, plan)
		cancel()
	}
	return res, nil
}

func otherKind(k string) string {
	if k == "STREAM" {
		return "SOURCE"
	}
	return "STREAM"
}

// recordedPlan is the strategy the rules chose when stream name was
// created: this node's record of it, or else the catalog record's (a node
// replaying a stream created elsewhere before it joined). "": none.
func (s *Server) recordedPlan(name string) (streamplan.Strategy, error) {
	v, err := s.store.Plan(name, planStrategy)
	if err != nil {
		return streamplan.StrategyAuto, err
	}
	if v != "" {
		return streamplan.ParseRecorded(v)
	}
	s.catMu.Lock()
	defer s.catMu.Unlock()
	if s.cf.ledger == nil {
		return streamplan.StrategyAuto, nil
	}
	e, _ := s.cf.ledger.Get(catalog.KindStream, name)
	return e.Planned, nil
}
