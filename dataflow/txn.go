package dataflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
)

// Exactly-once: a task of an ExactlyOnce stage commits in this order:
//
//  1. the operators see the watermark; everything produced since the last
//     commit (outputs, late rows, dead letters, hop records, partials,
//     markers) is in the task's open transaction, and is acknowledged;
//  2. the transaction commits with a progress record and the input offset,
//     sent to the stage's consumer group with the watermark the operators
//     were given as the offset's metadata;
//  3. state, offset and watermark go to Pebble.
//
// A crash between 2 and 3 leaves Kafka ahead of Pebble: the consumer
// group's offset is past the state's. The next start replays the records
// in between into the state, producing nothing (their outputs are
// committed), then gives the operators the recorded watermark, again
// producing nothing: the windows that commit closed are retired, not
// emitted a second time. Only then does the task go on. A crash before 2
// aborts the transaction (the next holder of the transactional id aborts
// it at once), and nothing of it is visible to read_committed readers.

// TxnTimeout is how long the broker keeps a task's transaction open
// without a commit before aborting it. Tasks commit every commit interval
// (a second by default); a task stalled longer than this (a full disk)
// finds its transaction aborted and fails, and its stream needs ALTER
// STREAM ... RESTART.
const TxnTimeout = 60 * time.Second

// planReplay compares what the state recorded (m) with what the last
// committed transaction recorded (c): when the transaction is ahead, the
// task replays up to it before producing anything.
func (t *task) planReplay(m state.PartitionMeta, c kafkaio.Committed, log Logger) {
	read := max(m.Applied, m.Offset) // how far the state has read
	switch {
	case c.Offset > read:
		wm, err := decodeProgress(c.Metadata)
		switch {
		case errors.Is(err, errProgressVersion):
			// A newer release committed last (a rolling upgrade
			// going back): what it says closed is not read.
			log.Error("the consumer group's offset was committed by a newer release; replaying without retiring windows", "partition", t.p, "err", err)
		case err != nil:
			// Offsets committed by something else (a tool resetting the
			// group): nothing says what closed, so nothing is retired.
			log.Warn("the consumer group's offset carries no progress; replaying without retiring windows", "partition", t.p, "err", err)
		}
		t.replayTo, t.replayWM = c.Offset, wm
		log.Info("recovering: the last transaction committed past the state; replaying into the state, producing nothing",
			"partition", t.p, "from", read, "to", c.Offset)
	case c.Offset > 0 && c.Offset < read:
		log.Warn("the consumer group's offset is behind the state's (was the group reset?); going on from the state's",
			"partition", t.p, "group_offset", c.Offset, "state_offset", read)
	}
}

// replaying reports whether the task is still replaying what committed
// transactions already produced.
func (t *task) replaying() bool { return t.replayTo > 0 }

// finishReplay gives the operators the watermark of the last committed
// transaction, discarding what they produce: it retires the windows that
// transaction closed. The state is then what the transaction's commit
// would have written; the next commit writes it.
func (t *task) finishReplay(ctx context.Context) error {
	wm := t.replayWM
	wm.Replay = true
	t.sw.discard = true
	defer func() { t.sw.discard = false }()
	if err := t.giveWatermark(ctx, wm); err != nil {
		return err
	}
	if wm.Has {
		t.part.Restore(wm.WM)
	}
	t.env.Log.Info("recovered: state caught up with the committed output; nothing was produced twice",
		"partition", t.p, "replayed_to", t.replayTo, "records", t.replayed)
	t.replayTo, t.replayed, t.uncommitted = 0, 0, true
	return nil
}

// TxnAborted is an exactly-once commit that Kafka did not take (a broker
// restarting, a coordinator moving, a timeout): the transaction is
// aborted, nothing of it is visible, and the task's state in memory is
// ahead of what committed. Starting the stage again from its state (which
// replays what is needed) recovers; a fenced producer is not this.
type TxnAborted struct{ Err error }

func (e *TxnAborted) Error() string {
	return "transaction not committed (nothing of it is visible): " + e.Err.Error()
}

func (e *TxnAborted) Unwrap() error { return e.Err }

// TaskMigrated is a task whose transactional producer was fenced (an
// exactly-once task's, or an at-least-once task's changelog producer):
// another process opened the partition's transactional id, which a
// process does when the stage's consumer group gives it the partition. In
// an app of several processes that is a rebalance this one took part in
// late (the group went on with its stale view and moved the partition).
// Nothing of the task's open transaction is visible. The stage cannot go
// on with the partition, but the stream is not broken: starting the stage
// again rejoins the group, which decides who runs the partition now (the
// new holder keeps it; if the group gives it back here, this process
// fences the other in turn, as any new owner does). Kafka Streams treats
// this the same way (TaskMigratedException: close the tasks, rejoin).
type TaskMigrated struct {
	Partition int32
	Err       error
}

func (e *TaskMigrated) Error() string {
	return fmt.Sprintf("partition %d was given to another process of the app (this one's producer was fenced; its open transaction is aborted, nothing of it visible): %v", e.Partition, e.Err)
}

func (e *TaskMigrated) Unwrap() error { return e.Err }

// transient marks a failure of the Kafka side of an exactly-once commit
// as curable by a restart, unless the producer was fenced.
func transient(err error) error {
	if err == nil || errors.Is(err, kafkaio.ErrFenced) || errors.Is(err, context.Canceled) {
		return err
	}
	return &TxnAborted{Err: err}
}

// commitTxn ends the task's transaction with its offset and progress.
func (t *task) commitTxn(ctx context.Context, wm Watermark) error {
	id := t.txn.ID()
	prog, _ := json.Marshal(struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
		Watermark int64  `json:"watermark,omitempty"`
	}{t.st.cfg.Topic, t.p, t.part.Next, wm.WM})
	err := t.txn.Commit(ctx, kafkaio.TxnCommit{
		Group: t.st.cfg.Group, Topic: t.st.cfg.Topic, Partition: t.p, Offset: t.part.Next,
		Metadata: encodeProgress(wm, t.st.cfg.Holder),
		Progress: &kafkaio.Record{Topic: t.st.cfg.ProgressTopic, Key: []byte(id), Value: prog},
	})
	if err != nil {
		return fmt.Errorf("transaction %s: %w", id, err)
	}
	return nil
}

// progressVersion prefixes the progress a transaction commits with its
// offset. A later release that changes its meaning writes "turbine2" (and
// so on): this one refuses that as errProgressVersion rather than read
// fields it does not know.
const progressVersion = "turbine1"

// errProgressVersion is a commit's progress written by a newer release.
var errProgressVersion = errors.New("offset metadata written by a newer release")

// encodeProgress is the watermark the operators were given at a commit,
// and the process that committed it, as the metadata of the commit's
// offset.
func encodeProgress(wm Watermark, holder uint64) string {
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	return fmt.Sprintf("%s wm=%d has=%s flush=%s idle=%s now=%d holder=%d", progressVersion, wm.WM, b(wm.Has), b(wm.Flush), b(wm.Idle), wm.Now.UnixMilli(), holder)
}

func decodeProgress(s string) (Watermark, error) {
	wm, _, err := parseProgress(s)
	return wm, err
}

// parseProgress reads a commit's metadata: the watermark and the holder.
func parseProgress(s string) (Watermark, uint64, error) {
	f := strings.Fields(s)
	if len(f) > 0 && f[0] != progressVersion {
		if n, err := strconv.Atoi(strings.TrimPrefix(f[0], "turbine")); err == nil && n > 1 {
			return Watermark{}, 0, fmt.Errorf("%w (%s; this release reads %s)", errProgressVersion, f[0], progressVersion)
		}
	}
	if len(f) == 0 || f[0] != progressVersion {
		return Watermark{}, 0, fmt.Errorf("offset metadata %q is not a turbine progress", s)
	}
	var wm Watermark
	var holder uint64
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if k == "holder" {
			holder, err = strconv.ParseUint(v, 10, 64)
		}
		if err != nil {
			return Watermark{}, 0, fmt.Errorf("offset metadata %q: %s: %w", s, k, err)
		}
		switch k {
		case "wm":
			wm.WM = n
		case "has":
			wm.Has = n == 1
		case "flush":
			wm.Flush = n == 1
		case "idle":
			wm.Idle = n == 1
		case "now":
			wm.Now = time.UnixMilli(n)
		}
	}
	return wm, holder, nil
}

// switchOut is a task's producer as its operators see it: while the task
// replays what committed transactions already produced, it drops
// everything.
type switchOut struct {
	Producer
	discard bool
}

func (s *switchOut) Produce(ctx context.Context, rec *kafkaio.Record) {
	if !s.discard {
		s.Producer.Produce(ctx, rec)
	}
}

func (s *switchOut) ProduceOr(ctx context.Context, rec *kafkaio.Record, tooLarge func(*kafkaio.Record)) {
	if !s.discard {
		s.Producer.ProduceOr(ctx, rec, tooLarge)
	}
}
