package agg

import "strings"

// Sensitivity is how much a duplicated input row moves an aggregate: what
// decides whether a stream needs exactly-once (an at-least-once replay
// after a crash can feed a row twice).
type Sensitivity int

const (
	// Unaffected: observing a value again changes nothing (MIN, MAX,
	// FIRST/LAST_VALUE, ARG_MAX/MIN, BOOL_OR/AND, anything DISTINCT).
	Unaffected Sensitivity = iota
	// Attenuated: a duplicate re-weights a value already in the
	// distribution; the error is the duplicate count over the window's
	// population, small over many rows, large over a handful (AVG,
	// variances, CORR, percentiles).
	Attenuated
	// Biased: a duplicate is added in full, so the error is the duplicate
	// rate (COUNT, SUM, and what is built from them).
	Biased
)

func (s Sensitivity) String() string {
	switch s {
	case Unaffected:
		return "unaffected"
	case Attenuated:
		return "attenuated"
	}
	return "directly biased"
}

// Why says in words how a duplicate moves an aggregate of this kind.
func (s Sensitivity) Why() string {
	switch s {
	case Unaffected:
		return "a duplicated row changes nothing"
	case Attenuated:
		return "a duplicated row re-weights a value already counted: the error is duplicates over the rows in the window, large when a window holds few rows"
	}
	return "a duplicated row is added in full: the error is the duplicate rate"
}

var sensitivity = map[string]Sensitivity{
	"MIN": Unaffected, "MAX": Unaffected, "FIRST_VALUE": Unaffected, "LAST_VALUE": Unaffected,
	"ARG_MAX": Unaffected, "ARG_MIN": Unaffected, "BOOL_OR": Unaffected, "BOOL_AND": Unaffected,
	"APPROX_COUNT_DISTINCT": Unaffected,
	"AVG":                   Attenuated, "VAR_SAMP": Attenuated, "VAR_POP": Attenuated, "STDDEV_SAMP": Attenuated,
	"STDDEV_POP": Attenuated, "CORR": Attenuated, "COVAR_POP": Attenuated, "COVAR_SAMP": Attenuated,
	"APPROX_PERCENTILE": Attenuated, "APPROX_MEDIAN": Attenuated,
}

// SensitivityOf is the sensitivity of the aggregate s. A DISTINCT
// aggregate sees a duplicate as a value it has; an aggregate not listed
// (COUNT, SUM, STRING_AGG, ARRAY_AGG, ...) is directly biased.
func SensitivityOf(s Spec) Sensitivity {
	name := strings.ToUpper(s.Name)
	if e, ok := lookup(name); ok {
		name = e.Name
	}
	if s.Distinct {
		return Unaffected
	}
	if v, ok := sensitivity[name]; ok {
		return v
	}
	return Biased
}
