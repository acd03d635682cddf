package server

import (
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/streamplan"
	"github.com/turbinesql/turbinesql/types"
)

// lookupFromState answers `WHERE key = constant` over an upsert stream
// this server runs from the stream's own state instead of reading its
// topic: the group's accumulators as last committed, turned into the row
// the stream would write (HAVING applied). ok is false when the query is
// not such a lookup, or the stream does not run here.
func (s *Server) lookupFromState(p *planner.Plan) (recs []*kafkaio.Record, ok bool, err error) {
	rel := p.Input
	if rel.Stream == nil || !rel.Stream.Upsert || len(rel.Stream.PrimaryKey) != 1 || p.Filter == nil {
		return nil, false, nil
	}
	pk := rel.Schema.Index(rel.Stream.PrimaryKey[0])
	lit, ok := keyEquals(p.Filter, pk)
	if !ok {
		return nil, false, nil
	}
	s.mu.Lock()
	r := s.streams[rel.Stream.Name]
	s.mu.Unlock()
	if r == nil || r.final == nil || r.plan == nil || r.plan.Strategy != streamplan.StrategyLocal || len(r.plan.Keys) != 1 || r.plan.PartitionKey != 0 {
		return nil, false, nil
	}
	sp := r.plan
	if lit.V == nil || lit.T != sp.Keys[0].Type() {
		return nil, false, nil
	}
	// The group key as the aggregation encodes it, and its key group.
	key := &exec.Vec{T: lit.T, N: 1}
	switch lit.T {
	case types.Text:
		key.S = []string{lit.V.(string)}
	case types.Int, types.Timestamp:
		key.I = []int64{lit.V.(int64)}
	default:
		return nil, false, nil
	}
	enc := exec.AppendKey(nil, []*exec.Vec{key}, 0)
	text := exec.PartitionKeyText(key, 0, nil)
	kg := state.KeyGroup(text)
	// The group is in the scope of the partition its records arrived on:
	// where murmur2 places the key, unless the producer hashes otherwise.
	val, err := s.store.ScopedGroup(rel.Stream.Name, state.PartitionFor(text, r.spec.nIn), r.spec.nIn, exec.NoWindow, kg, enc)
	if err != nil || val == nil {
		return nil, err == nil, err
	}
	val = dataflow.StoredAccs(val, rel.Stream.Options.StateTTLMs > 0)
	ag, err := planner.NewAggregator(sp, 0)
	if err != nil {
		return nil, false, err
	}
	if err := ag.Restore(exec.StateRef{KG: kg, Key: enc, Window: exec.NoWindow}, val); err != nil {
		return nil, false, err
	}
	b, err := ag.EmitGroups(ag.Table.AllSlots())
	if err != nil {
		return nil, false, err
	}
	if b, err = exec.FilterBatch(b, sp.Having); err != nil || b.N == 0 {
		return nil, err == nil, err
	}
	rows, err := exec.Project(b, sp.Project)
	if err != nil {
		return nil, false, err
	}
	for _, row := range rows {
		recs = append(recs, &kafkaio.Record{Topic: rel.Topic, Value: exec.AppendJSONRow(nil, rel.Schema, row)})
	}
	return recs, true, nil
}

// keyEquals recognises `col = literal` (either way round) on column col.
func keyEquals(e exec.Expr, col int) (*exec.Literal, bool) {
	c, ok := e.(*exec.Compare)
	if !ok || c.Op != "=" {
		return nil, false
	}
	l, r := c.L, c.R
	if _, isLit := l.(*exec.Literal); isLit {
		l, r = r, l
	}
	ref, ok1 := l.(*exec.ColRef)
	lit, ok2 := r.(*exec.Literal)
	if !ok1 || !ok2 || ref.Idx != col {
		return nil, false
	}
	return lit, true
}
