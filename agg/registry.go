package agg

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/turbinesql/turbinesql/types"
)

// Info describes an aggregate to the planner: what a call may look like and
// what the caller must supply.
type Info struct {
	Name string // canonical upper-case name; aliases resolve to it
	// MinArgs and MaxArgs bound the arguments the user writes, constants
	// included; COUNT(*) is Star, not an argument.
	MinArgs, MaxArgs int
	// Consts lists the (0-based) argument positions that must be constant
	// expressions: their values go to Spec.Params, not to Update.
	Consts []int
	Star   bool // accepts *: COUNT(*)
	// Distinct reports that DISTINCT is accepted (for MIN, MAX, BOOL_OR,
	// BOOL_AND and APPROX_COUNT_DISTINCT it changes nothing).
	Distinct bool
	// NeedsOrder: the caller appends two columns after the arguments, event
	// time (TIMESTAMP or BIGINT millis) and a BIGINT sequence unique per row
	// (the Kafka offset, made unique across partitions), which define
	// "first" and "last".
	NeedsOrder bool
	// Mergeable: partial accumulators combine, so a combine hop may be used.
	Mergeable bool
}

// distinctMode is what DISTINCT does to an aggregate.
type distinctMode uint8

const (
	distinctNo   distinctMode = iota // refused
	distinctSame                     // accepted, changes nothing: the aggregate ignores repeats
	distinctSet                      // keeps the set of values and aggregates it at the end
)

type entry struct {
	Info
	distinct distinctMode
	// build makes the Func once New has checked the argument count; cols
	// are the value columns (order columns removed).
	build func(s Spec, cols []types.Type) (Func, error)
}

func (e *entry) arity() string {
	plural := "s"
	if e.MaxArgs == 1 {
		plural = ""
	}
	if e.MinArgs == e.MaxArgs {
		return fmt.Sprintf("%d argument%s", e.MinArgs, plural)
	}
	return fmt.Sprintf("%d to %d arguments", e.MinArgs, e.MaxArgs)
}

var (
	registry = map[string]*entry{}
	aliases  = map[string]string{
		"VARIANCE": "VAR_SAMP",
		"STDDEV":   "STDDEV_SAMP",
		"EVERY":    "BOOL_AND", // the SQL standard's name
		"MAX_BY":   "ARG_MAX",  // Trino, Spark, DuckDB
		"MIN_BY":   "ARG_MIN",
	}
)

// Lookup describes the aggregate called name (any case, aliases resolved).
func Lookup(name string) (Info, bool) {
	e, ok := lookup(name)
	if !ok {
		return Info{}, false
	}
	info := e.Info
	info.Consts = append([]int(nil), e.Consts...)
	return info, true
}

// IsAggregate reports whether name (any case) is an aggregate function.
func IsAggregate(name string) bool {
	_, ok := lookup(name)
	return ok
}

// Names lists every accepted aggregate name, aliases included, sorted.
func Names() []string {
	var ns []string
	for n := range registry {
		ns = append(ns, n)
	}
	for n := range aliases {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

func lookup(name string) (*entry, bool) {
	n := strings.ToUpper(name)
	if a, ok := aliases[n]; ok {
		n = a
	}
	e, ok := registry[n]
	return e, ok
}

func numeric(t types.Type) bool { return t == types.Int || t == types.Double }

// valueType reports a type a column can have (a bare NULL literal has none).
func valueType(t types.Type) bool {
	switch t {
	case types.Int, types.Double, types.Text, types.Bool, types.Timestamp:
		return true
	}
	return false
}

func badArgs(s Spec, cols []types.Type, want string) error {
	e, _ := lookup(s.Name)
	return errorf(ErrArgs, "function %s does not exist: %s takes %s", signature(s.Name, cols), e.Name, want)
}

// withDistinct wraps the plain aggregate in a DISTINCT set when asked.
func withDistinct(s Spec, cols []types.Type, f Func, isCount bool) (Func, error) {
	if !s.Distinct {
		return f, nil
	}
	if isCount {
		f = nil
	}
	return newDistinct(cols[0], f), nil
}

func register(e entry) {
	e.Distinct = e.distinct != distinctNo
	e.Mergeable = true // every aggregate here has a mergeable accumulator
	registry[e.Name] = &e
}

// The table is filled in init, not in the variable's initializer: the DISTINCT
// wrapper's constructors reach back into it.
func init() {
	register(entry{Info: Info{Name: "COUNT", MinArgs: 1, MaxArgs: 1, Star: true}, distinct: distinctSet,
		build: func(s Spec, cols []types.Type) (Func, error) {
			if s.Star {
				return &count{star: true}, nil
			}
			return withDistinct(s, cols, &count{}, true)
		}})
	register(entry{Info: Info{Name: "SUM", MinArgs: 1, MaxArgs: 1}, distinct: distinctSet,
		build: func(s Spec, cols []types.Type) (Func, error) {
			switch cols[0] {
			case types.Int:
				return withDistinct(s, cols, &sumInt{}, false)
			case types.Double:
				return withDistinct(s, cols, &sumFloat{}, false)
			}
			return nil, badArgs(s, cols, "a BIGINT or DOUBLE argument")
		}})
	register(entry{Info: Info{Name: "AVG", MinArgs: 1, MaxArgs: 1}, distinct: distinctSet,
		build: func(s Spec, cols []types.Type) (Func, error) {
			if !numeric(cols[0]) {
				return nil, badArgs(s, cols, "a BIGINT or DOUBLE argument")
			}
			return withDistinct(s, cols, &avg{isInt: cols[0] == types.Int}, false)
		}})
	for _, name := range []string{"MIN", "MAX"} {
		register(entry{Info: Info{Name: name, MinArgs: 1, MaxArgs: 1}, distinct: distinctSame,
			build: func(s Spec, cols []types.Type) (Func, error) {
				if !valueType(cols[0]) {
					return nil, badArgs(s, cols, "an argument of a known type")
				}
				return newMinMax(cols[0], name == "MAX"), nil
			}})
	}
	for name, mode := range map[string]varMode{"VAR_SAMP": varSamp, "VAR_POP": varPop, "STDDEV_SAMP": stddevSamp, "STDDEV_POP": stddevPop} {
		register(entry{Info: Info{Name: name, MinArgs: 1, MaxArgs: 1}, distinct: distinctSet,
			build: func(s Spec, cols []types.Type) (Func, error) {
				switch cols[0] {
				case types.Int:
					return withDistinct(s, cols, &varInt{mode: mode}, false)
				case types.Double:
					return withDistinct(s, cols, &varFloat{mode: mode}, false)
				}
				return nil, badArgs(s, cols, "a BIGINT or DOUBLE argument")
			}})
	}
	for name, mode := range map[string]regrMode{"CORR": regrCorr, "COVAR_POP": regrCovarPop, "COVAR_SAMP": regrCovarSamp} {
		register(entry{Info: Info{Name: name, MinArgs: 2, MaxArgs: 2},
			build: func(s Spec, cols []types.Type) (Func, error) {
				if !numeric(cols[0]) || !numeric(cols[1]) {
					return nil, badArgs(s, cols, "two BIGINT or DOUBLE arguments")
				}
				return &regr{mode: mode}, nil
			}})
	}
	register(entry{Info: Info{Name: "APPROX_COUNT_DISTINCT", MinArgs: 1, MaxArgs: 1}, distinct: distinctSame,
		build: func(s Spec, cols []types.Type) (Func, error) {
			if !valueType(cols[0]) {
				return nil, badArgs(s, cols, "an argument of a known type")
			}
			return &hll{typ: cols[0]}, nil
		}})
	for _, name := range []string{"FIRST_VALUE", "LAST_VALUE"} {
		register(entry{Info: Info{Name: name, MinArgs: 1, MaxArgs: 1, NeedsOrder: true},
			build: func(s Spec, cols []types.Type) (Func, error) {
				if !valueType(cols[0]) {
					return nil, badArgs(s, cols, "an argument of a known type")
				}
				return newFirstLast(cols[0], name == "LAST_VALUE"), nil
			}})
	}
	for _, name := range []string{"ARG_MAX", "ARG_MIN"} {
		register(entry{Info: Info{Name: name, MinArgs: 2, MaxArgs: 2},
			build: func(s Spec, cols []types.Type) (Func, error) {
				if !valueType(cols[0]) || !valueType(cols[1]) {
					return nil, badArgs(s, cols, "(value, ordering) arguments of known types")
				}
				return newArgBy(cols[0], cols[1], name == "ARG_MAX"), nil
			}})
	}
	for _, name := range []string{"BOOL_OR", "BOOL_AND"} {
		register(entry{Info: Info{Name: name, MinArgs: 1, MaxArgs: 1}, distinct: distinctSame,
			build: func(s Spec, cols []types.Type) (Func, error) {
				if cols[0] != types.Bool {
					return nil, badArgs(s, cols, "a BOOLEAN argument")
				}
				return &boolAgg{and: name == "BOOL_AND"}, nil
			}})
	}
	register(entry{Info: Info{Name: "APPROX_PERCENTILE", MinArgs: 2, MaxArgs: 2, Consts: []int{1}},
		build: func(s Spec, cols []types.Type) (Func, error) {
			if !numeric(cols[0]) {
				return nil, badArgs(s, cols, "a BIGINT or DOUBLE argument and a constant fraction")
			}
			q, err := fraction(s.Params[0])
			if err != nil {
				return nil, err
			}
			return &percentile{q: q}, nil
		}})
	register(entry{Info: Info{Name: "APPROX_MEDIAN", MinArgs: 1, MaxArgs: 1},
		build: func(s Spec, cols []types.Type) (Func, error) {
			if !numeric(cols[0]) {
				return nil, badArgs(s, cols, "a BIGINT or DOUBLE argument")
			}
			return &percentile{q: 0.5}, nil
		}})
}

// fraction reads APPROX_PERCENTILE's constant: a number in [0, 1].
func fraction(p any) (float64, error) {
	var q float64
	switch v := p.(type) {
	case float64:
		q = v
	case int64:
		q = float64(v)
	case nil:
		return 0, errorf(ErrParam, "APPROX_PERCENTILE: the percentile must not be NULL")
	default:
		return 0, errorf(ErrParam, "APPROX_PERCENTILE: the percentile must be a number between 0 and 1, got %v", p)
	}
	if math.IsNaN(q) || q < 0 || q > 1 {
		return 0, errorf(ErrParam, "APPROX_PERCENTILE: percentile value %v is not between 0 and 1", q)
	}
	return q, nil
}
