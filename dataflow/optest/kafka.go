package optest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/kafkaio"
)

// Kafka is an in-memory Kafka as the runtime sees it: topics of
// partitions of offsets, transactions whose records become visible (to
// read_committed readers, which every reader here is) only when they
// commit, with a control marker taking an offset in each partition they
// wrote, as Kafka's do; consumer-group offsets committed with their
// metadata; transactional ids that fence their earlier holders. Several
// harnesses may share one, so that what one stage writes another reads.
//
// It is safe for concurrent use, though a harness calls it from its test's
// goroutine only.
type Kafka struct {
	mu      sync.Mutex
	topics  map[string]*topic
	offsets map[groupPart]kafkaio.Committed
	epochs  map[string]int // transactional id → its current holder's epoch
	// failCommits and failFlushes are errors the next transaction
	// commits and producer flushes fail with, in turn (FailCommit,
	// FailFlush).
	failCommits, failFlushes []error
	seq                      int64 // orders what became visible, across topics
}

// topic is one topic's partitions.
type topic struct {
	parts map[int32]*plog
	// count is the partition count declared (CreateTopic); 0: as many as
	// were written.
	count int
}

// plog is one partition's log: entries in offset order (offsets may have
// gaps, as a compacted topic's do).
type plog struct {
	entries []entry
	end     int64
}

// entry is one offset: a data record, or a transaction's control marker
// (rec nil).
type entry struct {
	off int64
	rec *kafkaio.Record
}

type groupPart struct {
	group, topic string
	p            int32
}

// NewKafka is an empty Kafka.
func NewKafka() *Kafka {
	return &Kafka{topics: map[string]*topic{}, offsets: map[groupPart]kafkaio.Committed{}, epochs: map[string]int{}}
}

// CreateTopic declares topic with n partitions (EndOffsets and Partitions
// report them all, written or not).
func (k *Kafka) CreateTopic(name string, n int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.topic(name).count = n
}

func (k *Kafka) topic(name string) *topic {
	t := k.topics[name]
	if t == nil {
		t = &topic{parts: map[int32]*plog{}}
		k.topics[name] = t
	}
	return t
}

func (k *Kafka) log(name string, p int32) *plog {
	t := k.topic(name)
	l := t.parts[p]
	if l == nil {
		l = &plog{}
		t.parts[p] = l
	}
	return l
}

// Append writes records at the end of their topic's partitions
// (rec.Topic, rec.Partition), visible at once, as a producer outside any
// transaction does; each record's Offset is set to where it landed.
func (k *Kafka) Append(recs ...*kafkaio.Record) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range recs {
		k.appendLocked(r)
	}
}

// appendLocked writes a copy of r at its partition's end and sets r's
// offset (the producer's acknowledgement does); it returns the copy.
func (k *Kafka) appendLocked(r *kafkaio.Record) *kafkaio.Record {
	l := k.log(r.Topic, r.Partition)
	r.Offset = l.end
	c := clone(r)
	l.entries = append(l.entries, entry{off: l.end, rec: c})
	l.end++
	k.seq++
	return c
}

// put writes a copy of r at its own offset, unless that offset is written
// already (an input pushed again after a restart: it is read as it was).
func (k *Kafka) put(r *kafkaio.Record) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.log(r.Topic, r.Partition)
	if r.Offset < l.end {
		return
	}
	l.entries = append(l.entries, entry{off: r.Offset, rec: clone(r)})
	l.end = r.Offset + 1
}

// clone copies what a producer may reuse after its acknowledgement.
func clone(r *kafkaio.Record) *kafkaio.Record {
	c := &kafkaio.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
		Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value)}
	if r.Key != nil && c.Key == nil {
		c.Key = []byte{}
	}
	if r.Value != nil && c.Value == nil {
		c.Value = []byte{}
	}
	for _, h := range r.Headers {
		c.Headers = append(c.Headers, kafkaio.Header{Key: h.Key, Value: bytes.Clone(h.Value)})
	}
	return c
}

// Read is what a read_committed reader reads of topic's partition p from
// offset from: the data records, copies, in offset order.
func (k *Kafka) Read(name string, p int32, from int64) []*kafkaio.Record {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []*kafkaio.Record
	for _, e := range k.log(name, p).entries {
		if e.off >= from && e.rec != nil {
			out = append(out, clone(e.rec))
		}
	}
	return out
}

// ReadAll is Read of every partition of topic from its start, partition
// by partition.
func (k *Kafka) ReadAll(name string) []*kafkaio.Record {
	k.mu.Lock()
	parts := k.partsLocked(name)
	k.mu.Unlock()
	var out []*kafkaio.Record
	for p := range parts {
		out = append(out, k.Read(name, int32(p), 0)...)
	}
	return out
}

// End is the end offset of topic's partition p: where the next record
// goes, control markers counted.
func (k *Kafka) End(name string, p int32) int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.log(name, p).end
}

// Committed is what group last committed for topic's partition p.
func (k *Kafka) Committed(group, name string, p int32) kafkaio.Committed {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.offsets[groupPart{group, name, p}]
}

// FailCommit makes the next transaction commit fail with err (and abort:
// nothing of it becomes visible). A task's commit fails there after
// everything it produced outside the transaction is acknowledged (an
// at-least-once task's outputs) and before its state is written: the
// narrowest place for a crash that replays a batch whose outputs are
// already out.
func (k *Kafka) FailCommit(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.failCommits = append(k.failCommits, err)
}

// FailFlush makes the next flush of a task's producer fail with err: what
// it produced since its last flush never reached Kafka (an at-least-once
// task's outputs are dropped; an exactly-once task's transaction will not
// commit). A task's commit fails there before anything of it is
// acknowledged.
func (k *Kafka) FailFlush(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.failFlushes = append(k.failFlushes, err)
}

// failFlush is the next flush's injected failure (nil: none); the caller
// holds the lock.
func (k *Kafka) failFlush() error {
	if len(k.failFlushes) == 0 {
		return nil
	}
	err := k.failFlushes[0]
	k.failFlushes = k.failFlushes[1:]
	return err
}

// partsLocked is how many partitions topic has: as declared, or as
// written.
func (k *Kafka) partsLocked(name string) int {
	t := k.topics[name]
	if t == nil {
		return 0
	}
	n := t.count
	for p := range t.parts {
		n = max(n, int(p)+1)
	}
	return n
}

// errUnsupported answers what the harness does not do through Kafka:
// consumer groups (it hands fetches to tasks itself) and standbys.
var errUnsupported = errors.New("optest: not supported by the in-memory Kafka (the harness assigns partitions and fetches itself)")

// view is the Kafka one harness's stage sees: producers it opens record,
// in the harness's outbox, what they made visible.
type view struct {
	k   *Kafka
	box *outbox
	// opening is the partition whose task opens now: the producers it
	// opens are its own (a Driver opens one task at a time, on the
	// harness's goroutine).
	opening int32
}

var _ dataflow.Kafka = (*view)(nil)

func (v *view) EndOffsets(_ context.Context, name string) (map[int32]int64, error) {
	v.k.mu.Lock()
	defer v.k.mu.Unlock()
	out := map[int32]int64{}
	for p := range v.k.partsLocked(name) {
		out[int32(p)] = v.k.log(name, int32(p)).end
	}
	return out, nil
}

func (v *view) Partitions(_ context.Context, name string) (int, error) {
	v.k.mu.Lock()
	defer v.k.mu.Unlock()
	return v.k.partsLocked(name), nil
}

func (v *view) NewGroupConsumer(string, string, int, time.Duration, string, kafkaio.GroupHooks) (dataflow.Consumer, error) {
	return nil, errUnsupported
}

func (v *view) ReadPartition(ctx context.Context, name string, p int32, from int64, fn func(*kafkaio.Record) error) (int64, error) {
	for _, r := range v.k.Read(name, p, from) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := fn(r); err != nil {
			return 0, err
		}
	}
	return v.k.End(name, p), nil
}

func (v *view) GroupAssignment(context.Context, string, string) (kafkaio.Assignment, error) {
	return kafkaio.Assignment{}, errUnsupported
}

func (v *view) NewPartitionFollower(string) (dataflow.ChangelogFollower, error) {
	return nil, errUnsupported
}

// NewPending is an at-least-once task's producer: what it produces
// reaches Kafka when its Flush (the task's commit) has it acknowledged.
func (v *view) NewPending() dataflow.Pending { return &pending{v: v, p: v.opening} }

// NewTxnProducer opens transactional id, fencing its earlier holder.
func (v *view) NewTxnProducer(_ context.Context, id string) (dataflow.TxnProducer, error) {
	v.k.mu.Lock()
	defer v.k.mu.Unlock()
	v.k.epochs[id]++
	return &txn{v: v, p: v.opening, id: id, epoch: v.k.epochs[id]}, nil
}

func (v *view) StableOffsets(_ context.Context, group, name string, parts ...int32) (map[int32]kafkaio.Committed, error) {
	v.k.mu.Lock()
	defer v.k.mu.Unlock()
	if len(parts) == 0 {
		for p := range v.k.partsLocked(name) {
			parts = append(parts, int32(p))
		}
	}
	out := map[int32]kafkaio.Committed{}
	for _, p := range parts {
		if c, ok := v.k.offsets[groupPart{group, name, p}]; ok {
			out[p] = c
		}
	}
	return out, nil
}

// outbox is what a harness's producers made visible, in that order, with
// the partition of the task that produced each.
type outbox struct {
	recs []sent
	// internal are the stage's own topics (changelog, progress), left
	// out: they are the runtime's, not the operators' output.
	internal map[string]bool
}

type sent struct {
	p   int32
	rec *kafkaio.Record
}

func (o *outbox) add(p int32, rec *kafkaio.Record) {
	if !o.internal[rec.Topic] {
		// The log's copy, shallowly: a test may renumber or re-address
		// what it took (to deliver it elsewhere) without touching the log.
		c := *rec
		c.Headers = slices.Clone(rec.Headers)
		o.recs = append(o.recs, sent{p, &c})
	}
}

// take removes and returns what partition p's task made visible (p < 0:
// every task's).
func (o *outbox) take(p int32) Output {
	var out Output
	keep := o.recs[:0]
	for _, s := range o.recs {
		if p < 0 || s.p == p {
			out = append(out, s.rec)
		} else {
			keep = append(keep, s)
		}
	}
	o.recs = keep
	return out
}

// pending is an at-least-once task's producer.
type pending struct {
	v      *view
	p      int32
	unsent []*kafkaio.Record // produced, not yet acknowledged
}

func (q *pending) Produce(_ context.Context, rec *kafkaio.Record) { q.unsent = append(q.unsent, rec) }

func (q *pending) ProduceOr(ctx context.Context, rec *kafkaio.Record, _ func(*kafkaio.Record)) {
	q.Produce(ctx, rec)
}

// Flush writes what was produced, in order, each record getting its
// offset as its acknowledgement sets it; an injected failure (FailFlush)
// drops it instead.
func (q *pending) Flush(context.Context) error {
	k := q.v.k
	recs := q.unsent
	q.unsent = nil
	k.mu.Lock()
	if err := k.failFlush(); err != nil {
		k.mu.Unlock()
		return err
	}
	made := make([]*kafkaio.Record, len(recs))
	for i, r := range recs {
		made[i] = k.appendLocked(r)
	}
	k.mu.Unlock()
	for _, r := range made {
		q.v.box.add(q.p, r)
	}
	return nil
}

// txn is a task's transactional producer: what it produces waits for its
// commit; an abort, a close or a newer holder of its id drops it.
type txn struct {
	v     *view
	p     int32
	id    string
	epoch int
	open  []*kafkaio.Record // the records of the open transaction, as produced
}

var _ dataflow.TxnProducer = (*txn)(nil)

func (x *txn) Produce(_ context.Context, rec *kafkaio.Record) { x.open = append(x.open, rec) }

func (x *txn) ProduceOr(ctx context.Context, rec *kafkaio.Record, _ func(*kafkaio.Record)) {
	x.Produce(ctx, rec)
}

// fenced is ErrFenced once a newer holder opened the id (the caller holds
// the lock).
func (x *txn) fenced() error {
	if x.v.k.epochs[x.id] != x.epoch {
		return fmt.Errorf("transactional id %s: %w", x.id, kafkaio.ErrFenced)
	}
	return nil
}

func (x *txn) Flush(context.Context) error {
	x.v.k.mu.Lock()
	defer x.v.k.mu.Unlock()
	if err := x.k().failFlush(); err != nil {
		x.open = nil // a transaction whose records did not all arrive aborts
		return err
	}
	return x.fenced()
}

func (x *txn) k() *Kafka { return x.v.k }

// Commit makes the transaction's records visible, with its progress
// record, a control marker in every partition it wrote, and the input
// offset committed to the group; each record produced gets its offset, as
// the acknowledgement sets it.
func (x *txn) Commit(_ context.Context, c kafkaio.TxnCommit) error {
	k := x.v.k
	k.mu.Lock()
	recs := x.open
	x.open = nil
	if err := x.fenced(); err != nil {
		k.mu.Unlock()
		return err
	}
	if len(k.failCommits) > 0 {
		err := k.failCommits[0]
		k.failCommits = k.failCommits[1:]
		k.mu.Unlock()
		return err
	}
	if c.Progress != nil {
		recs = append(recs, c.Progress)
	}
	var made []*kafkaio.Record
	touched := map[string]map[int32]bool{}
	for _, r := range recs {
		made = append(made, k.appendLocked(r))
		if touched[r.Topic] == nil {
			touched[r.Topic] = map[int32]bool{}
		}
		touched[r.Topic][r.Partition] = true
	}
	for _, name := range slices.Sorted(maps.Keys(touched)) {
		for _, p := range slices.Sorted(maps.Keys(touched[name])) {
			l := k.log(name, p)
			l.entries = append(l.entries, entry{off: l.end})
			l.end++
		}
	}
	if c.Group != "" {
		k.offsets[groupPart{c.Group, c.Topic, c.Partition}] = kafkaio.Committed{Offset: c.Offset, Metadata: c.Metadata}
	}
	k.mu.Unlock()
	for _, r := range made {
		x.v.box.add(x.p, r)
	}
	return nil
}

func (x *txn) Abort(context.Context) error {
	x.open = nil
	return nil
}

func (x *txn) ID() string { return x.id }

// Close drops an open transaction, as the broker aborts it.
func (x *txn) Close() { x.open = nil }
