package planner

import (
	"fmt"
	"strings"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/streamplan"
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
func chooseRepartition(p *Plan, requested streamplan.Strategy, pk string) error {
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
		p.Strategy, p.Rule = streamplan.StrategyRepartition, "RepartitionByKey"
		why := fmt.Sprintf("%s has no partition_key", p.Input.Name)
		if pk != "" {
			why = fmt.Sprintf("%s is partitioned by %s", p.Input.Name, pk)
		}
		p.Reason = fmt.Sprintf("GROUP BY does not contain the partition key (%s): records are re-keyed by %s through an internal topic", why, c.Name)
		if requested == streamplan.StrategyRepartition {
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

// rekeyMisplaced plans a repartition hop for a query that the
// LocalPartitionKey rule would run where its records are (strategy auto).
//
// Rule MisplacedInput: the GROUP BY contains the input's partition key,
// but the input's records are known not to sit where murmur2 on that key
// puts them (a stream's placement check saw -1: the producer hashes keys
// another way, e.g. librdkafka's default CRC32), so one key's rows are on
// several partitions and a local plan would emit each of its groups in
// pieces, one per partition. The records are re-keyed by the partition
// key through an internal topic, where murmur2 places them.
//
//	SELECT k, COUNT(*) FROM src GROUP BY k, TUMBLE(ts, ...)   -- src keyed by k, placed by CRC32
//	=> repartition by k, then aggregate
//
// It reports false, leaving p as it was, when nothing can be re-keyed (a
// stream's output, or no GROUP BY key of a type the hop keys by): the
// local plan then stands and the caller warns.
// why says how the misplacement is known, for the reason EXPLAIN prints.
func rekeyMisplaced(p *Plan, why string) bool {
	if p.Input.Source == nil {
		return false
	}
	pk := p.Input.PartitionKey
	order := []int{p.PartitionKey} // the partition key first, then the other keys
	for i := range p.Keys {
		if i != p.PartitionKey {
			order = append(order, i)
		}
	}
	for _, i := range order {
		c, ok := p.Keys[i].(*exec.ColRef)
		if !ok || (c.T != types.Text && c.T != types.Int) {
			continue
		}
		p.PartitionKey = i
		p.RepartitionBy = c.Name
		p.Strategy, p.Rule = streamplan.StrategyRepartition, "MisplacedInput"
		p.Reason = fmt.Sprintf("GROUP BY contains %s, the partition key of %s, but its records are not placed by murmur2 on it (%s): a local plan would count a key's rows in pieces, one per partition, so records are re-keyed by %s through an internal topic",
			pk, p.Input.Name, why, c.Name)
		return true
	}
	return false
}
