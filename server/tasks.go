package server

import (
	"context"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/sql"
)

var showTasksCols = []string{"stage", "partition", "node", "on_this_node", "consumer_group", "standby_nodes"}

func showTasksColumns() []pgwire.Column {
	cols := textColumns(showTasksCols...)
	cols[1].OID = pgwire.OIDInt8
	cols[3].OID = pgwire.OIDBool
	return cols
}

// showTasks answers SHOW TASKS stream: a row per stage of the stream and
// partition of the topic it reads, naming the process (node id) its
// consumer group gave the task to, as Kafka's group coordinator says (NULL
// while the group is rebalancing). Stages: a repartition hop in front
// (shared with the streams that read the same hop), a combine's
// pre-aggregation, the stage that writes the output.
func (s *Server) showTasks(ctx context.Context, st *sql.ShowTasks) (*pgwire.Result, error) {
	def, ok := s.cat.Stream(st.Stream)
	if !ok {
		if _, isSource := s.cat.Source(st.Stream); isSource {
			return nil, sql.Errorf("42809", "%q is a source: SHOW TASKS takes a stream", st.Stream)
		}
		return nil, &catalog.ErrNotFound{Name: st.Stream}
	}
	type stage struct {
		label string
		st    *dataflow.Stage
	}
	s.mu.Lock()
	r := s.streams[def.Name]
	var stages []stage
	if r != nil {
		if r.hop != nil && r.hop.stage != nil {
			stages = append(stages, stage{"repartition " + r.hop.topic, r.hop.stage})
		}
		if r.pre != nil {
			stages = append(stages, stage{"pre-aggregation", r.pre})
		}
		if r.final != nil {
			stages = append(stages, stage{"output", r.final})
		}
	}
	s.mu.Unlock()
	if len(stages) == 0 {
		return nil, sql.Errorf("55000", "stream %s is not running on this node", def.Name).WithHint("SHOW STREAMS says why")
	}
	if err := s.needKafka(); err != nil {
		return nil, err
	}
	kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res := &pgwire.Result{Columns: showTasksColumns(), Tag: "SHOW"}
	for _, sg := range stages {
		n, err := s.kafka.Partitions(kctx, sg.st.Topic())
		if err != nil {
			return nil, err
		}
		a, err := s.kafka.GroupAssignment(kctx, sg.st.Group(), sg.st.Topic())
		if err != nil {
			return nil, err
		}
		for p := int32(0); p < int32(n); p++ {
			var node, standbys any
			if o, ok := a.Owners[p]; ok {
				node = o
				// Every process derives the copies' places from the
				// group alike (dataflow.StandbysOf).
				standbys = strings.Join(dataflow.StandbysOf(a.Members, o, s.cfg.StandbyReplicas), ",")
			}
			res.Rows = append(res.Rows, []any{sg.label, int64(p), node, node == any(s.nodeID), sg.st.Group(), standbys})
		}
	}
	return res, nil
}
