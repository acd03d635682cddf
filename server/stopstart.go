package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/streamplan"
)

// ALTER STREAM s STOP holds a stream stopped on every server of the app,
// across their restarts, until ALTER STREAM s START: the rest of the app
// runs on while the stream's state is rescaled (turbinesql rescale
// --stream s), or while its input is repaired. Both are catalog records
// keyed run/{stream} (catalog.KindRun) that every node follows, as it
// follows CREATE and DROP. The last one stands.
//
// STOP leaves the stream's consumer groups on every node (its tasks
// commit first, as at a clean shutdown) and returns once the groups have
// no members, so the rescale tool can run next. START drops each node's
// local copy of the stream's state before it runs again, so every task
// restores from the changelog: a rescale in between rewrote the
// changelog, not the nodes' disks. A node records the START it started
// the stream under (planRunEpoch); one that was down through a STOP and
// START finds the START newer than its record at boot and drops its
// local copy too.

// errStreamStopped is restartStream's error for a stream held stopped.
var errStreamStopped = errors.New("stream is stopped (ALTER STREAM ... STOP)")

// planRunEpoch names the recorded offset of the last run record (STOP or
// START) a stream started under on this node.
const planRunEpoch = "run_epoch"

// stopWaitTimeout bounds how long STOP waits for the other nodes to
// leave the stream's consumer groups.
const stopWaitTimeout = 30 * time.Second

// runOf is the run state the catalog log gives stream name.
func (s *Server) runOf(name string) (stopped bool, epoch int64) {
	s.catMu.Lock()
	defer s.catMu.Unlock()
	if s.cf.ledger == nil {
		return false, 0
	}
	return s.cf.ledger.Run(name)
}

// alterStreamRun runs ALTER STREAM s STOP or START.
func (s *Server) alterStreamRun(ctx context.Context, st *sql.AlterStream) (*pgwire.Result, error) {
	if _, ok := s.cat.Stream(st.Name); !ok {
		return nil, &catalog.ErrNotFound{Name: st.Name}
	}
	stopped, _ := s.runOf(st.Name)
	res := &pgwire.Result{Tag: "ALTER STREAM"}
	if st.Action == sql.AlterStop {
		if stopped {
			res.Notices = []pgwire.Notice{{Severity: "NOTICE", Message: fmt.Sprintf("stream %s is already stopped", st.Name)}}
			return res, nil
		}
		if old := s.membersWithoutStops(); len(old) > 0 {
			return nil, sql.Errorf(sql.CodeNotInPrereqState, "ALTER STREAM %s STOP needs every server of the app to follow it, and %s run(s) an earlier release that would keep running the stream",
				st.Name, strings.Join(old, ", ")).
				WithHint("finish the rolling upgrade first")
		}
		if _, err := s.writeRun(st.Name, catalog.RunStopped, catalog.OpStop); err != nil {
			return nil, err
		}
		s.holdStopped(st.Name)
		res.Notices = s.awaitGroupsLeft(ctx, st.Name)
		return res, nil
	}
	if !stopped {
		res.Notices = []pgwire.Notice{{Severity: "NOTICE", Message: fmt.Sprintf("stream %s is not stopped", st.Name),
			Hint: "ALTER STREAM ... RESTART restarts a failed stream"}}
		return res, nil
	}
	epoch, err := s.writeRun(st.Name, catalog.RunStarted, catalog.OpStart)
	if err != nil {
		return nil, err
	}
	if err := s.runStopped(ctx, st.Name, epoch); err != nil {
		return nil, sql.Errorf(sql.CodeObjectInUse, "stream %s is started, but cannot run on this server: %v", st.Name, err).
			WithHint("SHOW STREAMS shows its error; once the cause is fixed, ALTER STREAM %s RESTART", st.Name)
	}
	return res, nil
}

// writeRun appends a stream's run record and returns its offset.
func (s *Server) writeRun(name, value string, op catalog.Op) (int64, error) {
	off, err := s.clog.writeTracked(catalog.Change{Kind: catalog.KindRun, Name: name, SQL: value, Op: op})
	if err != nil {
		return 0, fmt.Errorf("write ALTER STREAM %s %s to the catalog: %w", name, strings.ToUpper(string(op)), err)
	}
	return off, nil
}

// membersWithoutStops names the live members whose binary does not follow
// run records.
func (s *Server) membersWithoutStops() []string {
	m := s.members.Load()
	if m == nil {
		return nil
	}
	var out []string
	for _, mem := range m.Members() {
		if !mem.StreamStops {
			out = append(out, mem.Node)
		}
	}
	return out
}

// holdStopped stops the stream's stages on this node and keeps it listed,
// stopped.
func (s *Server) holdStopped(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.streams[name]
	if !ok || r.stopped {
		return
	}
	r.stop(s)
	r.stopped, r.err = true, nil
	s.log.Info("stream held stopped (ALTER STREAM ... STOP)", "stream", name)
}

// runStopped runs a stopped stream again on this node, from its
// changelog (see the top of this file).
func (s *Server) runStopped(ctx context.Context, name string, epoch int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.streams[name]
	if !ok || !r.stopped {
		return nil
	}
	if err := s.adoptRunEpoch(name, epoch); err != nil {
		r.stopped, r.err = false, err
		return err
	}
	nr, err := s.startFromCatalog(ctx, r.def)
	if err != nil {
		r.stopped, r.err = false, err
		return err
	}
	s.streams[name] = nr
	s.log.Info("stream started again (ALTER STREAM ... START)", "stream", name)
	return nil
}

// adoptRunEpoch readies this node's state of a stream for starting under
// the run record at epoch: when it started under another one (or none),
// its local state goes and the tasks restore from the changelog.
func (s *Server) adoptRunEpoch(name string, epoch int64) error {
	if epoch == 0 {
		return nil
	}
	want := strconv.FormatInt(epoch, 10)
	if have, err := s.store.Plan(name, planRunEpoch); err != nil || have == want {
		return err
	}
	s.catMu.Lock()
	e, ok := s.cf.ledger.Get(catalog.KindStream, name)
	s.catMu.Unlock()
	if !ok {
		return &catalog.ErrNotFound{Name: name}
	}
	s.freshStreamState(e)
	s.log.Info("local state of the stream dropped: it restores from its changelog, which may have been rescaled while it was stopped", "stream", name)
	return s.store.PutPlan(name, planRunEpoch, want)
}

// reconcileRun makes the stream's run on this node what the log says
// (another node's STOP or START).
func (s *Server) reconcileRun(ctx context.Context, name string) {
	stopped, epoch := s.runOf(name)
	s.mu.Lock()
	r, ok := s.streams[name]
	held := ok && r.stopped
	s.mu.Unlock()
	switch {
	case !ok || stopped == held:
	case stopped:
		s.holdStopped(name)
	default:
		if err := s.runStopped(ctx, name, epoch); err != nil {
			s.log.Error("stream started by another node cannot run here", "stream", name, "err", err)
		}
	}
}

// awaitGroupsLeft waits until no node is a member of the stream's
// consumer groups any more (each follows the STOP and leaves them), up to
// stopWaitTimeout; a group still held then is named in a warning.
func (s *Server) awaitGroupsLeft(ctx context.Context, name string) []pgwire.Notice {
	s.mu.Lock()
	r := s.streams[name]
	s.mu.Unlock()
	if r == nil || r.plan == nil || r.plan.Input == nil {
		return nil
	}
	groups := map[string]string{s.groupName(name): r.plan.Input.Topic}
	if r.plan.Strategy == streamplan.StrategyCombine {
		groups[combineTopic(s.cfg.AppID, r.plan.Input.Topic, name)] = r.plan.Input.Topic
	}
	deadline := time.Now().Add(stopWaitTimeout)
	var held []string
	for {
		held = held[:0]
		for g, topic := range groups {
			a, err := s.kafka.GroupAssignment(ctx, g, topic)
			if err != nil {
				held = append(held, fmt.Sprintf("%s (%v)", g, err))
				continue
			}
			if len(a.Members) > 0 {
				held = append(held, fmt.Sprintf("%s (members %s)", g, strings.Join(a.Members, ", ")))
			}
		}
		if len(held) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(held) == 0 {
		return nil
	}
	return []pgwire.Notice{{Severity: "WARNING",
		Message: fmt.Sprintf("stream %s is stopped in the catalog, but after %s its consumer groups still have members: %s", name, stopWaitTimeout, strings.Join(held, "; ")),
		Hint:    "a node that cannot read the catalog topic keeps running it; SHOW CLUSTER lists the nodes"}}
}
