package audit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/state"
)

// The input is designed so that no row can be late, whatever the engine's
// interleaving, batching, restarts or idleness, as long as its watermarks
// are right:
//
//   - event time is a logical clock: tick i is at base + i*tickMs, and each
//     tick writes rowsPerPart rows to EVERY source partition, so partitions
//     advance together and none is ever quiet while producing runs;
//   - a row's time is its tick's minus a jitter below jitterMs, and
//     jitterMs < delayMs (the WATERMARK delay): when a row is read, its
//     partition has shown at most its own tick's time, so the partition's
//     watermark is at most tick - delayMs < the row's time, and the
//     stream's (a minimum over partitions, or the partition's own) is no
//     higher; a row is never behind a closed window;
//   - idle_timeout (wall clock) is far longer than any kill gap, so no
//     partition is judged idle while the server catches up on a backlog.
//
// At the end one row far in the future on every partition closes every
// window the run produced.
const (
	tickMs      = 100   // event time per tick
	jitterMs    = 500   // a row is up to this much older than its tick
	delayMs     = 2_000 // WATERMARK FOR ts AS ts - delay
	rowsPerPart = 2     // rows per partition per tick
	idleTimeout = "120" // seconds; far above any kill gap
	finalGapMs  = 24 * 3600 * 1000

	tumbleMs  = 10_000
	hopSlide  = 5_000
	hopSize   = 20_000
	sessionMs = 2_000 // gap
	emitEvery = "1"   // seconds of processing time between early fires

	// Keys are active in bursts so that sessions end: a key takes rows
	// for phaseMs of event time, then rests for 2*phaseMs (> sessionMs).
	phaseMs        = 4_000
	tenantsPerPart = 8
	// defaultUsers is the user_id keys' count (-users): few, so windows
	// hold many rows a group.
	defaultUsers = 40
)

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// row is one produced input record, as the independent computation sees it.
type row struct {
	tenant, user string
	v            int64
	ts           int64 // event time, epoch millis
	part         int32
}

func (r row) json() []byte {
	return []byte(`{"tenant":"` + r.tenant + `","user_id":"` + r.user + `","v":` + strconv.FormatInt(r.v, 10) +
		`,"ts":` + strconv.FormatInt(r.ts, 10) + `}`)
}

// keys holds, per source partition, tenant names that murmur2 places
// there (as Kafka's Java client would), and the user names.
type keys struct {
	tenants [][]string
	users   []string
}

func newKeys(parts, users int) keys {
	k := keys{tenants: make([][]string, parts)}
	for i, full := 0, 0; full < parts; i++ {
		name := fmt.Sprintf("tenant-%03d", i)
		p := state.PartitionFor([]byte(name), parts)
		if len(k.tenants[p]) < tenantsPerPart {
			k.tenants[p] = append(k.tenants[p], name)
			if len(k.tenants[p]) == tenantsPerPart {
				full++
			}
		}
	}
	for i := 0; i < max(users, 1); i++ {
		k.users = append(k.users, fmt.Sprintf("user-%02d", i))
	}
	return k
}

// active reports whether the i-th key of its pool takes rows at event time
// ts: keys rest two phases out of three, staggered by index.
func active(i int, ts int64) bool {
	return ((ts-base)/phaseMs+int64(i))%3 == 0
}

// workload makes the rows of each tick from a seeded generator, so a seed
// replays the same input.
type workload struct {
	parts int
	keys  keys
	rng   *rand.Rand
}

func (w *workload) tick(i int64) []row {
	t := base + i*tickMs
	var out []row
	for p := 0; p < w.parts; p++ {
		for j := 0; j < rowsPerPart; j++ {
			out = append(out, row{
				tenant: pickActive(w.rng, w.keys.tenants[p], t),
				user:   pickActive(w.rng, w.keys.users, t),
				v:      w.rng.Int64N(2001) - 1000,
				ts:     t - w.rng.Int64N(jitterMs),
				part:   int32(p),
			})
		}
	}
	return out
}

// final is the row per partition that closes every window of the run.
func (w *workload) final(lastTick int64) []row {
	t := base + lastTick*tickMs + finalGapMs
	out := make([]row, w.parts)
	for p := range out {
		out[p] = row{tenant: w.keys.tenants[p][0], user: w.keys.users[0], ts: t, part: int32(p)}
	}
	return out
}

// pickActive draws one of the pool's keys active at t (every pool has
// active keys at any time: at least a third of it).
func pickActive(rng *rand.Rand, pool []string, t int64) string {
	for {
		i := rng.IntN(len(pool))
		if active(i, t) {
			return pool[i]
		}
	}
}

// producer writes ticks to the source topic from outside the server,
// placing each record by murmur2 of its tenant, and records every row the
// broker acknowledged.
type producer struct {
	cl    *kgo.Client
	topic string
	w     *workload

	mu    sync.Mutex
	rows  []row
	ticks int64
}

func (p *producer) send(ctx context.Context, rows []row) error {
	recs := make([]*kgo.Record, len(rows))
	for i, r := range rows {
		recs[i] = &kgo.Record{Topic: p.topic, Key: []byte(r.tenant), Value: r.json(), Partition: r.part}
		if want := state.PartitionFor([]byte(r.tenant), p.w.parts); want != r.part {
			return fmt.Errorf("tenant %s placed on %d, murmur2 says %d", r.tenant, r.part, want)
		}
	}
	// Records that failed may or may not be in the log: the audit could
	// not be trusted, so a failure ends the run.
	if err := p.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	p.mu.Lock()
	p.rows = append(p.rows, rows...)
	p.mu.Unlock()
	return nil
}

// run writes a tick every interval until ctx ends, or until it has
// written limit rows (0: no limit; it then returns nil). Ticks that fell
// due while an acknowledgement was awaited go together in the next write,
// in order, so the rate holds. Event time is logical: a slow
// acknowledgement (a broker restart) delays ticks but never changes their
// times.
func (p *producer) run(ctx context.Context, interval time.Duration, limit int) error {
	tk := time.NewTicker(interval)
	defer tk.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
		p.mu.Lock()
		next, written := p.ticks, len(p.rows)
		p.mu.Unlock()
		due := int64(time.Since(start)/interval) + 1
		var rows []row
		n := int64(0)
		for ; next+n < due && n < 1000; n++ {
			if limit > 0 && written+len(rows) >= limit {
				break
			}
			rows = append(rows, p.w.tick(next+n)...)
		}
		if len(rows) == 0 {
			if limit > 0 && written >= limit {
				return nil
			}
			continue
		}
		if err := p.send(context.WithoutCancel(ctx), rows); err != nil {
			return err
		}
		p.mu.Lock()
		p.ticks += n
		p.mu.Unlock()
	}
}

func (p *producer) produced() ([]row, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]row(nil), p.rows...), p.ticks
}
