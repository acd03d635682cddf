package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/planner"
)

// Exactly-once commits that Kafka did not take (dataflow.TxnAborted: a
// broker restart, a coordinator moving) leave nothing visible, but the
// failed stage's state in memory is ahead of what committed. Starting the
// stage again from its state recovers it: what the last committed
// transaction is ahead of the state is replayed, producing nothing. The
// restarts back off, and stop after recoverLimit in a row that did not
// last recoverQuiet: the stream then stays failed, with the reason.
const (
	recoverLimit = 8
	recoverQuiet = 2 * time.Minute
)

// recoveries counts, per stream or hop, the restarts in a row.
type recoveries struct {
	mu   sync.Mutex
	runs map[string]*recovery
}

type recovery struct {
	n    int
	last time.Time
}

// next is how long to wait before restart n+1 of name, or false when it
// failed too often in a row to try again.
func (r *recoveries) next(name string, now time.Time) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[string]*recovery{}
	}
	rc := r.runs[name]
	if rc == nil || now.Sub(rc.last) > recoverQuiet {
		rc = &recovery{}
		r.runs[name] = rc
	}
	if rc.n >= recoverLimit {
		return 0, false
	}
	wait := time.Second << min(rc.n, 5) // 1 s, 2 s, ... 32 s
	rc.n++
	rc.last = now.Add(wait)
	return wait, true
}

// recoverStream restarts an exactly-once stream one of whose stages
// failed with a transaction Kafka did not take.
func (s *Server) recoverStream(name string, err error) {
	var aborted *dataflow.TxnAborted
	if !errors.As(err, &aborted) {
		return
	}
	wait, ok := s.recovering.next("stream "+name, time.Now())
	if !ok {
		s.log.Error("exactly-once stream keeps failing to commit; it stays failed (ALTER STREAM ... RESTART once Kafka is healthy)", "stream", name, "err", err)
		return
	}
	s.log.Warn("exactly-once stream failed to commit a transaction (nothing of it is visible); restarting it from its state", "stream", name, "in", wait, "err", err)
	time.Sleep(wait)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.mu.Lock()
	r, ok := s.streams[name]
	current := ok && r.failing()
	s.mu.Unlock()
	if !current {
		return // dropped or restarted meanwhile
	}
	if holder, taken := s.takenOver(ctx, r.def.Name, r.plan, r.started); taken {
		// Starting it again would fence the other server in turn.
		s.log.Error("another server with the same app id runs this exactly-once stream now; this one stays stopped", "stream", name, "other", holder)
		s.mu.Lock()
		if s.streams[name] == r {
			r.err = fmt.Errorf("%w: another server with the same app id (instance %d) committed this stream's input since; this one stopped it", kafkaio.ErrFenced, holder)
		}
		s.mu.Unlock()
		return
	}
	if err := s.restartStream(ctx, name); err != nil && !errors.Is(err, errStreamStopped) {
		s.log.Error("exactly-once stream could not restart", "stream", name, "err", err)
	}
}

// recoverHop restarts an exactly-once repartition hop in place: the
// streams behind it read its topic and go on.
func (s *Server) recoverHop(h *sharedHop, err error) {
	var aborted *dataflow.TxnAborted
	if !errors.As(err, &aborted) {
		return
	}
	wait, ok := s.recovering.next("hop "+h.topic, time.Now())
	if !ok {
		s.log.Error("exactly-once repartition hop keeps failing to commit; it stays failed", "hop", h.topic, "err", err)
		return
	}
	s.log.Warn("exactly-once repartition hop failed to commit a transaction (nothing of it is visible); restarting it from its state", "hop", h.topic, "in", wait, "err", err)
	time.Sleep(wait)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hops[h.topic] != h || h.stage.Err() == nil {
		return // released or restarted meanwhile
	}
	if committed, cerr := s.kafka.StableOffsets(ctx, h.cfg.Group, h.cfg.Topic); cerr == nil {
		if holder, taken := dataflow.TakenOver(committed, s.instance, h.started); taken {
			s.log.Error("another server with the same app id runs this exactly-once repartition hop now; this one stays stopped", "hop", h.topic, "other", holder)
			return
		}
	}
	h.stage.Stop()
	st, serr := s.startStage(ctx, h.cfg)
	if serr != nil {
		// The stopped stage keeps its error: the streams behind it show
		// it.
		s.log.Error("exactly-once repartition hop could not restart", "hop", h.topic, "err", serr)
		return
	}
	h.stage, h.started = st, time.Now()
}

// takenOver reports whether another server committed one of the stream's
// stages' offsets since the stream started here (the final stage's group,
// and a combine's pre-aggregation's).
func (s *Server) takenOver(ctx context.Context, name string, p *planner.Plan, since time.Time) (uint64, bool) {
	groups := map[string]string{s.groupName(name): ""}
	if p != nil && p.Input != nil {
		topic := p.Input.Topic
		if p.Strategy == planner.StrategyCombine {
			cmb := combineTopic(s.cfg.AppID, topic, name)
			groups[cmb], topic = topic, cmb
		} else if p.Strategy == planner.StrategyRepartition {
			def, _ := s.cat.Stream(name)
			topic = s.hopTopic(def, p)
		}
		groups[s.groupName(name)] = topic
	}
	for group, topic := range groups {
		committed, err := s.kafka.StableOffsets(ctx, group, topic)
		if err != nil {
			continue
		}
		if holder, taken := dataflow.TakenOver(committed, s.instance, since); taken {
			return holder, true
		}
	}
	return 0, false
}

// failing reports whether the stream is listed as failed.
func (r *stream) failing() bool {
	st, _ := r.status()
	return st == "failed"
}
