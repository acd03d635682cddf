package dataflow

import (
	"context"
	"fmt"
	"time"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
)

// The changelog: every commit of a task writes the changes of its state
// batch to partition p of the stage's changelog topic, in the same
// transaction as its input offset (and, exactly-once, its outputs). A task
// opening on a disk whose state is behind the changelog (a new process, a
// lost disk, a partition coming back after another process ran it) first
// applies what it misses, so the state follows its partition between
// processes. The disk records how far it has applied the changelog with
// each commit.

// restoreEvery is how much a restore applies before writing it (with its
// position), so an interrupted restore resumes rather than restarts.
const restoreEvery = 4 << 20

// restoreChangelog brings partition p's state on this disk up to end, the
// changelog's end.
func (t *task) restoreChangelog(ctx context.Context, end int64) error {
	cfg, st := t.st.cfg, t.st.deps.Store
	// A run a crash left between its ingest and its commit's batch goes
	// first: that commit's records may be in the changelog, and would
	// mark the run committed (state's DropUnmarkedRuns).
	if n, err := st.DropUnmarkedRuns(cfg.State, t.p); err != nil {
		return err
	} else if n > 0 {
		t.st.log.Info("dropped runs of a commit that never landed", "partition", t.p, "runs", n)
	}
	from, known, err := st.ChangelogPosition(cfg.State, t.p)
	if err != nil {
		return err
	}
	has, err := st.HasScope(cfg.State, t.p)
	if err != nil {
		return err
	}
	switch {
	case !known && has && end == 0:
		// State written before this stage had a changelog: it is the
		// truth, and the first commit logs all of it.
		t.bootstrap = true
		t.st.log.Info("changelog empty and the state on this disk predates it: the first commit writes the whole state to the changelog", "partition", t.p, "changelog", cfg.Changelog)
		return nil
	case known && from > end:
		// The changelog topic was deleted and created again: this disk
		// holds more than it, so it is written again from here.
		t.bootstrap = true
		t.st.log.Warn("the changelog is shorter than what this disk applied (was the topic recreated?); the first commit writes the whole state to it", "partition", t.p, "changelog", cfg.Changelog, "applied", from, "end", end)
		return nil
	case !known && has:
		// State of unknown age next to a changelog: the changelog wins.
		t.st.log.Warn("the state on this disk has no changelog position; rebuilding it from the changelog", "partition", t.p, "changelog", cfg.Changelog)
		if err := st.DropScope(cfg.State, t.p); err != nil {
			return err
		}
		from = 0
	case !known:
		from = 0
	}
	if from >= end-1 {
		// Nothing, or only the marker that ended the last transaction
		// this disk wrote itself (another owner's commit adds a record
		// and a marker at least): current.
		return nil
	}
	start := time.Now()
	restored := t.st.deps.Metrics.RestoredRecords.WithLabelValues(cfg.Name)
	left := t.st.deps.Metrics.RestoreRemaining.WithLabelValues(cfg.Name, fmt.Sprint(t.p))
	defer left.Set(0)
	if end-from > 1 {
		t.st.log.Info("restoring state from the changelog", "partition", t.p, "changelog", cfg.Changelog, "from", from, "to", end, "records", end-from)
	}
	r := st.NewRestore(cfg.State, t.p)
	defer r.Close()
	n, lastLog := 0, time.Now()
	next, err := t.st.deps.Kafka.ReadPartition(ctx, cfg.Changelog, t.p, from, func(rec *kafkaio.Record) error {
		if err := r.Apply(rec.Key, rec.Value); err != nil {
			return fmt.Errorf("changelog %s/%d offset %d: %w", cfg.Changelog, t.p, rec.Offset, err)
		}
		n++
		restored.Inc()
		left.Set(float64(end - rec.Offset - 1))
		if r.Pending() >= restoreEvery {
			if err := r.Write(rec.Offset + 1); err != nil {
				return err
			}
		}
		if time.Since(lastLog) >= 5*time.Second {
			lastLog = time.Now()
			t.st.log.Info("restoring state from the changelog", "partition", t.p, "records", n, "left", end-rec.Offset-1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := r.Write(next); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	if n == 0 {
		return nil
	}
	t.st.log.Info("state restored from the changelog", "partition", t.p, "records", n, "seconds", fmt.Sprintf("%.2f", secs),
		"records_per_second", fmt.Sprintf("%.0f", float64(n)/max(secs, 1e-3)))
	return nil
}

// logChanges writes the commit's state changes to the changelog (with,
// first, what the operators changed at open, or the whole state when the
// changelog starts from this disk), and returns the last record written.
func (t *task) logChanges(ctx context.Context, b *state.Batch) (*kafkaio.Record, error) {
	topic := t.st.cfg.Changelog
	var last *kafkaio.Record
	a := changeArena{now: time.Now()}
	put := func(k, v []byte) error {
		rec := a.record(topic, t.p, k, v)
		t.clog.Produce(ctx, rec)
		last = rec
		return nil
	}
	if t.bootstrap {
		if err := t.st.deps.Store.EachScopeKey(t.st.cfg.State, t.p, put); err != nil {
			return nil, err
		}
	}
	for _, c := range t.opened {
		if err := put(c.Key, c.Value); err != nil {
			return nil, err
		}
	}
	if err := b.EachChange(put); err != nil {
		return nil, err
	}
	return last, nil
}

// changeArena makes a commit's changelog records in blocks: records, and
// their keys and values in shared buffers, all stamped with one time.
// Made one by one, a record cost three allocations and a clock read: at
// 10^7 keys, where a commit logs a partial for nearly every row it read,
// a tenth of the engine's CPU. A block is never reused (the producer holds
// its records until they are acknowledged); it goes when they all have.
type changeArena struct {
	now  time.Time
	recs []kafkaio.Record
	buf  []byte
}

// changeBlock is the size of a block of bytes (a larger record takes a
// block of its own), and changeRecs the records of a block of records.
const (
	changeBlock = 64 << 10
	changeRecs  = 256
)

// record is the changelog record of store key k set to v (nil: deleted).
func (a *changeArena) record(topic string, p int32, k, v []byte) *kafkaio.Record {
	if len(a.recs) == 0 {
		a.recs = make([]kafkaio.Record, changeRecs)
	}
	rec := &a.recs[0]
	a.recs = a.recs[1:]
	n := len(k)
	if v != nil {
		n += state.ChangeLen(v)
	}
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]byte, 0, max(changeBlock, n))
	}
	start := len(a.buf)
	a.buf = append(a.buf, k...)
	*rec = kafkaio.Record{Topic: topic, Partition: p, Timestamp: a.now, Key: a.buf[start:len(a.buf):len(a.buf)]}
	if v != nil {
		start = len(a.buf)
		a.buf = state.AppendChange(a.buf, v)
		rec.Value = a.buf[start:len(a.buf):len(a.buf)]
	}
	return rec
}
