package planner

import (
	"errors"
	"fmt"
	"strings"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/streamplan"
)

// chooseCombine plans a combine hop (strategy = 'combine'): every source
// partition folds its rows into per-(window, key) partial accumulators and
// ships them when its own watermark passes the window's end; a merge stage
// merges them per (window, key) and closes a window once every source
// partition has confirmed it. It applies to one tumbling window over
// mergeable aggregates (HOP windows ship slices); anything else is refused naming what stands in
// the way.
func chooseCombine(p *Plan) error {
	if err := combinable(p); err != nil {
		return err
	}
	p.Strategy, p.Rule = streamplan.StrategyCombine, "StrategyOption"
	p.Reason = fmt.Sprintf("strategy = 'combine' was requested: each partition of %s ships partial [%s] per (window, key)", p.Input.Name, strings.Join(aggTexts(p), ", "))
	return nil
}

// combinable says why the query cannot use a combine hop (nil: it can).
func combinable(p *Plan) error {
	if p.Input.Source == nil {
		return sql.Errorf(sql.CodeNotSupported, "strategy 'combine' reads a source; %s is a stream", p.Input.Name)
	}
	if p.Window == nil {
		return sql.Errorf(sql.CodeNotSupported, "strategy 'combine' needs one TUMBLE or HOP window in GROUP BY").
			WithHint("a GROUP BY without a window can use strategy 'repartition'")
	}
	if k := p.Window.Kind(); k != streamplan.Tumble && k != streamplan.Hop {
		return sql.Errorf(sql.CodeNotSupported, "strategy 'combine' needs a TUMBLE or HOP window; %s windows are not combinable", k).
			WithHint("use strategy 'repartition' for SESSION windows")
	}
	for _, c := range p.Aggs {
		if info, ok := agg.Lookup(c.Spec.Name); !ok || !info.Mergeable {
			return sql.Errorf(sql.CodeNotSupported, "strategy 'combine' needs mergeable aggregates; %s is not", c.Text)
		}
	}
	return nil
}

func aggTexts(p *Plan) []string {
	out := make([]string, len(p.Aggs))
	for i, c := range p.Aggs {
		out[i] = c.Text
	}
	return out
}

// chooseKeylessCombine plans a windowed aggregation without a GROUP BY key
// (every record of a window is one group, on every source partition).
//
// Rule KeylessCombine: nothing can be re-keyed, so every source partition
// pre-aggregates its window and one merge partition closes the window once
// every source partition has passed it.
//
//	SELECT TUMBLE_START(ts, INTERVAL '1' MINUTE), COUNT(*) FROM src GROUP BY TUMBLE(ts, INTERVAL '1' MINUTE)
//	=> each partition of src ships one partial per window; one merge partition
func chooseKeylessCombine(p *Plan, requested streamplan.Strategy) error {
	switch requested {
	case streamplan.StrategyAuto, streamplan.StrategyCombine:
	case streamplan.StrategyLocal:
		return sql.Errorf(sql.CodeNotSupported, "strategy 'local' needs a GROUP BY key: without one, a window's rows span every partition of %s", p.Input.Name).
			WithHint("drop the strategy option: a keyless window is planned as a combine")
	default:
		return UnknownStrategy(requested.String())
	}
	if p.Window == nil {
		return sql.Errorf(sql.CodeNotSupported, "a continuous aggregation needs a GROUP BY: a window such as TUMBLE(ts, INTERVAL '1' MINUTE), keys, or both")
	}
	if err := combinable(p); err != nil {
		var e *sql.Error
		if errors.As(err, &e) {
			// The combine's own hint (use repartition) cannot apply: there
			// is no key to re-key by.
			hint := "add a GROUP BY key"
			if p.Window.Kind() == streamplan.Session {
				hint = "a SESSION window needs a GROUP BY key (sessions of one key)"
			}
			return &sql.Error{Code: e.Code, Message: "a window without a GROUP BY key is planned as a combine: " + e.Message, HintMsg: hint, Err: err}
		}
		return err
	}
	p.Strategy, p.Rule = streamplan.StrategyCombine, "KeylessCombine"
	unit := "window"
	if p.Window.Kind() == streamplan.Hop {
		unit = "slice"
	}
	p.Reason = fmt.Sprintf("no GROUP BY key: each partition of %s ships partial [%s] per %s to one merge partition", p.Input.Name, strings.Join(aggTexts(p), ", "), unit)
	return nil
}

// lateOption names the option (allowed_lateness, else late_data_topic)
// by which a stream keeps rows later than its watermark; "": neither is
// set.
func lateOption(o catalog.StreamOptions) string {
	switch {
	case o.AllowedLatenessMs > 0:
		return "allowed_lateness"
	case o.LateDataTopic != "":
		return "late_data_topic"
	}
	return ""
}

// noLateCombine keeps a stream that takes allowed_lateness or
// late_data_topic (opt names the one set) off a combine hop, which serves
// neither: each source partition ships a window's partials once its own
// watermark passes the window's end and forgets the window, so no row
// later than that reaches the pane, and a row late there is dropped where
// it was read, with no late_data_topic to go to.
//
// Under strategy auto the cost rule is not consulted (CombineEligible is
// cleared): the repartition hop chosen so far serves the options, as the
// hash aggregation behind it keeps windows open and routes late rows. A
// combine the user asked for, or the only plan there is (KeylessCombine),
// is refused.
func noLateCombine(p *Plan, opt string, o sql.Options) error {
	if p.CombineEligible {
		p.CombineEligible = false
		p.Reason += fmt.Sprintf("; not a combine hop, which serves no %s (its partitions ship and forget a window once their watermark passes its end)", opt)
		return nil
	}
	if p.Strategy != streamplan.StrategyCombine {
		return nil
	}
	if p.Rule == RuleKeylessCombine {
		return sql.Errorf(sql.CodeNotSupported, "%s is not supported on a window without a GROUP BY key: it is planned as a combine hop (rule KeylessCombine), whose partitions ship and forget a window once their watermark passes its end", opt).
			WithPos(o[opt].Pos).
			WithHint("drop allowed_lateness and late_data_topic (a longer WATERMARK delay on %s holds its windows open longer), or GROUP BY a column of %s as well: a repartition hop serves %s", p.Input.Name, p.Input.Name, opt)
	}
	return sql.Errorf(sql.CodeNotSupported, "strategy 'combine' does not take %s: its partitions ship and forget a window once their watermark passes its end", opt).
		WithPos(o[opt].Pos).WithHint("use strategy 'repartition' or 'auto', which keep the window open behind a repartition hop")
}
