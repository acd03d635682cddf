package dataflow

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// A task whose disk is far behind its changelog restores in the
// background, as Kafka Streams restores outside its rebalance callbacks:
// the assignment returns at once with the partition held (not fetched),
// so a long restore never keeps the consumer group waiting (a rebalance
// meanwhile is not stalled by it, and the process answers its group in
// time). When the restore is done, the poll loop, between two polls,
// starts the task and releases the partition at the restored state's
// offset. A task with little to restore still opens inside the
// assignment, which is simpler and as fast.

// backgroundRestore is the changelog backlog (records) from which a task
// restores in the background.
const backgroundRestore = 20_000

// restoredCheck is how often the poll loop looks for tasks done restoring
// while some restore.
const restoredCheck = 200 * time.Millisecond

// restoringTask is a task restoring in the background.
type restoringTask struct {
	t      *task
	cancel context.CancelFunc
	done   chan struct{} // closed when the restore ended
	err    error         // set before done closes
}

// restoreInBackground starts t's restore in the background when its
// backlog is long, and reports whether it did.
func (s *Stage) restoreInBackground(t *task, pos positions) bool {
	from, known, err := s.deps.Store.ChangelogPosition(s.cfg.State, t.p)
	if err != nil || !known {
		// No position: the state is empty, or predates the changelog
		// (restoreChangelog decides; cheap either way unless the
		// changelog is long).
		from = 0
	}
	if err != nil || pos.changelog[t.p]-from <= backgroundRestore {
		return false
	}
	ctx, cancel := context.WithCancel(s.runCtx)
	rt := &restoringTask{t: t, cancel: cancel, done: make(chan struct{})}
	s.tmu.Lock()
	s.restoring[t.p] = rt
	s.tmu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		rt.err = s.openTask(ctx, t, pos)
		close(rt.done)
		s.wakePoll()
	}()
	return true
}

func (s *Stage) isRestoring(p int32) bool {
	s.tmu.RLock()
	defer s.tmu.RUnlock()
	return s.restoring[p] != nil
}

func (s *Stage) restoringCount() int {
	s.tmu.RLock()
	defer s.tmu.RUnlock()
	return len(s.restoring)
}

// Restoring lists the partitions whose tasks restore here in the
// background (a FLUSH waits for them).
func (s *Stage) Restoring() []int32 {
	s.tmu.RLock()
	defer s.tmu.RUnlock()
	return slices.Sorted(maps.Keys(s.restoring))
}

// startRestored starts the tasks done restoring and releases their
// partitions; a restore that failed fails the stage. Called by the poll
// loop between polls.
func (s *Stage) startRestored() {
	var ready []*restoringTask
	s.tmu.Lock()
	for p, rt := range s.restoring {
		select {
		case <-rt.done:
			delete(s.restoring, p)
			if rt.err == nil {
				s.tasks[p] = rt.t
			}
			ready = append(ready, rt)
		default:
		}
	}
	s.tmu.Unlock()
	for _, rt := range ready {
		t := rt.t
		if rt.err != nil {
			t.closeProducers()
			s.standby.release(t.p)
			if s.runCtx.Err() == nil {
				s.openFailed(fmt.Errorf("start %s partition %d: %w", s.cfg.Name, t.p, rt.err))
			}
			continue
		}
		s.runTask(t)
		s.cons.Release(t.p, t.part.Next)
		s.log.Info("partition restored and running", "group", s.cfg.Group, "partition", t.p, "offset", t.part.Next)
	}
}

// cancelRestores stops the background restores of partitions taken away;
// what they applied stays on disk, with its position.
func (s *Stage) cancelRestores(parts []int32) {
	var stopping []*restoringTask
	s.tmu.Lock()
	for _, p := range parts {
		if rt := s.restoring[p]; rt != nil {
			delete(s.restoring, p)
			stopping = append(stopping, rt)
		}
	}
	s.tmu.Unlock()
	for _, rt := range stopping {
		rt.cancel()
		<-rt.done
		if rt.err == nil {
			rt.t.close() // it had opened: its operators too
		} else {
			rt.t.closeProducers()
		}
		s.standby.release(rt.t.p)
	}
}

// dropRestored closes what background restores left when the stage
// stopped (every restore has ended by then).
func (s *Stage) dropRestored() {
	s.tmu.Lock()
	left := s.restoring
	s.restoring = map[int32]*restoringTask{}
	s.tmu.Unlock()
	for _, rt := range left {
		<-rt.done
		if rt.err == nil {
			rt.t.close()
		} else {
			rt.t.closeProducers()
		}
	}
}

func (s *Stage) setPollWake(cancel context.CancelFunc) {
	s.wakeMu.Lock()
	s.wake = cancel
	s.wakeMu.Unlock()
}

// wakePoll ends the poll under way, so the poll loop starts restored tasks.
func (s *Stage) wakePoll() {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	if s.wake != nil {
		s.wake()
	}
}
