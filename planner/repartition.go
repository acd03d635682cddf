package planner

import (
	"fmt"
	"strings"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// chooseRepartition plans a repartition hop: the GROUP BY does not contain
// the input's partition key, so every record is re-emitted onto an
// internal topic keyed by a GROUP BY column, and the aggregation reads that
// topic, where every group lives on one partition.
//
// Rule RepartitionByKey: the first GROUP BY key that is a plain TEXT or
// BIGINT input column is the column to re-key by (the seed's repartition_by
// is one column; several would need a composite key).
//
// Only a source can be re-keyed today (a stream's output has no on_error
// policy of its own to apply at the hop).
func chooseRepartition(p *Plan, requested, pk string) error {
	if p.Input.Source == nil {
		return sql.Errorf(sql.CodeNotSupported, "GROUP BY must include the partition key of stream %s: only a source can be repartitioned", p.Input.Name).
			WithHint("key the upstream stream's output by the grouping column (message_key)")
	}
	for i, k := range p.Keys {
		c, ok := k.(*exec.ColRef)
		if !ok || (c.T != types.Text && c.T != types.Int) {
			continue
		}
		p.PartitionKey = i
		p.RepartitionBy = c.Name
		p.Strategy, p.Rule = StrategyRepartition, "RepartitionByKey"
		why := fmt.Sprintf("%s has no partition_key", p.Input.Name)
		if pk != "" {
			why = fmt.Sprintf("%s is partitioned by %s", p.Input.Name, pk)
		}
		p.Reason = fmt.Sprintf("GROUP BY does not contain the partition key (%s): records are re-keyed by %s through an internal topic", why, c.Name)
		if requested == StrategyRepartition {
			p.Rule = "StrategyOption"
			p.Reason = fmt.Sprintf("strategy = 'repartition' was requested: records are re-keyed by %s through an internal topic", c.Name)
		}
		return nil
	}
	var names []string
	for _, n := range p.KeyNames {
		names = append(names, n)
	}
	return sql.Errorf(sql.CodeNotSupported, "cannot repartition %s: no GROUP BY key (%s) is a TEXT or BIGINT column of it", p.Input.Name, strings.Join(names, ", ")).
		WithHint("GROUP BY a column of the source (with or without a window)")
}
