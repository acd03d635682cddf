package console

import (
	"context"
	"sync"
	"time"
)

// History keeps the last minutes of each stream's figures in memory, for
// the charts of its page: one fixed-size ring per stream, so its memory is
// bounded by the number of streams (DefaultHistorySpan at
// DefaultHistoryEvery is 180 samples of a few words each per stream). A
// stream that disappears between two samples is forgotten, and one created
// again under the same name starts a new history, so a chart never joins
// two streams' figures.
type History struct {
	every time.Duration
	size  int

	mu    sync.Mutex
	rings map[string]*ring
}

// The console's history: the last 15 minutes at 5 s resolution.
const (
	DefaultHistorySpan  = 15 * time.Minute
	DefaultHistoryEvery = 5 * time.Second
)

// Figures are what a stream's history records at each sample: cumulative
// counters (as SHOW STREAMS shows them) and the lag gauge.
type Figures struct {
	Stream string
	// Of identifies the stream's incarnation (any comparable value, such
	// as its catalog entry): when it changes, the stream was dropped and
	// created again under its name, and its history starts over.
	Of           any
	RecordsIn    int64
	RecordsOut   int64
	Lag          int64
	LateRows     int64
	DeadLettered int64
}

// Point is one sample as the charts draw it. The rates are over the
// interval since the sample before; they are nil at a history's first
// sample and where a counter went down, where there is no interval to
// measure: the counters survive restarts (committed with the state), but
// a SIGKILL takes back what was counted since the last commit, until that
// input is read and counted again.
type Point struct {
	At           int64    `json:"t"` // Unix milliseconds
	InPerSec     *float64 `json:"in_per_sec"`
	OutPerSec    *float64 `json:"out_per_sec"`
	Lag          int64    `json:"lag"`
	LateRows     int64    `json:"late_rows"`
	DeadLettered int64    `json:"dead_lettered"`
}

// taken is one stream's figures at one instant.
type taken struct {
	at time.Time
	f  Figures
}

// ring holds the last len(buf) samples of one stream: next is where the
// next one goes, n how many are held.
type ring struct {
	of   any
	buf  []taken
	next int
	n    int
}

func (r *ring) add(s taken) {
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	r.n = min(r.n+1, len(r.buf))
}

// each calls fn with the held samples, oldest first.
func (r *ring) each(fn func(taken)) {
	start := (r.next - r.n + len(r.buf)) % len(r.buf)
	for i := 0; i < r.n; i++ {
		fn(r.buf[(start+i)%len(r.buf)])
	}
}

// NewHistory keeps span of figures sampled every every (at least one
// sample is kept).
func NewHistory(span, every time.Duration) *History {
	if every <= 0 {
		every = DefaultHistoryEvery
	}
	return &History{every: every, size: max(int(span/every), 1), rings: map[string]*ring{}}
}

// Every is the sampling interval.
func (h *History) Every() time.Duration { return h.every }

// Record adds one sample, taken at at, of every stream in figs, and
// forgets the streams not in it.
func (h *History) Record(at time.Time, figs []Figures) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := make(map[string]bool, len(figs))
	for _, f := range figs {
		seen[f.Stream] = true
		r, ok := h.rings[f.Stream]
		if !ok || r.of != f.Of {
			r = &ring{of: f.Of, buf: make([]taken, h.size)}
			h.rings[f.Stream] = r
		}
		r.add(taken{at: at, f: f})
	}
	for name := range h.rings {
		if !seen[name] {
			delete(h.rings, name)
		}
	}
}

// Points is stream's history, oldest first (nil: none kept).
func (h *History) Points(stream string) []Point {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.rings[stream]
	if !ok {
		return nil
	}
	out := make([]Point, 0, r.n)
	var prev *taken
	r.each(func(s taken) {
		p := Point{At: s.at.UnixMilli(), Lag: s.f.Lag, LateRows: s.f.LateRows, DeadLettered: s.f.DeadLettered}
		if prev != nil {
			p.InPerSec = perSecond(prev.f.RecordsIn, s.f.RecordsIn, s.at.Sub(prev.at))
			p.OutPerSec = perSecond(prev.f.RecordsOut, s.f.RecordsOut, s.at.Sub(prev.at))
		}
		out = append(out, p)
		prev = &s
	})
	return out
}

// perSecond is a counter's rate from a to b over d; nil when there is no
// rate to tell (no time passed, or the counter went down).
func perSecond(a, b int64, d time.Duration) *float64 {
	if d <= 0 || b < a {
		return nil
	}
	r := float64(b-a) / d.Seconds()
	return &r
}

// Run records sample() every h.Every() until ctx ends, the first at once.
func (h *History) Run(ctx context.Context, sample func() []Figures) {
	t := time.NewTicker(h.every)
	defer t.Stop()
	for {
		h.Record(time.Now(), sample())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
