package server

import (
	"context"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/placement"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
)

// This file wires the producer-placement check (package placement,
// dataflow.Placement) into keyed stateful streams, and answers SHOW
// PARTITIONS.

// checked reports whether a plan's stream keeps keyed state over its
// input's partitions as Kafka placed them (a local aggregation whose
// GROUP BY holds the partition key): the streams the placement check, the
// count history and the start-up cleanup are for.
func checked(p *planner.Plan) bool {
	return p.Aggregate && p.PartitionKey >= 0 && p.Strategy == planner.StrategyLocal &&
		p.Input.PartitionKey != "" && p.Input.Schema.Index(p.Input.PartitionKey) >= 0
}

// declared reports whether the stream's source declares partition_hash =
// 'murmur2': the user's word that the start-up cleanup may run.
func declared(p *planner.Plan) bool {
	return p.Input.Source != nil && p.Input.Source.PartitionHash == "murmur2"
}

// transitionWindow is how long producers get to pick up a new count.
func (s *Server) transitionWindow() time.Duration {
	if s.cfg.TransitionWindow > 0 {
		return s.cfg.TransitionWindow
	}
	return placement.DefaultWindow
}

// placementOp is the check of one task of a checked stream.
func (s *Server) placementOp(p *planner.Plan, board *placement.Board) *dataflow.Placement {
	return &dataflow.Placement{
		Col: p.Input.Schema.Index(p.Input.PartitionKey), Topic: p.Input.Topic, Declared: declared(p),
		Window: s.transitionWindow(), Board: board,
		Count: s.kafka.Partitions,
		End: func(ctx context.Context, topic string, part int32) (int64, error) {
			ends, err := s.kafka.EndOffsets(ctx, topic)
			if err != nil {
				return 0, err
			}
			return ends[part], nil
		},
	}
}

var showPartitionsCols = []string{"partition", "placement", "well_placed_keys", "counts", "transition", "owned_key_groups", "lag"}

func showPartitionsColumns() []pgwire.Column {
	cols := textColumns(showPartitionsCols...)
	for _, i := range []int{0, 1, 2, 5, 6} {
		cols[i].OID = pgwire.OIDInt8
	}
	return cols
}

// showPartitions answers SHOW PARTITIONS stream: a row per input
// partition. For a stream the check does not cover (no partition key in
// its GROUP BY, a hop in front), the check's columns are NULL. A stream
// that is not running shows what its state recorded; lag is NULL while
// Kafka is out of reach.
func (s *Server) showPartitions(ctx context.Context, st *sql.ShowPartitions) (*pgwire.Result, error) {
	def, ok := s.cat.Stream(st.Stream)
	if !ok {
		if _, isSource := s.cat.Source(st.Stream); isSource {
			return nil, sql.Errorf("42809", "%q is a source: SHOW PARTITIONS takes a stream", st.Stream).
				WithHint("the check runs per stream: SHOW PARTITIONS <stream>")
		}
		return nil, &catalog.ErrNotFound{Name: st.Stream}
	}
	s.mu.Lock()
	r := s.streams[def.Name]
	var board *placement.Board
	var plan *planner.Plan
	if r != nil {
		board, plan = r.board, r.plan
	}
	s.mu.Unlock()
	topic := ""
	if plan != nil {
		topic = plan.Input.Topic
	} else if rel, ok := s.cat.Relation(def.Input); ok {
		topic = rel.Topic
	}
	var ends map[int32]int64
	n := 0
	if topic != "" && s.kafkaUp() {
		kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if e, err := s.kafka.EndOffsets(kctx, topic); err == nil {
			ends = e
			n = len(e)
		}
		cancel()
	}
	metas, err := s.store.Partitions(def.Name)
	if err != nil {
		return nil, err
	}
	snaps := map[int32]placement.Snapshot{}
	if board != nil {
		for _, sn := range board.All() {
			snaps[sn.Partition] = sn
		}
	}
	n = max(n, len(snaps), len(metas))
	res := &pgwire.Result{Columns: showPartitionsColumns(), Tag: "SHOW"}
	for p := int32(0); p < int32(n); p++ {
		row := []any{int64(p), nil, nil, nil, nil, nil, nil}
		pos := metas[p].Offset
		if sn, ok := snaps[p]; ok {
			row[1], row[2], row[3], row[4], row[5] = int64(sn.Verdict), int64(sn.WellPlaced), sn.Counts, sn.Transition, int64(sn.Owned)
			pos = max(pos, sn.Pos)
		} else if v, err := s.store.TaskValue(def.Name, p, dataflow.PlacementKey); err == nil && v != nil {
			if ps, err := placement.Decode(v); err == nil {
				row[1], row[2], row[3], row[4] = int64(ps.Verdict), int64(ps.WellPlaced()), ps.History(), ps.Transition()
				row[5] = int64(state.OwnedCount(p, ps.Current()))
			}
		}
		if end, ok := ends[p]; ok {
			row[6] = max(end-pos, 0)
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// hashDetail is what DESCRIBE says of a source's partition_hash.
func hashDetail(src *catalog.Source) string {
	if src.PartitionHash == "murmur2" {
		return "partition_hash murmur2"
	}
	return "partition_hash undeclared"
}

// placementLines are what EXPLAIN CREATE STREAM says of the placement
// check and the declaration.
func placementLines(p *planner.Plan) []string {
	if !checked(p) {
		return nil
	}
	line := "Placement: checked on partition key " + p.Input.PartitionKey + " (SHOW PARTITIONS); "
	if declared(p) {
		return []string{line + "partition_hash murmur2 declared: after a partition-count change, the start-up cleanup drops the state of keys that moved"}
	}
	return []string{line + "partition_hash undeclared: after a partition-count change, the state of keys that moved is kept"}
}
