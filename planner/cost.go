package planner

import (
	"fmt"

	"github.com/turbinesql/turbinesql/streamplan"
)

// Estimate is what the cost rule compares (the stream graph's: EXPLAIN
// prints it from there).
type Estimate = streamplan.Estimate

// ChooseByCost is the cost rule between the two hops when strategy is auto
// and both apply: combine when its partials are fewer bytes than the rows
// repartition would move. With no rows to sample it picks combine, which
// never ships more records than repartition: at most one partial per key,
// window and source partition, against one record per row.
func ChooseByCost(p *Plan, e *Estimate) {
	if !p.CombineEligible {
		return
	}
	p.Estimate = e
	if e == nil || e.SampleRows == 0 {
		p.Strategy, p.Rule = streamplan.StrategyCombine, "CostModel"
		p.Reason = fmt.Sprintf("no rows in %s to sample: combine ships at most one partial per key, window and partition, never more records than repartition", p.Input.Name)
		return
	}
	if e.CombineBytes < e.RepartitionBytes {
		p.Strategy, p.Rule = streamplan.StrategyCombine, "CostModel"
		p.Reason = fmt.Sprintf("combine would ship %d bytes in %d partials against %d bytes in %d rows for repartition (%.1fx fewer bytes)",
			e.CombineBytes, e.CombineRecords, e.RepartitionBytes, e.RepartitionRecords, float64(e.RepartitionBytes)/float64(max(e.CombineBytes, 1)))
		return
	}
	p.Rule = "CostModel"
	p.Reason = fmt.Sprintf("repartition would move %d bytes in %d rows against %d bytes in %d partials for combine",
		e.RepartitionBytes, e.RepartitionRecords, e.CombineBytes, e.CombineRecords)
}

// UseRecorded applies the strategy the cost rule chose when the stream was
// created (a restart plans the stream again; the data sampled then may
// differ, the state already laid out may not).
//
// A repartition recorded for a plan the LocalPartitionKey rule would run
// where its records are is the MisplacedInput rule's choice: the input
// was misplaced when the stream was created, and its state lives behind
// the hop.
func UseRecorded(p *Plan, strategy streamplan.Strategy) {
	if strategy == streamplan.StrategyRepartition && p.Strategy == streamplan.StrategyLocal && p.PartitionKey >= 0 {
		if rekeyMisplaced(p, "") {
			p.Reason = fmt.Sprintf("repartition by %s, as the MisplacedInput rule chose when the stream was created: the records of %s were not placed by murmur2 on %s",
				p.RepartitionBy, p.Input.Name, p.Input.PartitionKey)
		}
		return
	}
	if !p.CombineEligible {
		return
	}
	if strategy == streamplan.StrategyCombine {
		p.Strategy = streamplan.StrategyCombine
	}
	p.Rule = "CostModel"
	p.Reason = fmt.Sprintf("%s, as the cost rule chose when the stream was created", p.Strategy)
}
