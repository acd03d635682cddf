package planner

import (
	"fmt"
	"strings"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/sql"
)

// StrategyCombine pre-aggregates on each source partition and merges the
// partial accumulators behind an internal topic.
const StrategyCombine = "combine"

// chooseCombine plans a combine hop (strategy = 'combine'): every source
// partition folds its rows into per-(window, key) partial accumulators and
// ships them when its own watermark passes the window's end; a merge stage
// merges them per (window, key) and closes a window once every source
// partition has confirmed it. It applies to one tumbling window over
// mergeable aggregates; anything else is refused naming what stands in
// the way.
func chooseCombine(p *Plan) error {
	if err := combinable(p); err != nil {
		return err
	}
	p.Strategy, p.Rule = StrategyCombine, "StrategyOption"
	p.Reason = fmt.Sprintf("strategy = 'combine' was requested: each partition of %s ships partial [%s] per (window, key)", p.Input.Name, strings.Join(aggTexts(p), ", "))
	return nil
}

// combinable says why the query cannot use a combine hop (nil: it can).
func combinable(p *Plan) error {
	if p.Input.Source == nil {
		return sql.Errorf(sql.CodeNotSupported, "strategy 'combine' reads a source; %s is a stream", p.Input.Name)
	}
	if p.Window == nil {
		return sql.Errorf(sql.CodeNotSupported, "strategy 'combine' needs one tumbling window in GROUP BY").
			WithHint("a GROUP BY without a window can use strategy 'repartition'")
	}
	if p.Window.Kind != "TUMBLE" {
		return sql.Errorf(sql.CodeNotSupported, "strategy 'combine' needs a tumbling window; %s windows are not combinable", p.Window.Kind).
			WithHint("use strategy 'repartition' for HOP and SESSION windows")
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
