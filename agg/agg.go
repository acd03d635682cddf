// Package agg holds the aggregate functions. Each keeps its accumulators
// column-wise, one entry per slot (a slot is one (group key, window) of the
// caller's table), so an update is one call per batch with a typed loop
// inside, never an interface call per row. Every accumulator has a versioned
// binary encoding (state stores it; the combine hop ships it) and an
// order-insensitive Merge.
package agg

import (
	"errors"
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/turbinesql/turbinesql/types"
)

// Func is one aggregate in one query: it owns the accumulators of every slot.
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
	// Append appends slot's final value to a result column builder of ResultType.
	Result(slot uint32) any
	ResultType() types.Type
	Mergeable() bool
}

// Spec names an aggregate call; New builds its Func.
type Spec struct {
	Name     string // upper-case function name
	ArgTypes []types.Type
	Distinct bool
	Star     bool // COUNT(*)
}

// ErrUnknown is returned for an aggregate name that does not exist.
var ErrUnknown = errors.New("unknown aggregate")

// IsAggregate reports whether name (any case) is an aggregate function.
func IsAggregate(name string) bool {
	switch strings.ToUpper(name) {
	case "COUNT", "SUM", "MIN", "MAX", "AVG":
		return true
	}
	return false
}

// New builds the Func for spec, or an error saying why it cannot.
func New(s Spec) (Func, error) {
	argType := types.Unknown
	if len(s.ArgTypes) > 0 {
		argType = s.ArgTypes[0]
	}
	if s.Distinct {
		return nil, fmt.Errorf("%s(DISTINCT ...) is not supported yet", s.Name)
	}
	switch s.Name {
	case "COUNT":
		if s.Star {
			return &count{star: true}, nil
		}
		if len(s.ArgTypes) != 1 {
			return nil, fmt.Errorf("COUNT takes one argument or *")
		}
		return &count{}, nil
	case "SUM", "AVG":
		if len(s.ArgTypes) != 1 || !argType.Numeric() {
			return nil, fmt.Errorf("%s needs one numeric argument, got %s", s.Name, typeList(s.ArgTypes))
		}
		if s.Name == "AVG" {
			return &avg{isInt: argType == types.Int}, nil
		}
		if argType == types.Int {
			return &sumInt{}, nil
		}
		return &sumFloat{}, nil
	case "MIN", "MAX":
		if len(s.ArgTypes) != 1 || argType == types.Unknown {
			return nil, fmt.Errorf("%s needs one argument", s.Name)
		}
		return newMinMax(argType, s.Name == "MAX"), nil
	}
	return nil, fmt.Errorf("%w %s", ErrUnknown, s.Name)
}

func typeList(ts []types.Type) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.String()
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// encoding version byte written before every accumulator.
const encV1 = 1

var errCorrupt = errors.New("agg: corrupt accumulator encoding")

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
