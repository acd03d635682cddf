package planner

import (
	"errors"
	"fmt"
	"strings"

	"github.com/turbinesql/turbinesql/agg"
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
