// Package window holds the event-time window definitions (tumbling, hopping
// and session), the slicing that lets overlapping hopping windows share
// work, and the watermark tracker with partition idleness.
//
// Windows are half-open, [start, end), in epoch milliseconds.
package window

import "fmt"

// Kind is a window kind.
type Kind uint8

const (
	Tumble Kind = iota + 1
	Hop
	Session
)

func (k Kind) String() string {
	switch k {
	case Tumble:
		return "TUMBLE"
	case Hop:
		return "HOP"
	case Session:
		return "SESSION"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Spec is one GROUP BY window.
type Spec struct {
	Kind  Kind
	Size  int64 // TUMBLE and HOP: window length
	Slide int64 // HOP: distance between window starts (TUMBLE: = Size)
	Gap   int64 // SESSION: inactivity that ends a session
}

// Validate checks the lengths are usable.
func (s Spec) Validate() error {
	switch s.Kind {
	case Tumble:
		if s.Size <= 0 {
			return fmt.Errorf("TUMBLE size must be positive")
		}
	case Hop:
		if s.Size <= 0 || s.Slide <= 0 {
			return fmt.Errorf("HOP slide and size must be positive")
		}
		if s.Slide > s.Size {
			return fmt.Errorf("HOP slide (%d ms) longer than its size (%d ms) would skip rows", s.Slide, s.Size)
		}
		if s.Size/gcd(s.Size, s.Slide) > 10_000 {
			return fmt.Errorf("HOP size %d ms over slide %d ms needs more than 10000 slices per window", s.Size, s.Slide)
		}
	case Session:
		if s.Gap <= 0 {
			return fmt.Errorf("SESSION gap must be positive")
		}
	default:
		return fmt.Errorf("unknown window kind")
	}
	return nil
}

// SliceSize is the width of the slices rows are aggregated into: the
// window itself for TUMBLE; for HOP the greatest common divisor of slide
// and size, so every window is a whole number of slices and each row
// updates exactly one slice, however many windows it falls in.
func (s Spec) SliceSize() int64 {
	switch s.Kind {
	case Tumble:
		return s.Size
	case Hop:
		return gcd(s.Size, s.Slide)
	}
	return 0
}

// SliceOf is the start of the slice holding event time ts.
func (s Spec) SliceOf(ts int64) int64 { return floorTo(ts, s.SliceSize()) }

// WindowsOf lists the starts of the windows containing event time ts, in
// ascending order (one for TUMBLE).
func (s Spec) WindowsOf(ts int64) []int64 {
	switch s.Kind {
	case Tumble:
		return []int64{floorTo(ts, s.Size)}
	case Hop:
		last := floorTo(ts, s.Slide)
		var out []int64
		for w := last - ((s.Size-1)/s.Slide)*s.Slide; w <= last; w += s.Slide {
			if ts < w+s.Size && ts >= w {
				out = append(out, w)
			}
		}
		return out
	}
	return nil
}

// LastWindowEnd is the end of the last window that contains the slice
// starting at slice: once the watermark passes it (plus lateness), the
// slice is needed by no open window.
func (s Spec) LastWindowEnd(slice int64) int64 {
	switch s.Kind {
	case Tumble:
		return slice + s.Size
	case Hop:
		return floorTo(slice, s.Slide) + s.Size
	}
	return 0
}

// FirstWindowEnd is the end of the first window that contains the slice:
// the slice is needed from then on only by windows still open.
func (s Spec) FirstWindowEnd(slice int64) int64 {
	switch s.Kind {
	case Tumble:
		return slice + s.Size
	case Hop:
		// the smallest window start w (a multiple of Slide) with w+Size > slice
		return floorTo(slice-s.Size, s.Slide) + s.Slide + s.Size
	}
	return 0
}

// WindowsEndingIn lists, ascending, the starts of the windows whose end e
// satisfies after < e <= upTo: the windows a watermark move from after to
// upTo closes.
func (s Spec) WindowsEndingIn(after, upTo int64) []int64 {
	if upTo <= after {
		return nil
	}
	step := s.Slide
	if s.Kind == Tumble {
		step = s.Size
	}
	// window starts are multiples of step; end = start + Size
	first := floorTo(after-s.Size, step) + step
	var out []int64
	for w := first; w+s.Size <= upTo; w += step {
		if w+s.Size > after {
			out = append(out, w)
		}
	}
	return out
}

// SlicesOfWindow lists the slice starts making up window [w, w+Size).
func (s Spec) SlicesOfWindow(w int64) []int64 {
	g := s.SliceSize()
	out := make([]int64, 0, s.Size/g)
	for x := w; x < w+s.Size; x += g {
		out = append(out, x)
	}
	return out
}

// floorTo rounds ts down to a multiple of size (also for negative ts).
func floorTo(ts, size int64) int64 {
	w := ts - ts%size
	if ts < 0 && ts%size != 0 {
		w -= size
	}
	return w
}

// FloorTo is floorTo for callers outside the package (tumbling starts).
func FloorTo(ts, size int64) int64 { return floorTo(ts, size) }

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
