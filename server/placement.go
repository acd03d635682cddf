package server

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
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
// input's partitions as Kafka placed them (planner.Checked).
func checked(p *planner.Plan) bool { return planner.Checked(p) }

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

// ruleMisplacedInput is the planner rule that re-keys the input of a
// would-be local plan whose records are known misplaced.
const ruleMisplacedInput = planner.RuleMisplacedInput

// statusDegraded is the SHOW STREAMS status of a stream that runs but
// whose results are known wrong: a local aggregation over records not
// placed by murmur2 on its partition key.
const statusDegraded = "degraded"

// MisplacedInputError is why a stream is degraded: on Partitions of its
// input topic, its placement check saw records where murmur2 on the
// partition key would not have put them (-1), so one key's rows are on
// several partitions, each of which keeps and emits its own group for it.
type MisplacedInputError struct {
	Stream, Topic, Key string
	Partitions         []int32
}

func (e *MisplacedInputError) Error() string {
	return fmt.Sprintf("input misplaced: partition(s) %s of topic %q hold records that murmur2 on %s would put on another partition (placement -1, SHOW PARTITIONS %s), "+
		"so one key's rows are split across partitions and its groups are emitted in pieces, each with a partial total; "+
		"fix: ALTER STREAM %s SET (strategy = 'repartition') computes the stream again through a repartition hop, "+
		"or have the producer place records with murmur2 (librdkafka clients: partitioner=murmur2_random) and create the stream again",
		partitionList(e.Partitions), e.Topic, e.Key, e.Stream, e.Stream)
}

// Notice is the WARNING that FLUSH and a SELECT reading the stream send.
func (e *MisplacedInputError) Notice() pgwire.Notice {
	return pgwire.Notice{Severity: "WARNING",
		Message: fmt.Sprintf("stream %s is degraded: its input is misplaced, so its results are wrong", e.Stream),
		Detail:  e.Error(),
		Hint:    fmt.Sprintf("ALTER STREAM %s SET (strategy = 'repartition')", e.Stream)}
}

func partitionList(ps []int32) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = strconv.Itoa(int(p))
	}
	return strings.Join(parts, ", ")
}

// misplaced is the stream's MisplacedInputError, nil when it has no
// placement check or its check saw no misplaced record.
func (r *stream) misplaced() *MisplacedInputError {
	if r.board == nil || r.plan == nil {
		return nil
	}
	parts := r.board.Misplaced()
	if len(parts) == 0 {
		return nil
	}
	return &MisplacedInputError{Stream: r.def.Name, Topic: r.plan.Input.Topic, Key: r.plan.Input.PartitionKey, Partitions: parts}
}

// degradedNotices are the WARNINGs for the streams among names (every
// stream when names is nil) whose input is misplaced, by name.
func (s *Server) degradedNotices(names map[string]bool) []pgwire.Notice {
	s.mu.Lock()
	var errs []*MisplacedInputError
	for name, r := range s.streams {
		if names != nil && !names[name] {
			continue
		}
		if e := r.misplaced(); e != nil {
			errs = append(errs, e)
		}
	}
	s.mu.Unlock()
	sort.Slice(errs, func(i, j int) bool { return errs[i].Stream < errs[j].Stream })
	out := make([]pgwire.Notice, len(errs))
	for i, e := range errs {
		out[i] = e.Notice()
	}
	return out
}

// misplacedKey names a topic's placement under a partition key.
func misplacedKey(topic, key string) string { return topic + "\x00" + strings.ToLower(key) }

// knownMisplaced says, per topic and partition key, which streams' checks
// saw the topic's records misplaced: what the planner is told of a new
// statement's input (catalog.Relation.Misplaced).
func (s *Server) knownMisplaced() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	by := map[string][]string{}
	for _, r := range s.streams {
		if e := r.misplaced(); e != nil {
			k := misplacedKey(e.Topic, e.Key)
			by[k] = append(by[k], fmt.Sprintf("stream %s saw it on partition(s) %s", e.Stream, partitionList(e.Partitions)))
		}
	}
	out := map[string]string{}
	for k, v := range by {
		sort.Strings(v)
		out[k] = strings.Join(v, "; ")
	}
	return out
}

// placedResolver resolves the relations of a new statement, marking those
// whose topic is known misplaced under their partition key.
type placedResolver struct {
	cat   *catalog.Catalog
	known map[string]string
}

func (r placedResolver) Relation(name string) (*catalog.Relation, bool) {
	rel, ok := r.cat.Relation(name)
	if ok && rel.PartitionKey != "" {
		rel.Misplaced = r.known[misplacedKey(rel.Topic, rel.PartitionKey)]
	}
	return rel, ok
}

// misplacedNotice is what CREATE STREAM says of an input known misplaced:
// a WARNING for a local plan kept over it (strategy = 'local'), a NOTICE
// when the MisplacedInput rule re-keyed it; nil otherwise.
func misplacedNotice(p *planner.Plan) *pgwire.Notice {
	why := p.Input.Misplaced
	switch {
	case why == "":
		return nil
	case checked(p):
		return &pgwire.Notice{Severity: "WARNING",
			Message: fmt.Sprintf("the records of %s are not placed by murmur2 on %s (%s): this local plan emits each key's groups in pieces, with partial totals", p.Input.Name, p.Input.PartitionKey, why),
			Hint:    "ALTER STREAM ... SET (strategy = 'repartition') re-plans it through a repartition hop"}
	case p.Rule == ruleMisplacedInput:
		return &pgwire.Notice{
			Message: fmt.Sprintf("the records of %s are not placed by murmur2 on %s (%s): planned with a repartition hop by %s instead of a local aggregation", p.Input.Name, p.Input.PartitionKey, why, p.RepartitionBy),
			Hint:    "EXPLAIN CREATE STREAM shows the plan"}
	}
	return nil
}
