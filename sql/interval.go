package sql

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// IntervalFunc is the function name INTERVAL literals are rewritten to before
// the TiDB parser sees a SELECT body: it accepts no INTERVAL literal as a
// function argument, so `INTERVAL '1' MINUTE` becomes `__ivl(60000)`, a call
// whose argument is the interval in milliseconds.
const IntervalFunc = "__ivl"

// BoolFunc carries TRUE and FALSE through the TiDB parser, which would
// read them as 1 and 0.
const BoolFunc = "__bool"

// SessionFunc replaces SESSION(...), a keyword in the TiDB grammar.
const SessionFunc = "__session"

// unitMillis is the length of each interval unit in milliseconds. Months and
// years have no fixed length in milliseconds, and an INTERVAL here is a
// plain number of milliseconds, so they are refused (see unitScale).
var unitMillis = map[string]float64{
	"MICROSECOND": 0.001, "MICROSECONDS": 0.001, "US": 0.001, "USEC": 0.001, "USECS": 0.001,
	"MILLISECOND": 1, "MILLISECONDS": 1, "MS": 1, "MSEC": 1, "MSECS": 1,
	"SECOND": 1000, "SECONDS": 1000, "S": 1000, "SEC": 1000, "SECS": 1000,
	"MINUTE": 60_000, "MINUTES": 60_000, "MIN": 60_000, "MINS": 60_000, "M": 60_000,
	"HOUR": 3_600_000, "HOURS": 3_600_000, "H": 3_600_000, "HR": 3_600_000, "HRS": 3_600_000,
	"DAY": 86_400_000, "DAYS": 86_400_000, "D": 86_400_000,
	"WEEK": 604_800_000, "WEEKS": 604_800_000, "W": 604_800_000,
}

// unitScale returns the milliseconds in one unit, or an error naming the
// supported units.
func unitScale(unit string) (float64, error) {
	u := strings.ToUpper(unit)
	if mul, ok := unitMillis[u]; ok {
		return mul, nil
	}
	switch u {
	case "MONTH", "MONTHS", "MON", "MONS", "YEAR", "YEARS", "Y", "YR", "YRS", "DECADE", "DECADES", "CENTURY", "CENTURIES":
		return 0, fmt.Errorf("interval unit %q has no fixed length: use DAY or WEEK", unit)
	}
	return 0, fmt.Errorf("unknown interval unit %q: use MILLISECOND, SECOND, MINUTE, HOUR, DAY or WEEK", unit)
}

// parseInterval reads an INTERVAL literal starting at toks[i] (the INTERVAL
// keyword) in any of the forms INTERVAL '1' MINUTE, INTERVAL '1 minute',
// INTERVAL 1 MINUTE and PostgreSQL's interval text (INTERVAL '1 day 02:00:00').
// It returns the length in milliseconds and the index of the first token
// after the literal.
func parseInterval(src string, toks []Token, i int) (int64, int, error) {
	kw := toks[i]
	if i+1 >= len(toks) {
		return 0, i, syntaxAt(src, kw.End, "INTERVAL needs a value, e.g. INTERVAL '1' MINUTE")
	}
	v := toks[i+1]
	next := i + 2
	var qty string
	switch v.Kind {
	case TokString:
		if _, err := strconv.ParseFloat(strings.TrimSpace(v.Text), 64); err != nil {
			// The whole interval is in the string: '1 minute', '1 day 02:00'.
			ms, err := ParseIntervalText(v.Text)
			if err != nil {
				return 0, i, syntaxAt(src, v.Start, "cannot read interval %q: %v; write INTERVAL '1' MINUTE or INTERVAL '1 minute'", v.Text, err)
			}
			return ms, next, nil
		}
		qty = strings.TrimSpace(v.Text)
	case TokNumber:
		qty = v.Text
	default:
		return 0, i, syntaxAt(src, v.Start, "INTERVAL needs a value, e.g. INTERVAL '1' MINUTE")
	}
	if next >= len(toks) || toks[next].Kind != TokIdent {
		return 0, i, syntaxAt(src, v.End, "INTERVAL needs a unit (MILLISECOND, SECOND, MINUTE, HOUR or DAY)")
	}
	unit := toks[next]
	next++
	mul, err := unitScale(unit.Text)
	if err != nil {
		return 0, i, syntaxAt(src, v.Start, "%v", err)
	}
	f, err := strconv.ParseFloat(qty, 64)
	if err != nil {
		return 0, i, syntaxAt(src, v.Start, "cannot read interval quantity %q", qty)
	}
	ms, err := toMillis(f * mul)
	if err != nil {
		return 0, i, Errorf("22015", "%v", err).WithPos(charPos(src, v.Start))
	}
	return ms, next, nil
}

var errIntervalRange = errors.New("interval out of range")

func toMillis(f float64) (int64, error) {
	f = math.Round(f)
	if math.IsNaN(f) || f >= 9.223372036854775807e18 || f < -9.223372036854775808e18 {
		return 0, errIntervalRange
	}
	return int64(f), nil
}

// ParseIntervalText reads PostgreSQL interval text into milliseconds:
// quantity-unit pairs ('1 minute', '1.5 hours', '2d 3h'), a time of day part
// ('01:30:00', '-00:00:05.25'), both ('1 day 02:00:00'), an optional leading
// '@' and trailing 'ago'. A bare number is seconds, as in PostgreSQL.
// Months and years are refused: they have no fixed length.
func ParseIntervalText(s string) (int64, error) {
	fields := strings.Fields(s)
	if len(fields) > 0 && fields[0] == "@" {
		fields = fields[1:]
	}
	neg := false
	if n := len(fields); n > 0 && strings.EqualFold(fields[n-1], "ago") {
		neg = true
		fields = fields[:n-1]
	}
	if len(fields) == 0 {
		return 0, fmt.Errorf("empty interval")
	}
	total := 0.0
	for k := 0; k < len(fields); k++ {
		f := fields[k]
		if strings.Contains(f, ":") {
			ms, err := parseClock(f)
			if err != nil {
				return 0, err
			}
			total += ms
			continue
		}
		// A number, with its unit glued on ("10min") or in the next field.
		j := 0
		for j < len(f) && (f[j] >= '0' && f[j] <= '9' || f[j] == '.' || f[j] == '-' || f[j] == '+') {
			j++
		}
		num, unit := f[:j], f[j:]
		if num == "" {
			return 0, fmt.Errorf("expected a number, got %q", f)
		}
		q, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Errorf("cannot read %q as a number", num)
		}
		if unit == "" && k+1 < len(fields) && !strings.ContainsAny(fields[k+1], ":0123456789") {
			k++
			unit = fields[k]
		}
		mul := 1000.0 // a bare number is seconds
		if unit != "" {
			if mul, err = unitScale(unit); err != nil {
				return 0, err
			}
		}
		total += q * mul
	}
	if neg {
		total = -total
	}
	return toMillis(total)
}

// parseClock reads [+-]HH:MM[:SS[.fff]] into milliseconds.
func parseClock(f string) (float64, error) {
	sign := 1.0
	switch {
	case strings.HasPrefix(f, "-"):
		sign, f = -1, f[1:]
	case strings.HasPrefix(f, "+"):
		f = f[1:]
	}
	parts := strings.Split(f, ":")
	if len(parts) > 3 {
		return 0, fmt.Errorf("cannot read time %q", f)
	}
	total := 0.0
	scale := []float64{3_600_000, 60_000, 1000}
	for k, p := range parts {
		if p == "" {
			return 0, fmt.Errorf("cannot read time %q", f)
		}
		for _, c := range p {
			if (c < '0' || c > '9') && (c != '.' || k != len(parts)-1) {
				return 0, fmt.Errorf("cannot read time %q", f)
			}
		}
		v, err := strconv.ParseFloat(p, 64)
		if err != nil {
			return 0, fmt.Errorf("cannot read time %q", f)
		}
		total += v * scale[k]
	}
	return sign * total, nil
}
