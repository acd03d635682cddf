package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/streamplan"
)

// alterStream runs ALTER STREAM s RESTART: the stream's stages stop and
// start again from its state, so a stream that failed (a poison record
// under on_error = 'fail', a full disk) resumes once the cause is fixed.
// The restart's own failure is the statement's error. STOP and START are
// in stopstart.go, SET (a new plan) in replan.go.
func (s *Server) alterStream(ctx context.Context, st *sql.AlterStream) (*pgwire.Result, error) {
	switch st.Action {
	case sql.AlterSet:
		return s.alterStreamSet(ctx, st)
	case sql.AlterStop, sql.AlterStart:
		return s.alterStreamRun(ctx, st)
	}
	if _, ok := s.cat.Stream(st.Name); !ok {
		return nil, &catalog.ErrNotFound{Name: st.Name}
	}
	if err := s.restartStream(ctx, st.Name); errors.Is(err, errStreamStopped) {
		return nil, sql.Errorf(sql.CodeNotInPrereqState, "stream %s is stopped", st.Name).
			WithHint("ALTER STREAM %s START runs it again", st.Name)
	} else if err != nil {
		return nil, sql.Errorf(sql.CodeObjectInUse, "stream %s cannot restart: %v", st.Name, err).
			WithHint("SHOW STREAMS shows its error; fix the cause (ALTER SOURCE ... SET (on_error = 'skip') passes a poison record) and retry")
	}
	return &pgwire.Result{Tag: "ALTER STREAM"}, nil
}

// alterableSourceOptions are the options ALTER SOURCE may change: how
// records are read, not what they are.
var alterableSourceOptions = []string{"on_error", "dlq_topic", "idle_timeout", "partitions"}

// alterSource runs ALTER SOURCE src SET (...): the new definition is
// persisted (as the CREATE SOURCE it amounts to), and every stream
// reading the source restarts on it.
func (s *Server) alterSource(ctx context.Context, st *sql.AlterSource) (*pgwire.Result, error) {
	if err := st.Options.Check("ALTER SOURCE", alterableSourceOptions...); err != nil {
		return nil, err
	}
	old, ok := s.cat.Source(st.Name)
	if !ok {
		return nil, &catalog.ErrNotFound{Name: st.Name}
	}
	stmt, err := sql.Parse(old.SQL)
	if err != nil {
		return nil, err
	}
	cs, ok := stmt.(*sql.CreateSource)
	if !ok {
		return nil, fmt.Errorf("catalog entry of source %s is not a CREATE SOURCE", st.Name)
	}
	var res pgwire.Result
	if _, ok := st.Options["partitions"]; ok {
		notices, err := s.growSource(ctx, old, st.Options)
		if err != nil {
			return nil, err
		}
		res.Notices = notices
	}
	for k, v := range st.Options {
		cs.Options[k] = v
	}
	text := sourceSQL(cs)
	src, err := planner.SourceFrom(cs, text)
	if err != nil {
		return nil, err
	}
	if src.OnError == streamplan.OnErrorDLQ {
		if err := topicOptions(cs.Options, [2]string{"dlq_topic", src.DLQTopic}); err != nil {
			return nil, err
		}
	}
	if err := s.applySource(ctx, src, true); err != nil {
		return nil, err
	}
	res.Tag = "ALTER SOURCE"
	return &res, nil
}

// growSource runs the partitions part of ALTER SOURCE ... SET (partitions
// = M): the topic grows to M with CreatePartitions (Kafka cannot shrink a
// topic, so a smaller count is refused, and a count that does not divide
// 960 is refused unless the server allows them), before the catalog
// records M and the readers restart on it (applySource). It warns when a
// keyed stateful stream reads the source: under the new count the keys
// that move start empty on their new partition.
func (s *Server) growSource(ctx context.Context, src *catalog.Source, o sql.Options) ([]pgwire.Notice, error) {
	m, err := o.Count("partitions")
	if err != nil {
		return nil, err
	}
	pos := o["partitions"].Pos
	have, err := s.kafka.Partitions(ctx, src.Topic)
	if err != nil {
		return nil, err
	}
	if m < have {
		return nil, sql.Errorf(sql.CodeInvalidParameter, "topic %q of source %s has %d partitions: Kafka cannot shrink a topic to %d", src.Topic, src.Name, have, m).
			WithPos(pos).WithHint("a topic only grows; to read fewer partitions, create a new topic and a source on it")
	}
	if err := state.CheckDivisor(src.Topic, m, ""); err != nil && !s.cfg.AllowNonDivisor {
		return nil, sql.Errorf(sql.CodeInvalidParameter, "partitions = %d does not divide 960: keyed state on topic %q could be rescaled only back to a count that divides 960", m, src.Topic).
			WithPos(pos).WithHint("choose a count that divides 960 (closest: %s), or start the server with TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1", state.ClosestValid(m))
	}
	if m == have {
		return nil, nil
	}
	if err := s.kafka.CreatePartitions(ctx, src.Topic, m); err != nil {
		return nil, err
	}
	s.log.Info("source topic grown", "source", src.Name, "topic", src.Topic, "was", have, "partitions", m)
	var keyed, stopped []string
	s.mu.Lock()
	for name, r := range s.streams {
		if r.plan != nil && r.plan.Input.Source != nil && r.plan.Input.Source.Name == src.Name && movesState(r.plan) {
			if r.stopped {
				stopped = append(stopped, name)
			} else {
				keyed = append(keyed, name)
			}
		}
	}
	s.mu.Unlock()
	sort.Strings(keyed)
	sort.Strings(stopped)
	var notices []pgwire.Notice
	if len(keyed) > 0 {
		notices = append(notices, pgwire.Notice{
			Severity: "WARNING",
			Message: fmt.Sprintf("topic %q grew from %d to %d partitions while keyed stateful streams read it (%s): keys that move to another partition start with empty state there",
				src.Topic, have, m, strings.Join(keyed, ", ")),
			Hint: "to keep their state, first ALTER STREAM ... STOP each of them (or stop every server of the app), then grow the topic, run `turbinesql rescale --to N`, and ALTER STREAM ... START them (or start the servers)",
		})
	}
	if len(stopped) > 0 {
		// The way the README describes: say the next step.
		notices = append(notices, pgwire.Notice{
			Severity: "NOTICE",
			Message: fmt.Sprintf("stopped keyed stateful streams read topic %q (%s): rescale their state to %d partitions before they start again, or keys that move start empty",
				src.Topic, strings.Join(stopped, ", "), m),
			Hint: fmt.Sprintf("turbinesql rescale --brokers ... --app-id %s --to %d --stream %s, then ALTER STREAM ... START",
				s.cfg.AppID, m, strings.Join(stopped, " --stream ")),
		})
	}
	return notices, nil
}

// movesState reports whether a stream keeps keyed state per input
// partition, which a change of the input's count moves: a local
// aggregation (its GROUP BY holds the partition key). A hop's state
// follows its internal topic, which does not grow with the source.
func movesState(p *planner.Plan) bool {
	return p.Aggregate && p.Strategy == streamplan.StrategyLocal
}

// applySource puts src in place of the source of its name and restarts
// every stream reading it; persist writes it to the catalog log (not when
// the follower applies another node's ALTER SOURCE).
func (s *Server) applySource(ctx context.Context, src *catalog.Source, persist bool) error {
	if src.OnError == streamplan.OnErrorDLQ {
		if _, err := s.kafka.EnsureTopic(ctx, src.DLQTopic, 1, s.sizedLike(ctx, src.Topic)); err != nil {
			return err
		}
		s.seedDeadLetters(ctx, src)
	}
	s.mu.Lock()
	err := s.cat.ReplaceSource(src, persist)
	var readers []string
	for _, def := range s.cat.Streams() {
		if rel, ok := s.cat.Relation(def.Input); ok && rel.Source != nil && rel.Source.Name == src.Name {
			readers = append(readers, def.Name)
		}
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	var failed []string
	for _, name := range readers {
		if err := s.restartStream(ctx, name); err != nil && !errors.Is(err, errStreamStopped) {
			failed = append(failed, fmt.Sprintf("%s: %v", name, err))
		}
	}
	if len(failed) > 0 {
		return sql.Errorf(sql.CodeObjectInUse, "source %s altered, but streams could not restart: %s", src.Name, strings.Join(failed, "; "))
	}
	return nil
}

// replaceSourceFrom applies a source's new statement from the catalog log
// (another node's ALTER SOURCE).
func (s *Server) replaceSourceFrom(ctx context.Context, text string) error {
	stmt, err := sql.Parse(text)
	if err != nil {
		return err
	}
	cs, ok := stmt.(*sql.CreateSource)
	if !ok {
		return errNotSource
	}
	src, err := planner.SourceFrom(cs, text)
	if err != nil {
		return err
	}
	return s.applySource(ctx, src, false)
}

// sourceSQL renders a CREATE SOURCE with its (possibly altered) options:
// what the catalog keeps, and replays.
func sourceSQL(cs *sql.CreateSource) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE SOURCE %s (", quoteIdent(cs.Name))
	for i, c := range cs.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", quoteIdent(c.Name), c.Type)
	}
	if wm := cs.Watermark; wm != nil {
		fmt.Fprintf(&b, ", WATERMARK FOR %s AS %s - INTERVAL '%d' MILLISECOND", quoteIdent(wm.Column), quoteIdent(wm.Column), wm.DelayMs)
	}
	b.WriteString(")")
	b.WriteString(withClause(cs.Options))
	return b.String()
}

// withClause writes options as a statement's " WITH (k = v, ...)", keys
// sorted so that the same options always read the same ("" for none).
func withClause(o sql.Options) string {
	if len(o) == 0 {
		return ""
	}
	keys := o.Keys()
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(" WITH (")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k + " = " + optionSQL(o[k]))
	}
	b.WriteString(")")
	return b.String()
}

// optionSQL renders an option's value as it was written.
func optionSQL(o sql.Option) string {
	switch {
	case o.Interval:
		return fmt.Sprintf("INTERVAL '%d' MILLISECOND", o.Millis)
	case o.IsString:
		return "'" + strings.ReplaceAll(o.Value, "'", "''") + "'"
	}
	return o.Value
}

// quoteIdent double-quotes an identifier (ANSI_QUOTES).
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
