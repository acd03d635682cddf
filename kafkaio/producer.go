package kafkaio

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Pending produces records asynchronously on the shared producer and lets
// its owner (one task) wait until every one of them is acknowledged: the
// task's commit point.
type Pending struct {
	cl      *kgo.Client // the shared producer, or a task's transactional one
	aloneMu *sync.Mutex // one record at a time (produceAlone)
	mu      sync.Mutex
	err     error
	// inflight counts the records not acknowledged yet; idle is closed
	// when it drops to zero. Not a sync.WaitGroup: a Flush that gives up
	// (its context ends, as at shutdown) leaves no waiter behind, and the
	// next Produce may start a new round at once (a WaitGroup panics when
	// it is reused while an abandoned Wait has not returned).
	inflight int
	idle     chan struct{}
	// bytes is the size of the records in flight; a Produce that would
	// take it past batchBound waits for freed (closed and remade when
	// records finish while waiters wait).
	bytes   int
	waiters int
	freed   chan struct{}
	// acks counts the records acknowledged; seenAcks is its value when a
	// call of Stalled last saw it change (or records go in flight after
	// none were), at seenAt. A counter, not a time per acknowledgement:
	// reading the clock for each of millions of records cost a tenth of
	// the producing.
	acks, seenAcks uint64
	seenAt         time.Time
	// acked is onAck as a func value, made once: a closure for each
	// record cost an allocation a record.
	acked func(*Record, error)
}

// batchBound bounds the bytes one Pending has in flight. The producer
// batches whatever is buffered for a partition while a request is out,
// and Kafka refuses a batch larger than the topic's max.message.bytes
// (1 MB by default) as a whole: a commit closing a few hundred thousand
// groups once failed its stream so. Records in flight only up to half
// that keep every batch of a task's own producer under it; a larger
// record goes alone (its topic must take it anyway). Tasks sharing the
// at-least-once producer share batches of an output partition, so there
// the bound is per task. Waiting costs a round trip per 512 KiB.
const batchBound = 512 << 10

// recordBytes is about what rec takes in a batch.
func recordBytes(rec *Record) int {
	n := len(rec.Key) + len(rec.Value) + 24
	for _, h := range rec.Headers {
		n += len(h.Key) + len(h.Value) + 4
	}
	return n
}

// reserve waits until size more bytes fit in flight (or nothing is in
// flight), and counts them and the record: one lock a record, where a
// changelog write can produce millions in a commit.
func (p *Pending) reserve(ctx context.Context, size int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.bytes > 0 && p.bytes+size > batchBound && ctx.Err() == nil {
		if p.freed == nil {
			p.freed = make(chan struct{})
		}
		ch := p.freed
		p.waiters++
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		p.mu.Lock()
		p.waiters--
	}
	p.bytes += size
	if p.inflight == 0 {
		p.idle = make(chan struct{})
	}
	p.inflight++
}

// Stalled reports whether records have been in flight, and Kafka has
// acknowledged none, for more than d between this call and earlier ones:
// a wait that is not going to end, where a long one that keeps moving (a
// commit writing millions of records) is not. It is meant to be called
// every so often (a watchdog), which is its resolution.
func (p *Pending) Stalled(d time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.inflight == 0 {
		p.seenAt = time.Time{}
		return false
	}
	if p.seenAt.IsZero() || p.acks != p.seenAcks {
		p.seenAcks, p.seenAt = p.acks, now
		return false
	}
	return now.Sub(p.seenAt) > d
}

// free uncounts size bytes in flight, and the record too when done.
func (p *Pending) free(size int, done bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bytes -= size
	p.acks++
	if p.waiters > 0 && p.freed != nil {
		close(p.freed)
		p.freed = nil
	}
	if done {
		p.doneLocked()
	}
}

// closedChan is an idle channel of a Pending with nothing in flight.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (p *Pending) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.doneLocked()
}

func (p *Pending) doneLocked() {
	if p.inflight--; p.inflight == 0 {
		close(p.idle)
	}
}

// idleCh is closed once nothing produced so far is in flight.
func (p *Pending) idleCh() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inflight == 0 {
		return closedChan
	}
	return p.idle
}

// NewPending is an empty set of pending records.
func (k *Client) NewPending() *Pending { return newPending(k.cl, &k.aloneMu) }

func newPending(cl *kgo.Client, aloneMu *sync.Mutex) *Pending {
	p := &Pending{cl: cl, aloneMu: aloneMu}
	p.acked = p.onAck
	return p
}

// Produce sends rec; a failure is reported by the next Flush.
func (p *Pending) Produce(ctx context.Context, rec *Record) { p.ProduceOr(ctx, rec, nil) }

// ProduceOr is Produce, except that a record its topic refuses as too
// large is handed to tooLarge (which may produce something else instead)
// rather than failing the next Flush. Kafka refuses a whole batch when one
// of its records is too large, so a refused record is first sent again on
// its own: only one that is too large alone goes to tooLarge.
func (p *Pending) ProduceOr(ctx context.Context, rec *Record, tooLarge func(*Record)) {
	size := recordBytes(rec)
	p.reserve(ctx, size)
	if tooLarge == nil {
		p.cl.Produce(ctx, rec, p.acked)
		return
	}
	p.cl.Produce(ctx, rec, func(_ *Record, err error) {
		if err == nil || !IsTooLarge(err) {
			p.onAck(rec, err)
			return
		}
		// Freed first: tooLarge below may produce, and so wait for room.
		p.free(size, false)
		go func() { // not on the producer's callback goroutine
			defer p.done()
			if err := p.produceAlone(ctx, rec); err != nil {
				if IsTooLarge(err) {
					tooLarge(rec) // before Done: what it produces is waited for too
					return
				}
				p.setErr(rec, err)
			}
		}()
	})
}

// onAck ends a record's flight (its size is recounted: the producer does
// not change a record's key, value or headers).
func (p *Pending) onAck(rec *Record, err error) {
	if err != nil {
		p.setErr(rec, err)
	}
	p.free(recordBytes(rec), true)
}

func (p *Pending) setErr(rec *Record, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = &WriteError{Topic: rec.Topic, Err: err}
	}
}

// produceAlone sends rec in a batch of its own: retries of refused records
// go one at a time, each waiting for its answer.
func (p *Pending) produceAlone(ctx context.Context, rec *Record) error {
	p.aloneMu.Lock()
	defer p.aloneMu.Unlock()
	r := &Record{Topic: rec.Topic, Partition: rec.Partition, Key: rec.Key, Value: rec.Value, Headers: rec.Headers, Timestamp: rec.Timestamp}
	return p.cl.ProduceSync(ctx, r).FirstErr()
}

// Flush waits for every record produced so far and returns the first
// failure among them (then forgets it).
func (p *Pending) Flush(ctx context.Context) error {
	select {
	case <-p.idleCh():
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.err
	p.err = nil
	return err
}
