package dataflow

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/turbinesql/turbinesql/kafkaio"
)

// Standby replicas (StageConfig.Standbys), as in Kafka Streams: a process
// keeps warm copies of partitions other processes run, applying their
// changelog to its own disk as it is committed. When such a partition
// comes to it (its owner died or left), the task's restore reads only what
// the copy had not applied yet, instead of the whole changelog.
//
// Which process keeps which copy follows from the consumer group's members
// and assignment, with no coordination: partition p's copies are on the
// Standbys members after p's owner, in the order of their ids (never on
// the owner). Every process reads the group the same way, and SHOW TASKS
// derives the same answer (StandbysOf).

// ChangelogFollower reads changelog partitions as they are committed (a
// kafkaio.PartitionFollower).
type ChangelogFollower interface {
	Add(p int32, from int64)
	Remove(p int32)
	Poll(ctx context.Context, wait time.Duration) ([]*kafkaio.Record, map[int32]int64, []*kafkaio.PartitionError, error)
	Close()
}

// StandbysOf is where the copies of partition p live: the n members after
// owner in members (sorted), the owner excluded.
func StandbysOf(members []string, owner string, n int) []string {
	i, found := slices.BinarySearch(members, owner)
	if !found || n <= 0 {
		return nil
	}
	var out []string
	for k := 1; k <= n && k < len(members); k++ {
		out = append(out, members[(i+k)%len(members)])
	}
	return out
}

// standbyEvery is how often a process reads its stage's group to decide
// which copies it keeps.
const standbyEvery = 2 * time.Second

// standbys is a stage's warm copies on this process.
type standbys struct {
	s   *Stage
	mu  sync.Mutex // held while a poll's records are applied
	fol ChangelogFollower
	// warm: the partitions followed, each from the position its copy had.
	warm map[int32]bool
	// local: partitions whose tasks run (or open) here: no copy of them.
	local map[int32]bool
}

// Standbys lists the partitions this process keeps warm copies of.
func (s *Stage) Standbys() []int32 {
	sb := s.standby
	if sb == nil {
		return nil
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return slices.Sorted(maps.Keys(sb.warm))
}

// run keeps the stage's copies until ctx ends.
func (sb *standbys) run(ctx context.Context) {
	defer func() {
		sb.mu.Lock()
		if sb.fol != nil {
			sb.fol.Close()
		}
		sb.warm = map[int32]bool{}
		sb.mu.Unlock()
	}()
	var decided time.Time
	for ctx.Err() == nil {
		if time.Since(decided) >= standbyEvery {
			decided = time.Now()
			if err := sb.decide(ctx); err != nil && ctx.Err() == nil {
				sb.s.log.Debug("standby replicas: cannot read the group", "err", err)
			}
		}
		if sb.follower() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(standbyEvery):
			}
			continue
		}
		if err := sb.pollOnce(ctx); err != nil && ctx.Err() == nil {
			sb.s.log.Warn("standby replicas: reading the changelog", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (sb *standbys) follower() ChangelogFollower {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.fol
}

// decide reads the group and follows the partitions this process keeps
// copies of now, and only those.
func (sb *standbys) decide(ctx context.Context) error {
	s := sb.s
	a, err := s.deps.Kafka.GroupAssignment(ctx, s.cfg.Group, s.cfg.Topic)
	if err != nil {
		return err
	}
	want := map[int32]bool{}
	for p, owner := range a.Owners {
		if owner != s.cfg.Node && slices.Contains(StandbysOf(a.Members, owner, s.cfg.Standbys), s.cfg.Node) {
			want[p] = true
		}
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for p := range sb.warm {
		if !want[p] || sb.local[p] {
			sb.fol.Remove(p)
			delete(sb.warm, p)
		}
	}
	for p := range want {
		if sb.warm[p] || sb.local[p] {
			continue
		}
		from, ok, err := sb.position(p)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		// As a task's restore does: a run this disk's last task of p
		// ingested without its batch goes before the changelog's records
		// could mark it committed.
		if _, err := s.deps.Store.DropUnmarkedRuns(s.cfg.State, p); err != nil {
			return err
		}
		if sb.fol == nil {
			if sb.fol, err = s.deps.Kafka.NewPartitionFollower(s.cfg.Changelog); err != nil {
				return err
			}
		}
		sb.fol.Add(p, from)
		sb.warm[p] = true
		s.log.Info("keeping a standby copy", "partition", p, "changelog", s.cfg.Changelog, "from", from)
	}
	return nil
}

// position is where partition p's copy resumes: its disk's changelog
// position, or the start for a disk with nothing of p. ok is false for
// state the changelog does not describe (written before it existed): the
// task that opens on it decides (restoreChangelog), not a copy.
func (sb *standbys) position(p int32) (int64, bool, error) {
	cfg, st := sb.s.cfg, sb.s.deps.Store
	from, known, err := st.ChangelogPosition(cfg.State, p)
	if err != nil || known {
		return from, known, err
	}
	has, err := st.HasScope(cfg.State, p)
	return 0, !has, err
}

// pollOnce applies what the changelog partitions followed committed since.
func (sb *standbys) pollOnce(ctx context.Context) error {
	recs, next, failed, err := sb.fol.Poll(ctx, 500*time.Millisecond)
	if err != nil {
		return err
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	for _, pe := range failed {
		sb.s.log.Warn("standby copy dropped: its changelog cannot be read from its position", "partition", pe.Partition, "err", pe.Err)
		delete(sb.warm, pe.Partition)
	}
	byPart := map[int32][]*kafkaio.Record{}
	for _, r := range recs {
		byPart[r.Partition] = append(byPart[r.Partition], r)
	}
	restored := sb.s.deps.Metrics.StandbyRecords.WithLabelValues(sb.s.cfg.Name)
	for p, n := range next {
		if !sb.warm[p] {
			continue // taken over by a task here meanwhile (drop)
		}
		r := sb.s.deps.Store.NewRestore(sb.s.cfg.State, p)
		for _, rec := range byPart[p] {
			if err := r.Apply(rec.Key, rec.Value); err != nil {
				r.Close()
				return err
			}
		}
		err := r.Write(n)
		r.Close()
		if err != nil {
			return err
		}
		restored.Add(float64(len(byPart[p])))
	}
	return nil
}

// claim stops keeping a copy of p: its task opens here. Once claim
// returns, nothing more of p is applied by the copy, and no copy of p is
// kept until release.
func (sb *standbys) claim(p int32) {
	if sb == nil {
		return
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.local[p] = true
	if sb.warm[p] {
		sb.fol.Remove(p)
		delete(sb.warm, p)
		sb.s.log.Info("the standby copy becomes the task", "partition", p)
	}
}

// release: p's task no longer runs here (handed over, lost, or it could
// not open); a copy may be kept again.
func (sb *standbys) release(p int32) {
	if sb == nil {
		return
	}
	sb.mu.Lock()
	delete(sb.local, p)
	sb.mu.Unlock()
}
