package streamplan

import (
	"fmt"
	"strings"

	"github.com/turbinesql/turbinesql/window"
)

// OptionError is a WITH option's value that is not one of its valid
// values. Callers branch on it (errors.As) to attach their SQLSTATE and
// the option's position in the statement.
type OptionError struct {
	Option string   // the option's name, e.g. processing_guarantee
	Value  string   // what was given
	Valid  []string // the values it takes, in their SQL spelling
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("%s %q is not valid: use %s", e.Option, e.Value, QuotedList(e.Valid))
}

// QuotedList spells values as a user would write them in a WITH clause:
// 'a', 'b' or 'c'.
func QuotedList(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = "'" + v + "'"
	}
	return orList(q)
}

// PlainList spells values unquoted: a, b or c.
func PlainList(vs []string) string { return orList(vs) }

func orList(vs []string) string {
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	}
	return strings.Join(vs[:len(vs)-1], ", ") + " or " + vs[len(vs)-1]
}

// parseEnum reads s (case-insensitively) as one of names; names[i] is the
// spelling of value i.
func parseEnum[T ~uint8](option, s string, names []string, valid []T) (T, error) {
	for _, v := range valid {
		if strings.EqualFold(s, names[v]) {
			return v, nil
		}
	}
	spell := make([]string, len(valid))
	for i, v := range valid {
		spell[i] = names[v]
	}
	return 0, &OptionError{Option: option, Value: s, Valid: spell}
}

func enumString[T ~uint8](names []string, v T, typ string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, uint8(v))
}

// Strategy is how the records of a stream move so that every group is
// computed in one place. The zero value, StrategyAuto, is what a stream
// asks for when it names none: the planner's rules choose.
type Strategy uint8

const (
	// StrategyAuto lets the rules choose (the strategy option's default).
	StrategyAuto Strategy = iota
	// StrategyLocal aggregates where the records are: the GROUP BY holds
	// the input's partition key.
	StrategyLocal
	// StrategyRepartition re-keys the input's records through an internal
	// topic before aggregating.
	StrategyRepartition
	// StrategyCombine pre-aggregates on each input partition and merges
	// the partial accumulators behind an internal topic. A window without
	// a GROUP BY key is a combine onto one merge partition (rule
	// KeylessCombine; Graph.Keyless).
	StrategyCombine
	// StrategyStateless filters and projects each record where it is read.
	StrategyStateless
	// StrategyBounded is a bounded SELECT: the topic read to its end now.
	StrategyBounded
)

var strategyNames = []string{
	StrategyAuto: "auto", StrategyLocal: "local", StrategyRepartition: "repartition", StrategyCombine: "combine",
	StrategyStateless: "stateless", StrategyBounded: "bounded",
}

// String is the strategy's SQL spelling, as EXPLAIN, SHOW STREAMS and the
// catalog print it.
func (s Strategy) String() string { return enumString(strategyNames, s, "Strategy") }

// Requestable are the strategies the strategy option takes.
var Requestable = []Strategy{StrategyAuto, StrategyLocal, StrategyRepartition, StrategyCombine}

// ParseStrategy reads the strategy option (auto, local, repartition or
// combine, in any case).
func ParseStrategy(s string) (Strategy, error) {
	return parseEnum("strategy", s, strategyNames, Requestable)
}

// ParseRecorded reads a strategy recorded by the planner (the catalog's
// turbine.planned header, a node's state): any strategy a stream plans
// to; "" is StrategyAuto (nothing recorded).
func ParseRecorded(s string) (Strategy, error) {
	if s == "" {
		return StrategyAuto, nil
	}
	return parseEnum("planned strategy", s, strategyNames, []Strategy{StrategyLocal, StrategyRepartition, StrategyCombine, StrategyStateless})
}

// Recorded is the stored form of a strategy the planner recorded: ""
// for StrategyAuto (nothing recorded), else its SQL spelling.
func (s Strategy) Recorded() string {
	if s == StrategyAuto {
		return ""
	}
	return s.String()
}

// Guarantee is a stream's delivery guarantee (processing_guarantee).
type Guarantee uint8

const (
	AtLeastOnce Guarantee = iota // the default
	ExactlyOnce
)

var guaranteeNames = []string{AtLeastOnce: "at_least_once", ExactlyOnce: "exactly_once"}

func (g Guarantee) String() string { return enumString(guaranteeNames, g, "Guarantee") }

// ParseGuarantee reads the processing_guarantee option.
func ParseGuarantee(s string) (Guarantee, error) {
	return parseEnum("processing_guarantee", s, guaranteeNames, []Guarantee{AtLeastOnce, ExactlyOnce})
}

// OnError is what a source does with a record it cannot decode (and a
// sink with a row its topic cannot take).
type OnError uint8

const (
	OnErrorFail OnError = iota // the stream fails, naming the record (the default)
	OnErrorSkip                // the record is dropped and counted
	OnErrorDLQ                 // the record is copied to the dead-letter topic and counted
)

var onErrorNames = []string{OnErrorFail: "fail", OnErrorSkip: "skip", OnErrorDLQ: "dlq"}

func (o OnError) String() string { return enumString(onErrorNames, o, "OnError") }

// Tolerant: the stream goes on past a bad record (skip or dlq).
func (o OnError) Tolerant() bool { return o == OnErrorSkip || o == OnErrorDLQ }

// ParseOnError reads the on_error option.
func ParseOnError(s string) (OnError, error) {
	return parseEnum("on_error", s, onErrorNames, []OnError{OnErrorFail, OnErrorSkip, OnErrorDLQ})
}

// WindowKind is a GROUP BY window's kind: the window package's, whose
// String is the SQL spelling (TUMBLE, HOP, SESSION).
type WindowKind = window.Kind

const (
	Tumble  = window.Tumble
	Hop     = window.Hop
	Session = window.Session
)

// ParseWindowKind reads a window function's name (TUMBLE, HOP, SESSION,
// in any case).
func ParseWindowKind(s string) (WindowKind, error) {
	for _, k := range []WindowKind{Tumble, Hop, Session} {
		if strings.EqualFold(s, k.String()) {
			return k, nil
		}
	}
	return 0, &OptionError{Option: "window", Value: s, Valid: []string{Tumble.String(), Hop.String(), Session.String()}}
}
