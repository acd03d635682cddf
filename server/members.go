package server

import (
	"context"
	"time"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/streamplan"

	"github.com/turbinesql/turbinesql/cluster"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/pgwire"
)

// The app's membership (SHOW CLUSTER) is kept by package cluster through
// the compacted control topic turbine-{app}-control; the server supplies
// the topic and what this process says of itself.

func (s *Server) controlTopic() string {
	return streamplan.TopicName(streamplan.Topic{Kind: streamplan.TopicControl, App: s.cfg.AppID})
}

func (s *Server) sessionTimeout() time.Duration {
	if s.cfg.SessionTimeout > 0 {
		return s.cfg.SessionTimeout
	}
	return DefaultSessionTimeout
}

// controlLog is the control topic through kafkaio.
type controlLog struct {
	k     *kafkaio.Client
	topic string
}

func (c controlLog) Put(ctx context.Context, key string, value []byte) error {
	return c.k.ProduceOne(ctx, &kafkaio.Record{Topic: c.topic, Key: []byte(key), Value: value})
}

// Follow reads the topic from its start. A record already there when the
// read began is dated by its timestamp (its writer's clock: it only tells
// a long-dead member from a recent one); a record read as it arrives is
// dated by this process's clock, so that clock skew between processes
// does not make a live member look dead.
func (c controlLog) Follow(ctx context.Context, fn func(string, []byte, time.Time)) error {
	tail, backlog, err := c.k.NewTail(ctx, c.topic, kafkaio.TailFromStart, nil)
	if err != nil {
		return err
	}
	defer tail.Close()
	for {
		recs, _, err := tail.Poll(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		for _, r := range recs {
			at := now
			if r.Offset < backlog[r.Partition] {
				at = r.Timestamp
			}
			fn(string(r.Key), r.Value, at)
		}
	}
}

// runMembership heartbeats until ctx ends; membersDone closes then.
func (s *Server) runMembership(ctx context.Context, m *cluster.Membership, done chan struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.kafka.EnsureCompacted(cctx, s.controlTopic(), 1)
		cancel()
		if err == nil {
			break
		}
		s.log.Debug("cannot create the control topic yet", "topic", s.controlTopic(), "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	m.Run(ctx)
}

// startMembership starts this process's heartbeats.
func (s *Server) startMembership() error {
	m, err := cluster.New(controlLog{k: s.kafka, topic: s.controlTopic()}, s.selfMember, cluster.Options{
		Timeout: s.sessionTimeout(),
		OnError: func(err error) { s.log.Debug("cluster membership", "err", err) },
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(s.bg)
	done := make(chan struct{})
	s.membersStop, s.membersDone = cancel, done
	s.members.Store(m)
	go s.runMembership(ctx, m, done)
	return nil
}

// stopHeartbeats stops heartbeating without a word: to the others, as if
// the process had died.
func (s *Server) stopHeartbeats() {
	if s.membersStop != nil {
		s.membersStop()
		<-s.membersDone
	}
}

// leaveCluster stops heartbeating and tells the others this process is
// gone.
func (s *Server) leaveCluster() {
	m := s.members.Load()
	if m == nil {
		return
	}
	s.stopHeartbeats()
	s.leaving.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.Leave(ctx); err != nil {
		s.log.Warn("cannot tell the cluster this node leaves; the others drop it after the session timeout", "err", err)
	}
}

// selfMember is what this process's heartbeat says.
func (s *Server) selfMember() cluster.Member {
	m := cluster.Member{Node: s.nodeID, PGAddr: s.PGAddr(), HTTPAddr: s.HTTPAddr(), State: cluster.StateUp, HopSeals: true, StreamStops: true}
	switch {
	case s.leaving.Load():
		m.State = cluster.StateLeaving
	case !s.replayed.Load():
		m.State = cluster.StateStarting
	}
	s.mu.Lock()
	count := func(st *dataflow.Stage) {
		if st != nil {
			m.TasksOwned += st.Partitions()
			m.TasksStandby += len(st.Standbys())
		}
	}
	for _, r := range s.streams {
		count(r.pre)
		count(r.final)
	}
	for _, h := range s.hops {
		count(h.stage)
	}
	s.mu.Unlock()
	return m
}

var showClusterCols = []string{"node_id", "pg_addr", "http_addr", "tasks_owned", "tasks_standby", "state"}

func showClusterColumns() []pgwire.Column {
	cols := textColumns(showClusterCols...)
	cols[3].OID, cols[4].OID = pgwire.OIDInt8, pgwire.OIDInt8
	return cols
}

// showCluster is SHOW CLUSTER: a row per live member of the app.
func (s *Server) showCluster() *pgwire.Result {
	res := &pgwire.Result{Columns: showClusterColumns(), Tag: "SHOW"}
	m := s.members.Load()
	if m == nil {
		return res
	}
	for _, m := range m.Members() {
		res.Rows = append(res.Rows, []any{m.Node, m.PGAddr, nullIfEmpty(m.HTTPAddr), int64(m.TasksOwned), int64(m.TasksStandby), m.State})
	}
	return res
}
