package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/turbinesql/turbinesql/dataflow"
)

// Exactly-once commits that Kafka did not take (dataflow.TxnAborted: a
// broker restart, a coordinator moving) leave nothing visible, but the
// failed stage's state in memory is ahead of what committed. Starting the
// stage again from its state recovers it: what the last committed
// transaction is ahead of the state is replayed, producing nothing. A
// stage fenced because its group moved a partition elsewhere
// (dataflow.TaskMigrated) starts again the same way and rejoins the group.
// The restarts back off, and stop after recoverLimit in a row that did not
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

// restartable reports whether a failed stage recovers by starting again,
// and what to call the failure in the log: a commit Kafka did not take,
// or a partition the group moved to another process.
func restartable(err error) (string, bool) {
	var aborted *dataflow.TxnAborted
	var migrated *dataflow.TaskMigrated
	switch {
	case errors.As(err, &migrated):
		return "was fenced: the group gave a partition to another process (nothing of its open transaction is visible); rejoining the group", true
	case errors.As(err, &aborted):
		return "failed to commit a transaction (nothing of it is visible); restarting it from its state (exactly-once)", true
	}
	return "", false
}

// backOff decides whether a failed stream or repartition hop (kind
// "stream" or "hop", named id) starts again after err, and waits before
// it does: false when err is not one a restart cures, or when it failed
// too often in a row (then it stays failed). It logs either way.
func (s *Server) backOff(kind, id string, err error) bool {
	what, ok := restartable(err)
	if !ok {
		return false
	}
	wait, ok := s.recovering.next(kind+" "+id, time.Now())
	if !ok {
		msg := kind + " keeps failing to commit; it stays failed"
		if kind == "stream" {
			msg += " (ALTER STREAM ... RESTART once Kafka is healthy)"
		}
		s.log.Error(msg, kind, id, "err", err)
		return false
	}
	s.log.Warn(kind+" "+what, kind, id, "in", wait, "err", err)
	time.Sleep(wait)
	return true
}

// recoverStream restarts a stream one of whose stages failed with a
// transaction Kafka did not take (exactly-once), or was fenced (either
// guarantee). Starting it again joins its consumer groups anew: the
// groups decide what runs here, so a restart never takes a partition
// from a process the group gave it to.
func (s *Server) recoverStream(name string, err error) {
	if !s.backOff("stream", name, err) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.mu.Lock()
	r, ok := s.streams[name]
	current := ok && r.failing()
	s.mu.Unlock()
	if !current {
		return // dropped or restarted meanwhile
	}
	if err := s.restartStream(ctx, name); err != nil && !errors.Is(err, errStreamStopped) {
		s.log.Error("stream could not restart", "stream", name, "err", err)
	}
}

// recoverHop restarts a repartition hop in place (after a failure
// restartable names): the streams behind it read its topic and go on.
//
// A hop whose first start failed has nothing to restart in place: it was
// never kept (hopFor), and its failure failed the start of the stream
// that asked for it, before that stream's own stages started. That
// stream restarts instead, on the path (and back-off) its own stages'
// failures take, and its start starts the hop again. Without this it
// stayed failed for good: none of its stages ran to fail again.
func (s *Server) recoverHop(h *sharedHop, err error) {
	// The stage fails (and calls this) while hopFor may still be waiting
	// for its first assignment, under s.mu: once s.mu is free, h.stage
	// says whether that start returned it.
	s.mu.Lock()
	started := h.stage != nil
	s.mu.Unlock()
	if !started {
		s.recoverStream(h.starter, err)
		return
	}
	if !s.backOff("hop", h.topic, err) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hops[h.topic] != h || h.stage.Err() == nil {
		return // released or restarted meanwhile
	}
	h.stage.Stop()
	st, serr := s.startStage(ctx, h.cfg)
	if serr != nil {
		// The stopped stage keeps its error: the streams behind it show
		// it.
		s.log.Error("repartition hop could not restart", "hop", h.topic, "err", serr)
		return
	}
	h.stage = st
}

// failing reports whether the stream is listed as failed.
func (r *stream) failing() bool {
	st, _ := r.status()
	return st == "failed"
}
