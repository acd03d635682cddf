package dataflow

import (
	"math"

	"github.com/cespare/xxhash/v2"

	"github.com/turbinesql/turbinesql/exec"
)

// sessionPanes keys the open sessions' early fire in earlyFires: they come
// as one batch, not one per window.
const sessionPanes = math.MinInt64

// earlyFires remembers what each open window's last early fire held, so
// that EMIT EVERY re-sends only the windows that changed since (a window
// with no new rows, or whose rows left every aggregate as it was, is not
// written again). A window's content is summarised by the sum of its
// rows' hashes, so the order the groups come out in does not matter.
type earlyFires struct {
	last map[int64]uint64
	key  []byte
}

// fire returns the early panes to write: the open windows, each as
// emitted by emit (in one or more batches), kept only when their content differs from the last
// fire's. windows nil means a session aggregation: emitSessions gives the
// panes of every open session at once.
func (e *earlyFires) fire(windows []int64, emit func(int64) ([]*exec.Batch, error), emitSessions func() ([]*exec.Batch, error)) ([]*exec.Batch, error) {
	next := make(map[int64]uint64, len(windows))
	var out []*exec.Batch
	keep := func(w int64, bs ...*exec.Batch) {
		var sum uint64
		for _, b := range bs {
			sum += e.sum(b)
		}
		next[w] = sum
		if prev, ok := e.last[w]; ok && prev == sum {
			return
		}
		out = append(out, bs...)
	}
	if windows == nil {
		bs, err := emitSessions()
		if err != nil {
			return nil, err
		}
		for _, b := range bs {
			keep(sessionPanes, b)
		}
	}
	for _, w := range windows {
		bs, err := emit(w)
		if err != nil {
			return nil, err
		}
		keep(w, bs...)
	}
	// Windows that closed since drop out: they are not open any more.
	e.last = next
	return out, nil
}

func (e *earlyFires) sum(b *exec.Batch) uint64 {
	var s uint64
	for i := 0; i < b.N; i++ {
		e.key = exec.AppendKey(e.key[:0], b.Cols, i)
		s += xxhash.Sum64(e.key)
	}
	return s + uint64(b.N)
}
