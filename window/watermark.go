package window

import "time"

// Clock gives the wall-clock time; tests inject a fake one.
type Clock func() time.Time

// Watermarks tracks event time per input partition and derives the
// stream's watermark from it.
//
// A partition's watermark is its largest event time minus the source's
// delay. The stream's is the minimum over partitions that are not idle. A
// partition is idle when it has had nothing new to read for IdleTimeout of
// wall-clock time (a quiet partition must not hold every window open
// forever), or when a FLUSH has read it to its end; it holds the
// watermark back again as soon as it has data. When every partition is
// idle the maximum over them stands. A partition that is not idle and has
// shown no event time yet holds the watermark where it is. The stream's
// watermark never moves back.
type Watermarks struct {
	Delay       int64
	IdleTimeout time.Duration
	Now         Clock

	parts map[int32]*Partition
	wm    int64
	has   bool
}

// Partition is one input partition's progress.
type Partition struct {
	Next    int64 // next offset to read
	End     int64 // log end offset last seen
	MaxTime int64 // largest event time read
	HasTime bool

	lastData  time.Time // when records last arrived, or tracking began
	flushIdle bool      // read to its end by a FLUSH, until new data arrives
}

// NewWatermarks starts tracking; now defaults to time.Now.
func NewWatermarks(delay int64, idle time.Duration, now Clock) *Watermarks {
	if now == nil {
		now = time.Now
	}
	return &Watermarks{Delay: delay, IdleTimeout: idle, Now: now, parts: map[int32]*Partition{}}
}

// Add starts tracking partition p from a restored position.
func (w *Watermarks) Add(p int32, next, end, maxTime int64, hasTime bool) *Partition {
	ps := &Partition{Next: next, End: end, MaxTime: maxTime, HasTime: hasTime, lastData: w.Now()}
	w.parts[p] = ps
	return ps
}

// Restore sets the stream watermark persisted at the last commit.
func (w *Watermarks) Restore(wm int64, has bool) { w.wm, w.has = wm, has }

// Part returns partition p (nil if not tracked).
func (w *Watermarks) Part(p int32) *Partition { return w.parts[p] }

// Parts returns every tracked partition by number.
func (w *Watermarks) Parts() map[int32]*Partition { return w.parts }

// SawEnd records the log end offset a fetch reported for p.
func (w *Watermarks) SawEnd(p int32, end int64) {
	if ps := w.parts[p]; ps != nil && end > ps.End {
		ps.End = end
	}
}

// Read records that p's records up to next (exclusive) were applied, with
// maxTime the largest event time among them (hasTime false: none had one).
func (w *Watermarks) Read(p int32, next int64, maxTime int64, hasTime bool) {
	ps := w.parts[p]
	if ps == nil {
		return
	}
	ps.Next = next
	if next > ps.End {
		ps.End = next
	}
	if hasTime && (!ps.HasTime || maxTime > ps.MaxTime) {
		ps.MaxTime, ps.HasTime = maxTime, true
	}
	ps.lastData = w.Now()
	ps.flushIdle = false
}

// FlushedTo marks p read to target by a FLUSH: at its end, it is idle.
func (w *Watermarks) FlushedTo(p int32, target int64) {
	if ps := w.parts[p]; ps != nil && ps.Next >= target {
		if target > ps.End {
			ps.End = target
		}
		ps.flushIdle = ps.Next >= ps.End
	}
}

// Idle reports whether p no longer holds the watermark back.
func (w *Watermarks) Idle(ps *Partition) bool {
	if ps.Next < ps.End {
		return false // it has something to read
	}
	return ps.flushIdle || w.Now().Sub(ps.lastData) >= w.IdleTimeout
}

// Current computes the stream watermark; ok is false while there is none.
// It never returns less than a watermark it returned before.
func (w *Watermarks) Current() (wm int64, ok bool) {
	var minActive, maxAll int64
	anyActive, anyTime, held := false, false, false
	for _, ps := range w.parts {
		if ps.HasTime {
			pw := ps.MaxTime - w.Delay
			if !anyTime || pw > maxAll {
				maxAll = pw
			}
			anyTime = true
		}
		if w.Idle(ps) {
			continue
		}
		if !ps.HasTime {
			held = true // active, no time yet: nothing can be said
			continue
		}
		pw := ps.MaxTime - w.Delay
		if !anyActive || pw < minActive {
			minActive = pw
		}
		anyActive = true
	}
	var cand int64
	var have bool
	switch {
	case held:
	case anyActive:
		cand, have = minActive, true
	case anyTime:
		cand, have = maxAll, true
	}
	if have && (!w.has || cand > w.wm) {
		w.wm, w.has = cand, true
	}
	return w.wm, w.has
}

// IdleCount is how many partitions are idle now.
func (w *Watermarks) IdleCount() int {
	n := 0
	for _, ps := range w.parts {
		if w.Idle(ps) {
			n++
		}
	}
	return n
}
