package sql

import (
	"math"
	"strconv"
	"strings"
)

// Option is one `key = value` of a WITH clause, as written.
type Option struct {
	Value    string // unquoted text of the value
	IsString bool   // it was a quoted string
	Millis   int64  // for INTERVAL values, the length in milliseconds
	Interval bool
	Pos      int // 1-based character position of the value
}

// Options is a WITH clause, keyed by lower-cased option name.
type Options map[string]Option

// Keys lists the option names (unordered).
func (o Options) Keys() []string {
	ks := make([]string, 0, len(o))
	for k := range o {
		ks = append(ks, k)
	}
	return ks
}

// String reads a text option; def when absent.
func (o Options) String(key, def string) string {
	if v, ok := o[key]; ok {
		return v.Value
	}
	return def
}

// Int reads an integer option; def when absent, a 22023 error when malformed.
func (o Options) Int(key string, def int) (int, error) {
	v, ok := o[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v.Value))
	if err != nil {
		return 0, Errorf(CodeInvalidParameter, "option %s must be an integer, got %q", key, v.Value).WithPos(v.Pos)
	}
	return n, nil
}

// Count reads an optional count that must be at least 1 when given; 0
// when absent.
func (o Options) Count(key string) (int, error) {
	n, err := o.Int(key, 0)
	if err != nil {
		return 0, err
	}
	if v, given := o[key]; given && n < 1 {
		return 0, Errorf(CodeInvalidParameter, "%s must be at least 1, got %d", key, n).WithPos(v.Pos)
	}
	return n, nil
}

// Millis reads a duration option written as an INTERVAL, a quoted interval
// ('5 seconds') or a number of milliseconds.
func (o Options) Millis(key string, def int64) (int64, error) {
	v, ok := o[key]
	if !ok {
		return def, nil
	}
	if v.Interval {
		return v.Millis, nil
	}
	if n, err := strconv.ParseInt(v.Value, 10, 64); err == nil {
		return n, nil
	}
	toks, err := Lex("INTERVAL '" + strings.ReplaceAll(v.Value, "'", "''") + "'")
	if err == nil {
		if ms, _, err := parseInterval("", toks, 0); err == nil {
			return ms, nil
		}
	}
	return 0, Errorf(CodeInvalidParameter, "option %s must be an interval such as INTERVAL '5' SECOND, got %q", key, v.Value).WithPos(v.Pos)
}

// Check refuses options not in allowed, naming the first unknown one.
func (o Options) Check(what string, allowed ...string) error {
	for k, v := range o {
		found := false
		for _, a := range allowed {
			if a == k {
				found = true
				break
			}
		}
		if !found {
			return Errorf(CodeInvalidParameter, "unknown %s option %q", what, k).
				WithHint("valid options: %s", strings.Join(allowed, ", ")).WithPos(v.Pos)
		}
	}
	return nil
}

// Float reads a number option; def when absent, a 22023 error when it is
// not a finite number.
func (o Options) Float(key string, def float64) (float64, error) {
	v, ok := o[key]
	if !ok {
		return def, nil
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v.Value), 64)
	if err != nil || v.Interval || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, Errorf(CodeInvalidParameter, "option %s must be a number, got %q", key, v.Value).WithPos(v.Pos)
	}
	return f, nil
}
