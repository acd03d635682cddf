package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrFenced is returned by a transactional producer that another one with
// the same transactional id has replaced: a newer process (or a restart of
// this one) owns the task now, and this one must stop writing.
var ErrFenced = errors.New("fenced by a newer producer with the same transactional id")

// ErrUnstable is StableOffsets giving up (its ctx done) while an open
// transaction still commits one of the offsets asked for.
var ErrUnstable = errors.New("an open transaction commits the offset")

// TxnProducer is one task's transactional producer (exactly-once). Every
// record the task produces between two commits rides one Kafka
// transaction, which Commit ends together with the task's input offset,
// committed to the stage's consumer group inside the same transaction.
//
// Why one producer per task, with a transactional id naming the task
// (app, stage, partition), rather than one per process fenced by group
// generation (KIP-447): a task is the unit that commits, and the unit
// that moves between processes. Whoever runs the task next opens the same
// id, which bumps its epoch: the previous holder (crashed, or a zombie
// still running) is fenced at once, and its open transaction is aborted
// before the new holder reads the committed offsets. That holds whatever
// assigned the partition, with no dependency on the group's generation.
type TxnProducer struct {
	cl  *kgo.Client
	adm *Client // for topic ids
	id  string
	p   *Pending

	// inTxn: a transaction is open. Guarded by mu: a record refused as too
	// large is replaced from a producer callback's goroutine.
	mu    sync.Mutex
	inTxn bool
	ids   map[string][16]byte // topic ids, for TxnOffsetCommit v6+
	idsMu sync.Mutex
}

// TxnCommit is what a transaction commits besides the records produced:
// the input offset of one partition, for a consumer group, with metadata
// (the task's progress), and a progress record. Group empty: no offset. The progress record makes
// every transaction write at least one record: franz-go ends only a
// transaction it saw a record of, and a commit that produced nothing
// still has an offset to commit.
type TxnCommit struct {
	Group     string
	Topic     string
	Partition int32
	Offset    int64
	Metadata  string
	Progress  *Record
}

// NewTxnProducer opens the transactional producer id, fencing every
// earlier holder of id now: their open transaction is aborted, and their
// next commit fails.
func (k *Client) NewTxnProducer(ctx context.Context, id string, timeout time.Duration) (*TxnProducer, error) {
	cl, err := kgo.NewClient(k.conn.Opts(
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(MaxRecordBytes),
		kgo.MetadataMinAge(250*time.Millisecond),
		kgo.TransactionalID(id),
		kgo.TransactionTimeout(timeout),
	)...)
	if err != nil {
		return nil, fmt.Errorf("transactional producer %s: %w", id, err)
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("init transactional producer %s: %w", id, classify(err))
	}
	return &TxnProducer{cl: cl, adm: k, id: id, p: newPending(cl, &sync.Mutex{}), ids: map[string][16]byte{}}, nil
}

// ID is the transactional id.
func (t *TxnProducer) ID() string { return t.id }

// begin opens the transaction if none is.
func (t *TxnProducer) begin() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.inTxn {
		// Fails only when a transaction is open already, which inTxn
		// rules out.
		_ = t.cl.BeginTransaction()
		t.inTxn = true
	}
}

// Produce sends rec in the open transaction (opening one).
func (t *TxnProducer) Produce(ctx context.Context, rec *Record) { t.ProduceOr(ctx, rec, nil) }

// ProduceOr is Pending.ProduceOr in the open transaction.
func (t *TxnProducer) ProduceOr(ctx context.Context, rec *Record, tooLarge func(*Record)) {
	t.begin()
	t.p.ProduceOr(ctx, rec, tooLarge)
}

// Stalled is Pending.Stalled of the transaction's records.
func (t *TxnProducer) Stalled(d time.Duration) bool { return t.p.Stalled(d) }

// Flush waits for every record produced so far (they stay invisible to
// read_committed readers until Commit).
func (t *TxnProducer) Flush(ctx context.Context) error { return classify(t.p.Flush(ctx)) }

// Commit ends the transaction: the records produced, the progress record
// and the offset become visible together, or (on an error) none of them.
// An error leaves the transaction aborted when it could be.
func (t *TxnProducer) Commit(ctx context.Context, c TxnCommit) error {
	t.begin()
	if c.Progress != nil {
		t.p.Produce(ctx, c.Progress)
	}
	if err := t.commit(ctx, c); err != nil {
		err = classify(err)
		if !errors.Is(err, ErrFenced) {
			if aerr := t.Abort(ctx); aerr != nil {
				err = fmt.Errorf("%w (and the abort failed: %v)", err, aerr)
			}
		}
		t.ended()
		return err
	}
	t.ended()
	return nil
}

// ended records that no transaction is open.
func (t *TxnProducer) ended() {
	t.mu.Lock()
	t.inTxn = false
	t.mu.Unlock()
}

func (t *TxnProducer) commit(ctx context.Context, c TxnCommit) error {
	if err := t.p.Flush(ctx); err != nil {
		return err
	}
	if c.Group == "" { // records only (an at-least-once task's changelog)
		if err := t.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return fmt.Errorf("commit transaction: %w", err)
		}
		return nil
	}
	if err := t.commitOffset(ctx, c); err != nil {
		return err
	}
	if err := t.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("commit transaction: %w", err)
	}
	return nil
}

// commitOffset commits c's offset in the open transaction (which ends
// later): AddOffsetsToTxn, then TxnOffsetCommit.
func (t *TxnProducer) commitOffset(ctx context.Context, c TxnCommit) error {
	pid, epoch, err := t.cl.ProducerID(ctx)
	if err != nil {
		return err
	}
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = t.id, pid, epoch, c.Group
	aresp, err := add.RequestWith(ctx, t.cl)
	if err != nil {
		return fmt.Errorf("add offsets to transaction: %w", err)
	}
	if err := kerr.ErrorForCode(aresp.ErrorCode); err != nil {
		return fmt.Errorf("add offsets to transaction: %w", err)
	}
	tid, err := t.topicID(ctx, c.Topic)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = t.id, c.Group, pid, epoch
	// No group membership: the transactional id, not a generation, fences
	// an older holder of the task.
	req.Generation, req.MemberID = -1, ""
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic, rt.TopicID = c.Topic, tid
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = c.Partition, c.Offset, -1
	md := c.Metadata
	rp.Metadata = &md
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, t.cl)
	if err != nil {
		return fmt.Errorf("commit offsets in transaction: %w", err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return fmt.Errorf("commit offset of %s/%d in transaction: %w", c.Topic, rp.Partition, err)
			}
		}
	}
	return nil
}

// Abort drops what the open transaction produced.
func (t *TxnProducer) Abort(ctx context.Context) error {
	t.mu.Lock()
	open := t.inTxn
	t.inTxn = false
	t.mu.Unlock()
	if !open {
		return nil
	}
	if err := t.cl.AbortBufferedRecords(ctx); err != nil {
		return classify(err)
	}
	_ = t.p.Flush(ctx) // the aborted records' failures
	if err := t.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return fmt.Errorf("abort transaction: %w", classify(err))
	}
	return nil
}

// Close closes the producer (an open transaction is aborted by the
// broker, or by the next holder of the id).
func (t *TxnProducer) Close() { t.cl.Close() }

func (t *TxnProducer) topicID(ctx context.Context, topic string) ([16]byte, error) {
	t.idsMu.Lock()
	defer t.idsMu.Unlock()
	if id, ok := t.ids[topic]; ok {
		return id, nil
	}
	td, err := t.adm.adm.ListTopics(ctx, topic)
	if err != nil {
		return [16]byte{}, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	d, ok := td[topic]
	if !ok || d.Err != nil {
		return [16]byte{}, fmt.Errorf("describe topic %s: %v", topic, d.Err)
	}
	t.ids[topic] = d.ID
	return d.ID, nil
}

// classify marks the errors of a fenced producer with ErrFenced.
func classify(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return err
}

// Committed is a consumer group's committed offset of one partition, with
// the metadata committed with it.
type Committed struct {
	Offset   int64
	Metadata string
}

// StableOffsets reads the committed offsets of group on partitions parts
// of topic (none given: every partition), waiting while a transaction that
// commits one of them is still open (KIP-447's require_stable): the answer
// is what the last committed transaction left.
//
// A task opening its partitions asks for those only, which it has just
// fenced (their open transactions aborted): Kafka answers
// UNSTABLE_OFFSET_COMMIT per partition, and another partition's
// transaction may stay open for the whole transaction timeout (60 s) when
// its producer died mid-commit and no live member has fenced it yet.
// Waiting for that inside the group's assignment callback kept the member
// from rejoining the group's next rebalance, and so kept that partition
// from being given to anyone: the 3-node audit on Apache Kafka saw tasks
// of a SIGKILLed node with no owner for over 60 s. (kfake answers
// UNSTABLE_OFFSET_COMMIT for every partition of a group while any of its
// offsets is pending, so there a task's open still waits for them all.)
func (k *Client) StableOffsets(ctx context.Context, group, topic string, parts ...int32) (map[int32]Committed, error) {
	if len(parts) == 0 {
		n, err := k.Partitions(ctx, topic)
		if err != nil {
			return nil, err
		}
		parts = make([]int32, n)
		for p := range parts {
			parts[p] = int32(p)
		}
	}
	for {
		out, err := k.stableOffsets(ctx, group, topic, parts)
		if !errors.Is(err, kerr.UnstableOffsetCommit) {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("offsets of group %s stay unstable: %w: %w", group, ErrUnstable, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (k *Client) stableOffsets(ctx context.Context, group, topic string, parts []int32) (map[int32]Committed, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, parts
	req.Topics = []kmsg.OffsetFetchRequestTopic{rt}
	req.RequireStable = true
	resp, err := req.RequestWith(ctx, k.cl)
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	topics, code := resp.Topics, resp.ErrorCode
	if len(resp.Groups) == 1 {
		topics, code = nil, resp.Groups[0].ErrorCode
		for _, gt := range resp.Groups[0].Topics {
			t := kmsg.NewOffsetFetchResponseTopic()
			t.Topic = gt.Topic
			for _, gp := range gt.Partitions {
				p := kmsg.NewOffsetFetchResponseTopicPartition()
				p.Partition, p.Offset, p.Metadata, p.ErrorCode = gp.Partition, gp.Offset, gp.Metadata, gp.ErrorCode
				t.Partitions = append(t.Partitions, p)
			}
			topics = append(topics, t)
		}
	}
	if err := kerr.ErrorForCode(code); err != nil {
		if errors.Is(err, kerr.GroupIDNotFound) {
			return map[int32]Committed{}, nil // nothing committed yet
		}
		return nil, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	out := map[int32]Committed{}
	for _, t := range topics {
		if t.Topic != topic {
			continue
		}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("fetch offset of group %s on %s/%d: %w", group, topic, p.Partition, err)
			}
			if p.Offset < 0 {
				continue // none committed
			}
			md := ""
			if p.Metadata != nil {
				md = *p.Metadata
			}
			out[p.Partition] = Committed{Offset: p.Offset, Metadata: md}
		}
	}
	return out, nil
}
