package dataflow

import (
	"math"

	"github.com/cespare/xxhash/v2"

	"github.com/turbinesql/turbinesql/exec"
)

// sessionPanes keys the open sessions' early fire in earlyFires: they come
// as one window's rows, not one per session.
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

// fire returns the early panes to write: the open windows, each as rows
// gives it, kept only when their content differs from the last fire's. A
// session aggregation's open sessions are one "window", sessionPanes.
//
// A cold window's rows come a chunk at a time from Pebble: they are read
// once to sum them, chunk by chunk, and, when the sum changed, handed on
// as that read's first chunk, then a second read the next operator pulls a
// chunk at a time, opened only when it asks for the second chunk. So an
// early fire holds the first chunk of each changed cold window (4,096
// groups) and the read of one, never a whole window.
func (e *earlyFires) fire(windows []int64, rows func(int64) (exec.Chunks, bool, error)) ([]exec.Chunks, error) {
	next := make(map[int64]uint64, len(windows))
	var out []exec.Chunks
	changed := func(w int64, sum uint64) bool {
		next[w] = sum
		prev, ok := e.last[w]
		return !ok || prev != sum
	}
	for _, w := range windows {
		c, ok, err := rows(w)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		var sum uint64
		if err := c.Each(func(b *exec.Batch) { sum += e.sum(b) }); err != nil {
			return nil, err
		}
		if !changed(w, sum) {
			continue
		}
		if c.More != nil {
			c.More = reread(w, rows)
		}
		out = append(out, c)
	}
	// Windows that closed since drop out: they are not open any more.
	e.last = next
	return out, nil
}

// reread is the chunks of window w after its first, read again from the
// start when first asked for (nothing changes the window in between: the
// fire's output is pulled before the task reads on).
func reread(w int64, rows func(int64) (exec.Chunks, bool, error)) func() (*exec.Batch, error) {
	var more func() (*exec.Batch, error)
	return func() (*exec.Batch, error) {
		if more == nil {
			c, ok, err := rows(w)
			if err != nil || !ok || c.More == nil {
				return nil, err
			}
			more = c.More // c.First is the chunk already handed on
		}
		return more()
	}
}

func (e *earlyFires) sum(b *exec.Batch) uint64 {
	var s uint64
	for i := 0; i < b.N; i++ {
		e.key = exec.AppendKey(e.key[:0], b.Cols, i)
		s += xxhash.Sum64(e.key)
	}
	return s + uint64(b.N)
}
