package planner

import (
	"errors"
	"fmt"
	"strings"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/streamplan"
	"github.com/turbinesql/turbinesql/types"
)

// StreamOptions are the WITH options CREATE STREAM takes.
var StreamOptions = []string{"topic", "partitions", "message_key", "strategy", "processing_guarantee", "allowed_lateness", "late_data_topic", "repartition_partitions", "combine_partitions", "state_ttl"}

// IsFinalColumn is the BOOLEAN column EMIT EVERY adds to a stream's output:
// false on an early fire of an open window, true on its one final pane.
const IsFinalColumn = "is_final"

// StreamEnv is what planning a CREATE STREAM takes besides the statement
// and the catalog. The caller supplies it: the planner reads no Kafka.
type StreamEnv struct {
	// App names the internal topics of the graph.
	App string
	// Recorded is the strategy the rules chose when the stream was
	// created (a restart or a replay plans it again: its state is laid
	// out for that plan); StrategyAuto: the rules decide afresh.
	Recorded streamplan.Strategy
	// Estimate measures a sample of the input for the cost rule, called
	// only when both hops could serve the query and nothing is recorded;
	// nil, or a nil Estimate: decide without statistics.
	Estimate func(*Plan) *Estimate
}

// Stream is a CREATE STREAM planned: its catalog definition, its logical
// plan, and (Graph) the stream graph the runtime deploys.
type Stream struct {
	Def  *catalog.Stream
	Plan *Plan
}

// Graph is the stream's graph, its internal topics named for app (a
// repartition stream reads Def.Hop, set by the caller once the hop's
// generation is known).
func (s *Stream) Graph(app string) *streamplan.Graph { return BuildGraph(s.Def, s.Plan, app) }

// StreamGraph plans st and returns its graph: statement + catalog (+ the
// estimate, in env) in, the graph the runtime deploys out.
func StreamGraph(cat Resolver, st *sql.CreateStream, text string, env StreamEnv) (*streamplan.Graph, error) {
	s, err := PlanStream(cat, st, text, env)
	if err != nil {
		return nil, err
	}
	return s.Graph(env.App), nil
}

// PlanStream validates a CREATE STREAM's options (every one checked here,
// once, with an error naming it) and plans its query against cat.
func PlanStream(cat Resolver, st *sql.CreateStream, text string, env StreamEnv) (*Stream, error) {
	o := st.Options
	if err := o.Check("stream", StreamOptions...); err != nil {
		return nil, err
	}
	def := &catalog.Stream{Name: st.Name, SQL: text, Topic: o.String("topic", st.Name)}
	var err error
	if def.Options.Strategy, err = streamplan.ParseStrategy(o.String("strategy", streamplan.StrategyAuto.String())); err != nil {
		return nil, UnknownStrategy(strings.ToLower(o.String("strategy", "")))
	}
	if def.Options.Guarantee, err = streamplan.ParseGuarantee(o.String("processing_guarantee", streamplan.AtLeastOnce.String())); err != nil {
		return nil, OptionError(o, err)
	}
	if def.Partitions, err = o.Count("partitions"); err != nil {
		return nil, err
	}
	if def.Options.AllowedLatenessMs, err = o.Millis("allowed_lateness", 0); err != nil {
		return nil, err
	}
	if def.Options.AllowedLatenessMs < 0 {
		return nil, sql.Errorf(sql.CodeInvalidParameter, "allowed_lateness cannot be negative").WithPos(o["allowed_lateness"].Pos)
	}
	def.Options.LateDataTopic = o.String("late_data_topic", "")
	if def.Options.StateTTLMs, err = o.Millis("state_ttl", 0); err != nil {
		return nil, err
	}
	if def.Options.StateTTLMs < 0 {
		return nil, sql.Errorf(sql.CodeInvalidParameter, "state_ttl cannot be negative").WithPos(o["state_ttl"].Pos)
	}
	if err := TopicOptions(o, [2]string{"topic", def.Topic}, [2]string{"late_data_topic", def.Options.LateDataTopic}); err != nil {
		return nil, err
	}
	p, err := BuildStream(cat, st.Query, text, def.Options.Strategy)
	if err != nil {
		return nil, err
	}
	if opt := lateOption(def.Options); opt != "" {
		if err := noLateCombine(p, opt, o); err != nil {
			return nil, err
		}
	}
	if def.Options.Strategy == streamplan.StrategyAuto {
		// The cost rule and the MisplacedInput rule decide once, when the
		// stream is created: its state is laid out for the plan they
		// chose, so a restart (which plans the stream again) takes the
		// recorded choice.
		switch {
		case env.Recorded != streamplan.StrategyAuto:
			UseRecorded(p, env.Recorded)
		case p.CombineEligible:
			var est *Estimate
			if env.Estimate != nil {
				est = env.Estimate(p)
			}
			ChooseByCost(p, est)
		}
		if p.CombineEligible || p.Rule == RuleMisplacedInput {
			// Recorded with the stream, so the other nodes run its plan.
			def.Planned = p.Strategy
		}
	}
	def.Input = p.Input.Name
	if st.EmitEveryMs > 0 {
		if p.Window == nil {
			return nil, sql.Errorf(sql.CodeNotSupported, "EMIT EVERY needs a window in GROUP BY").
				WithHint("a GROUP BY without a window already emits each changed group at every commit")
		}
		if p.Output.Index(IsFinalColumn) >= 0 {
			return nil, sql.Errorf("42701", "column %q is added by EMIT EVERY; name the select-list column otherwise", IsFinalColumn)
		}
		// Early panes and the final one share the output: is_final tells them apart.
		p.Output = append(p.Output, types.Field{Name: IsFinalColumn, Type: types.Bool})
		def.Options.EmitEveryMs = st.EmitEveryMs
	}
	def.Schema = p.Output
	if err := keyOutput(def, p, o); err != nil {
		return nil, err
	}
	if def.Options.StateTTLMs > 0 && (p.Window != nil || !p.Aggregate || def.Options.MessageKey != "") {
		// A window's groups go when it closes; with message_key records
		// of several groups share a key, so no tombstone could say which
		// group expired.
		return nil, sql.Errorf(sql.CodeNotSupported, "state_ttl applies to upsert streams only (a GROUP BY without a window, keyed by its group key)").
			WithPos(o["state_ttl"].Pos).WithHint("windowed streams forget a window's groups when it closes")
	}
	if def.Topic == p.Input.Topic {
		return nil, sql.Errorf(sql.CodeInvalidParameter, "stream %s would write to its own input topic %q", st.Name, def.Topic).WithHint("set topic = '...' to another topic")
	}
	// The internal topic's declared count, read only for the hop the plan
	// has (the other's option is ignored); checked against Kafka when the
	// stream starts.
	switch p.Strategy {
	case streamplan.StrategyRepartition:
		def.Options.RepartitionPartitions, err = o.Count("repartition_partitions")
	case streamplan.StrategyCombine:
		def.Options.CombinePartitions, err = o.Count("combine_partitions")
	}
	if err != nil {
		return nil, err
	}
	return &Stream{Def: def, Plan: p}, nil
}

// OptionError is a WITH option's bad value (*streamplan.OptionError) as
// the SQL error the statement fails with: 22023 at the option, naming the
// values it takes.
func OptionError(o sql.Options, err error) error {
	var oe *streamplan.OptionError
	if !errors.As(err, &oe) {
		return err
	}
	return (&sql.Error{Code: sql.CodeInvalidParameter, Message: fmt.Sprintf("%s %q is not valid", oe.Option, strings.ToLower(oe.Value)), Err: err}).
		WithPos(o[oe.Option].Pos).WithHint("use %s", streamplan.QuotedList(oe.Valid))
}
