package server

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/streamplan"
)

// ALTER STREAM s SET (strategy = ..., repartition_partitions = ...,
// combine_partitions = ...) re-plans a stream: the way out for a local
// aggregation whose input is misplaced (SHOW STREAMS: degraded), whose
// state holds each key in pieces, one per partition that got some of its
// rows. No part of that state can be trusted, and a new plan lays its
// state out differently anyway, so nothing of it is kept: the stream is
// computed again, from the earliest records its input still holds,
// exactly as DROP STREAM and CREATE STREAM with the new options would,
// under the same name and output topic and in one catalog record.
//
// What is kept and what is lost:
//   - the stream's output start moves to the topic's end (Stream.Start):
//     SELECT, SUBSCRIBE and new readers see only the re-computed results;
//     the records the old plan wrote stay in the topic before that start
//     (a pane's key names its stream, window and group key, so an upsert
//     of the topic keeps the re-computed pane, written last);
//   - input records deleted by the topic's retention are not counted
//     again;
//   - its state, consumer groups, changelogs and combine topic go, as at
//     DROP.
//
// In order, so that no node runs the old plan while the new one starts:
// everything that can refuse the statement is checked first; the stream
// is stopped on every node (a STOP record, as ALTER STREAM ... STOP);
// once no node is a member of its groups, they, its changelogs and its
// state are deleted; the new statement is recorded (OpAlter) with its
// output start, which every node follows by creating the stream again
// (the record is later in the log than the STOP, so the STOP no longer
// holds it: catalog.Ledger.Run).

// alterableStreamOptions are the options ALTER STREAM ... SET changes:
// how the stream is planned, not what it computes or where it writes.
var alterableStreamOptions = []string{"strategy", "repartition_partitions", "combine_partitions"}

// alterStreamSet runs ALTER STREAM s SET (...).
func (s *Server) alterStreamSet(ctx context.Context, st *sql.AlterStream) (*pgwire.Result, error) {
	if err := st.Options.Check("ALTER STREAM", alterableStreamOptions...); err != nil {
		return nil, err
	}
	def, ok := s.cat.Stream(st.Name)
	if !ok {
		return nil, &catalog.ErrNotFound{Name: st.Name}
	}
	if stopped, _ := s.runOf(st.Name); stopped {
		return nil, sql.Errorf(sql.CodeNotInPrereqState, "stream %s is stopped", st.Name).
			WithHint("ALTER STREAM %s START first: SET computes the stream again under its new plan and runs it", st.Name)
	}
	if readers := s.readersOf(st.Name); len(readers) > 0 {
		return nil, sql.Errorf(sql.CodeDependentObjects, "cannot re-plan stream %s: stream(s) %s read it, and would read its results twice, the old and the re-computed ones",
			st.Name, strings.Join(readers, ", ")).
			WithHint("drop the streams that read it first, and create them again after")
	}
	cs, text, changed, err := alteredStreamSQL(def.SQL, st.Options)
	if err != nil {
		return nil, err
	}
	res := &pgwire.Result{Tag: "ALTER STREAM"}
	if !changed {
		res.Notices = []pgwire.Notice{{Message: fmt.Sprintf("stream %s already has these options: nothing to re-plan", st.Name)}}
		return res, nil
	}
	nd, np, err := s.planNewStream(cs, text)
	if err != nil {
		return nil, err
	}
	if np.Strategy == streamplan.StrategyRepartition {
		nd.Hop = s.hopGeneration(nd.Name, np, true)
	}
	// Every refusal before anything changes: a refused ALTER leaves the
	// stream running as it was.
	s.mu.Lock()
	spec, err := s.checkStream(ctx, nd, np, cs.Options, true)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if old := s.membersWithoutStops(); len(old) > 0 {
		return nil, sql.Errorf(sql.CodeNotInPrereqState, "ALTER STREAM %s SET stops the stream on every server of the app first, and %s run(s) an earlier release that would keep running it",
			st.Name, strings.Join(old, ", ")).
			WithHint("finish the rolling upgrade first")
	}
	was := s.planOf(def)
	if err := s.stopEverywhere(ctx, st.Name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	notice, err := s.replan(ctx, nd, np, spec, was)
	if err != nil {
		return nil, sql.Errorf(sql.CodeObjectInUse, "stream %s could not be re-planned: %v", st.Name, err).
			WithHint("it is stopped; SHOW STREAMS shows it. ALTER STREAM %s START runs it again under its old plan, from nothing if its state was dropped already; or run this statement again", st.Name)
	}
	res.Notices = append(res.Notices, notice)
	res.Notices = append(res.Notices, s.divisorNotices(s.streams[nd.Name])...)
	return res, nil
}

// stopEverywhere stops stream name on every node, as ALTER STREAM ...
// STOP does, and returns once none is a member of its consumer groups.
func (s *Server) stopEverywhere(ctx context.Context, name string) error {
	off, err := s.writeRun(name, catalog.RunStopped, catalog.OpStop)
	if err != nil {
		return err
	}
	// This node's follower holds the stream stopped when it reads the
	// STOP: wait for that, or it could stop the stream started again
	// under the new plan below.
	if err := s.awaitFollower(ctx, off+1, func() error {
		return sql.Errorf("40003", "stream %s: the STOP written to the catalog was not read back", name).
			WithHint("it is stopped; ALTER STREAM %s START runs it again under its old plan", name)
	}); err != nil {
		return err
	}
	s.holdStopped(name)
	if held := s.awaitGroupsLeft(ctx, name); len(held) > 0 {
		return sql.Errorf(sql.CodeObjectInUse, "stream %s is stopped, but not re-planned: %s", name, held[0].Message).
			WithHint("%s; ALTER STREAM %s START runs it again under its old plan", held[0].Hint, name)
	}
	return nil
}

// replan replaces stopped stream nd.Name, planned was before, by nd
// planned np: its state and groups go, it is recorded with its new
// output start, and it starts. Callers hold s.mu.
func (s *Server) replan(ctx context.Context, nd *catalog.Stream, np *planner.Plan, spec streamSpec, was *planner.Plan) (pgwire.Notice, error) {
	name := nd.Name
	if err := s.dropStreamState(name, was); err != nil {
		return pgwire.Notice{}, err
	}
	if err := s.dropOldGroups(ctx, name, was); err != nil {
		return pgwire.Notice{}, err
	}
	made, err := s.makeStreamTopics(ctx, nd, np, spec)
	if err != nil {
		s.deleteMade(made)
		return pgwire.Notice{}, err
	}
	start, _, err := s.outputStart(ctx, nd, made)
	if err != nil {
		return pgwire.Notice{}, err
	}
	nd.Start = start
	if err := s.cat.ReplaceStream(nd, true); err != nil {
		return pgwire.Notice{}, err
	}
	if nd.Planned != streamplan.StrategyAuto {
		if err := s.store.PutPlan(name, planStrategy, nd.Planned.Recorded()); err != nil {
			return pgwire.Notice{}, err
		}
	}
	r, err := s.startStream(ctx, nd, np, spec)
	if err != nil {
		// Recorded: every node runs the new plan, or shows why not.
		s.streams[name] = &stream{def: nd, plan: np, err: err, stats: &dataflow.Stats{}}
		return pgwire.Notice{}, err
	}
	s.streams[name] = r
	s.log.Info("stream re-planned (ALTER STREAM ... SET)", "stream", name, "strategy", np.Strategy, "was", strategyOf(was), "output_start", start.String())
	return replanNotice(nd, np, was), nil
}

// replanNotice says what ALTER STREAM ... SET kept and lost.
func replanNotice(nd *catalog.Stream, np *planner.Plan, was *planner.Plan) pgwire.Notice {
	how := "reading " + np.Input.Topic + " directly"
	switch np.Strategy {
	case streamplan.StrategyRepartition:
		how = fmt.Sprintf("through repartition topic %s (by %s)", cmp.Or(nd.Hop, np.RepartitionBy), np.RepartitionBy)
	case streamplan.StrategyCombine:
		how = "through a combine hop"
	}
	from := "the start of its topic"
	if !nd.Start.Zero() {
		from = "offsets " + nd.Start.String() + " (partition:offset)"
	}
	return pgwire.Notice{
		Message: fmt.Sprintf("stream %s re-planned with strategy %s (was %s): it is computed again from the earliest records of %s, %s",
			nd.Name, np.Strategy, strategyOf(was), np.Input.Name, how),
		Detail: fmt.Sprintf("nothing of its state is kept (it was laid out for the old plan). Its output now starts at %s of topic %q: SELECT, SUBSCRIBE and new readers see only the re-computed results; what the old plan wrote stays in the topic before that start, and records of %s that retention deleted are not counted again",
			from, nd.Topic, np.Input.Name),
		Hint: "a consumer reading the topic itself sees both: each pane's key (stream, window, group key) lets an upsert keep the re-computed pane, written last",
	}
}

func strategyOf(p *planner.Plan) string {
	if p == nil {
		return "unknown"
	}
	return p.Strategy.String()
}

// planOf is the plan stream def runs (or ran) with on this node: its
// running plan, else its statement planned again (nil if it cannot be).
func (s *Server) planOf(def *catalog.Stream) *planner.Plan {
	s.mu.Lock()
	r := s.streams[def.Name]
	s.mu.Unlock()
	if r != nil && r.plan != nil {
		return r.plan
	}
	stmt, err := sql.Parse(def.SQL)
	if err != nil {
		return nil
	}
	cs, ok := stmt.(*sql.CreateStream)
	if !ok {
		return nil
	}
	_, p, err := s.planStream(cs, def.SQL)
	if err != nil {
		return nil
	}
	return p
}

// readersOf lists the streams that read relation name.
func (s *Server) readersOf(name string) []string {
	var out []string
	for _, def := range s.cat.Streams() {
		if def.Input == name {
			out = append(out, def.Name)
		}
	}
	sort.Strings(out)
	return out
}

// alteredStreamSQL is a stream's statement with options set: the CREATE
// STREAM it amounts to (what the catalog records and SHOW CREATE prints),
// parsed, and whether any option changed.
func alteredStreamSQL(text string, set sql.Options) (*sql.CreateStream, string, bool, error) {
	stmt, err := sql.Parse(text)
	if err != nil {
		return nil, "", false, err
	}
	cs, ok := stmt.(*sql.CreateStream)
	if !ok {
		return nil, "", false, fmt.Errorf("catalog entry %q is not a CREATE STREAM", clip(text, 80))
	}
	changed := false
	for k, v := range set {
		if old, had := cs.Options[k]; !had || !strings.EqualFold(old.Value, v.Value) {
			changed = true
		}
		cs.Options[k] = v
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE STREAM %s", quoteIdent(cs.Name))
	b.WriteString(withClause(cs.Options))
	// The query as written, EMIT EVERY included.
	b.WriteString(" AS " + strings.TrimRight(strings.TrimSpace(text[cs.QueryPos:]), ";"))
	out := b.String()
	stmt, err = sql.Parse(out)
	if err != nil {
		return nil, "", false, err
	}
	return stmt.(*sql.CreateStream), out, changed, nil
}
