// Package agg holds the aggregate functions. Each keeps its accumulators
// column-wise, one entry per slot (a slot is one (group key, window) of the
// caller's table), so an update is one call per batch with a typed loop
// inside, never an interface call per row. Every accumulator has a versioned
// binary encoding (state stores it; the combine hop ships it) and an
// order-insensitive Merge.
//
// registry.go lists the aggregates and what a call may look like (Lookup);
// New checks a call and builds its Func. Semantics are PostgreSQL's unless a
// file says otherwise: NULL inputs are ignored, no row gives NULL (COUNT
// and APPROX_COUNT_DISTINCT give 0), NaN sorts above every number. Each
// file says how its merged results relate to single-stage ones: equal bit
// for bit for the exact aggregates and for the HyperLogLog sketch, within a
// stated error for floating-point sums, variances, CORR and the t-digest.
package agg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/turbinesql/turbinesql/types"
)

// Func is one aggregate in one query: it owns the accumulators of every slot.
// It is not safe for concurrent use (even Result and Encode may reorder a
// slot's state).
type Func interface {
	// Grow makes slots [0, n) addressable; new slots are empty.
	Grow(n int)
	// Reset empties a slot for reuse.
	Reset(slot uint32)
	// Update folds row i of args into slot slots[i], for every row.
	Update(slots []uint32, args []arrow.Array)
	// Encode appends slot's accumulator to dst.
	Encode(dst []byte, slot uint32) []byte
	// Merge folds an encoded accumulator into slot (order-insensitive).
	Merge(slot uint32, enc []byte) error
	// Result is slot's final value: nil (NULL), or an int64, float64,
	// string, bool or time.Time matching ResultType.
	Result(slot uint32) any
	ResultType() types.Type
	// Mergeable reports whether partial accumulators combine (Merge), so
	// the planner may pre-aggregate before a combine hop.
	Mergeable() bool
}

// Spec names an aggregate call; New builds its Func.
type Spec struct {
	Name string // function name, any case; aliases resolve (VARIANCE is VAR_SAMP)
	// ArgTypes are the types of the columns Update receives, in order: the
	// arguments the user wrote less the constant ones (Info.Consts), then,
	// when Info.NeedsOrder, event time (TIMESTAMP, or BIGINT epoch millis)
	// and sequence (BIGINT, unique per row).
	ArgTypes []types.Type
	// Params are the values of the constant arguments, in the order the
	// user wrote them: int64, float64, string, bool or nil (NULL).
	Params   []any
	Distinct bool
	Star     bool // COUNT(*)
}

// New builds the Func for spec, or an error saying why it cannot. Errors
// wrap one of ErrUnknown, ErrArgs, ErrParam or ErrNotSupported (errors.Is).
func New(s Spec) (Func, error) {
	e, ok := lookup(s.Name)
	if !ok {
		return nil, errorf(ErrUnknown, "unknown aggregate %s", strings.ToUpper(s.Name))
	}
	cols := s.ArgTypes
	if e.NeedsOrder {
		if len(cols) < 2 {
			return nil, errorf(ErrArgs, "%s needs the event time and sequence columns after its arguments", e.Name)
		}
		if t := cols[len(cols)-2]; t != types.Timestamp && t != types.Int {
			return nil, errorf(ErrArgs, "%s: event time column is %s, want TIMESTAMP or BIGINT", e.Name, t)
		}
		if t := cols[len(cols)-1]; t != types.Int {
			return nil, errorf(ErrArgs, "%s: sequence column is %s, want BIGINT", e.Name, t)
		}
		cols = cols[:len(cols)-2]
	}
	if s.Star {
		if !e.Star || s.Distinct || len(cols) > 0 || len(s.Params) > 0 {
			return nil, errorf(ErrArgs, "%s(*) is not a valid aggregate call", e.Name)
		}
		return e.build(s, cols)
	}
	n := len(cols) + len(s.Params)
	if n < e.MinArgs || n > e.MaxArgs {
		return nil, errorf(ErrArgs, "function %s does not exist: %s takes %s", signature(s.Name, cols), e.Name, e.arity())
	}
	consts := 0
	for _, p := range e.Consts {
		if p < n {
			consts++
		}
	}
	switch {
	case len(s.Params) < consts:
		return nil, errorf(ErrArgs, "%s: argument %d must be a constant", e.Name, e.Consts[len(s.Params)]+1)
	case len(s.Params) > consts:
		return nil, errorf(ErrArgs, "%s takes %d constant argument(s), got %d", e.Name, consts, len(s.Params))
	}
	if s.Distinct && e.distinct == distinctNo {
		return nil, errorf(ErrNotSupported, "%s(DISTINCT ...) is not supported", e.Name)
	}
	return e.build(s, cols)
}

// ErrUnknown, ErrArgs, ErrParam and ErrNotSupported classify New's errors
// so the caller can attach a SQLSTATE without reading messages: an unknown
// name or an argument list no aggregate takes (42883), a constant argument
// out of range (22023), a valid call TurbineSQL does not implement (0A000).
var (
	ErrUnknown      = errors.New("unknown aggregate")
	ErrArgs         = errors.New("no aggregate takes these arguments")
	ErrParam        = errors.New("invalid aggregate parameter")
	ErrNotSupported = errors.New("aggregate form not supported")
)

// specError keeps the message free of the sentinel's text while errors.Is
// still finds the sentinel.
type specError struct {
	kind error
	msg  string
}

func (e *specError) Error() string { return e.msg }
func (e *specError) Unwrap() error { return e.kind }

func errorf(kind error, format string, args ...any) error {
	return &specError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// signature renders a call's argument types the way PostgreSQL's "function
// ... does not exist" does: sum(text).
func signature(name string, ts []types.Type) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = strings.ToLower(t.String())
	}
	return strings.ToLower(name) + "(" + strings.Join(parts, ", ") + ")"
}

// encoding version byte written before every accumulator.
const encV1 = 1

var errCorrupt = errors.New("agg: corrupt accumulator encoding")

// readCount reads the row count (a uvarint) that starts the variance and
// regression accumulators, and checks that at least need bytes follow
// when it is not zero: body is what follows the count.
func readCount(b []byte, need int) (n int64, body []byte, err error) {
	u, k := binary.Uvarint(b)
	if k <= 0 || u > math.MaxInt64 {
		return 0, nil, errCorrupt
	}
	body = b[k:]
	if u > 0 && len(body) < need {
		return 0, nil, errCorrupt
	}
	return int64(u), body, nil
}

func checkVersion(enc []byte) ([]byte, error) {
	if len(enc) == 0 || enc[0] != encV1 {
		return nil, errCorrupt
	}
	return enc[1:], nil
}

func growSlice[T any](s []T, n int) []T {
	if n <= len(s) {
		return s
	}
	if n <= cap(s) {
		return s[:n]
	}
	ns := make([]T, n, max(n, 2*cap(s)))
	copy(ns, s)
	return ns
}
