package exec

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// Cast converts X to type To, with PostgreSQL's rules: text is parsed (a bad
// value is error 22P02), DOUBLE to BIGINT rounds, anything prints as text.
type Cast struct {
	X  Expr
	To types.Type
}

func (c *Cast) Type() types.Type { return c.To }
func (c *Cast) String() string   { return fmt.Sprintf("CAST(%s AS %s)", c.X, c.To) }

func (c *Cast) Eval(b *Batch) (*Vec, error) {
	x, err := c.X.Eval(b)
	if err != nil {
		return nil, err
	}
	if x.T == c.To {
		return x, nil
	}
	out := newVec(c.To, b.N)
	if x.Null != nil {
		out.Null = append([]bool(nil), x.Null...)
	}
	for i := 0; i < b.N; i++ {
		if x.IsNull(i) {
			continue
		}
		if err := castOne(x, i, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func castOne(x *Vec, i int, out *Vec) error {
	switch out.T {
	case types.Text:
		out.S[i] = FormatText(x.Value(i))
	case types.Int:
		switch x.T {
		case types.Double:
			f := math.RoundToEven(x.F[i])
			if math.IsNaN(f) || f >= 9.223372036854775807e18 || f < -9.223372036854775808e18 {
				return overflow()
			}
			out.I[i] = int64(f)
		case types.Bool:
			if x.B[i] {
				out.I[i] = 1
			}
		case types.Text:
			n, err := strconv.ParseInt(strings.TrimSpace(x.S[i]), 10, 64)
			if err != nil {
				return sql.Errorf("22P02", "invalid input syntax for type bigint: %q", x.S[i])
			}
			out.I[i] = n
		default:
			out.I[i] = x.I[i]
		}
	case types.Double:
		switch x.T {
		case types.Text:
			f, err := ParseFloat(x.S[i])
			if err != nil {
				return sql.Errorf("22P02", "invalid input syntax for type double precision: %q", x.S[i])
			}
			out.F[i] = f
		case types.Bool:
			return sql.Errorf("42846", "cannot cast type boolean to double precision")
		default:
			out.F[i] = float64(x.I[i])
		}
	case types.Bool:
		switch x.T {
		case types.Text:
			v, ok := ParseBool(x.S[i])
			if !ok {
				return sql.Errorf("22P02", "invalid input syntax for type boolean: %q", x.S[i])
			}
			out.B[i] = v
		case types.Int:
			out.B[i] = x.I[i] != 0
		default:
			return sql.Errorf("42846", "cannot cast type %s to boolean", strings.ToLower(x.T.String()))
		}
	case types.Timestamp:
		switch x.T {
		case types.Text:
			ms, err := ParseTimestamp(x.S[i])
			if err != nil {
				return sql.Errorf("22007", "invalid input syntax for type timestamp: %q", x.S[i])
			}
			out.I[i] = ms
		case types.Int:
			out.I[i] = x.I[i]
		default:
			return sql.Errorf("42846", "cannot cast type %s to timestamp", strings.ToLower(x.T.String()))
		}
	}
	return nil
}

// ParseFloat reads a DOUBLE as PostgreSQL does, including NaN and Infinity.
func ParseFloat(s string) (float64, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "nan":
		return math.NaN(), nil
	case "infinity", "+infinity", "inf":
		return math.Inf(1), nil
	case "-infinity", "-inf":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(s, 64)
}

// ParseBool reads a boolean literal as PostgreSQL does.
func ParseBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "t", "true", "yes", "y", "on", "1":
		return true, true
	case "f", "false", "no", "n", "off", "0":
		return false, true
	}
	return false, false
}

var timestampLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999Z07",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04",
	"2006-01-02",
}

// ParseTimestamp reads RFC 3339 or PostgreSQL timestamp text into epoch
// millis (UTC when no zone is given).
func ParseTimestamp(s string) (int64, error) {
	s = strings.TrimSpace(s)
	for _, l := range timestampLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UnixMilli(), nil
		}
	}
	return 0, fmt.Errorf("cannot parse %q as a timestamp", s)
}

// FormatText renders a value as PostgreSQL's text output would.
func FormatText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return FormatFloat(x)
	case bool:
		if x {
			return "true"
		}
		return "false"
	case time.Time:
		return FormatTimestamp(x)
	}
	return fmt.Sprint(v)
}

// FormatFloat prints a DOUBLE like PostgreSQL (shortest round-trip form).
func FormatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	exp := 0
	if f != 0 {
		exp = int(math.Floor(math.Log10(math.Abs(f))))
	}
	if exp < -4 || exp >= 15 {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		// PostgreSQL writes at least two exponent digits: 1e+20, 1e-05.
		if k := strings.IndexAny(s, "e"); k >= 0 && len(s)-k == 3 {
			s = s[:k+2] + "0" + s[k+2:]
		}
		return s
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// FormatTimestamp prints PostgreSQL's text form of a TIMESTAMP.
func FormatTimestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05.999999")
}

// Call is a scalar function over already-typed arguments.
type Call struct {
	Name string
	Args []Expr
	T    types.Type
}

func (c *Call) Type() types.Type { return c.T }
func (c *Call) String() string {
	parts := make([]string, len(c.Args))
	for i, a := range c.Args {
		parts[i] = a.String()
	}
	return c.Name + "(" + strings.Join(parts, ", ") + ")"
}

// ScalarFuncs lists the functions Call implements, with their arity
// (-1: variadic, at least one argument).
var ScalarFuncs = map[string]int{
	"COALESCE": -1, "CONCAT": -1, "LOWER": 1, "UPPER": 1, "LENGTH": 1, "CHAR_LENGTH": 1, "ABS": 1,
}

func (c *Call) Eval(b *Batch) (*Vec, error) {
	args := make([]*Vec, len(c.Args))
	for i, a := range c.Args {
		v, err := a.Eval(b)
		if err != nil {
			return nil, err
		}
		args[i] = v
	}
	out := newVec(c.T, b.N)
	switch c.Name {
	case "COALESCE":
		out.Null = make([]bool, b.N)
		for i := 0; i < b.N; i++ {
			out.Null[i] = true
			for _, a := range args {
				if !a.IsNull(i) {
					copyValue(out, i, a, i)
					out.Null[i] = false
					break
				}
			}
		}
	case "CONCAT": // NULL arguments are skipped, as in PostgreSQL's concat()
		for i := 0; i < b.N; i++ {
			var sb strings.Builder
			for _, a := range args {
				if !a.IsNull(i) {
					sb.WriteString(FormatText(a.Value(i)))
				}
			}
			out.S[i] = sb.String()
		}
	case "LOWER", "UPPER":
		a := args[0]
		out.Null = a.Null
		for i := 0; i < b.N; i++ {
			if !a.IsNull(i) {
				if c.Name == "LOWER" {
					out.S[i] = strings.ToLower(a.S[i])
				} else {
					out.S[i] = strings.ToUpper(a.S[i])
				}
			}
		}
	case "LENGTH", "CHAR_LENGTH":
		a := args[0]
		out.Null = a.Null
		for i := 0; i < b.N; i++ {
			if !a.IsNull(i) {
				out.I[i] = int64(utf8.RuneCountInString(a.S[i]))
			}
		}
	case "ABS":
		a := args[0]
		out.Null = a.Null
		for i := 0; i < b.N; i++ {
			if a.IsNull(i) {
				continue
			}
			if a.T == types.Double {
				out.F[i] = math.Abs(a.F[i])
			} else {
				if a.I[i] == math.MinInt64 {
					return nil, overflow()
				}
				out.I[i] = max(a.I[i], -a.I[i])
			}
		}
	default:
		return nil, sql.Errorf(sql.CodeUndefinedFunc, "function %s does not exist", strings.ToLower(c.Name))
	}
	return out, nil
}

func copyValue(dst *Vec, i int, src *Vec, j int) {
	switch dst.T {
	case types.Int, types.Timestamp, types.Interval:
		if src.T == types.Double {
			dst.I[i] = int64(src.F[j])
		} else {
			dst.I[i] = src.I[j]
		}
	case types.Double:
		if src.T == types.Double {
			dst.F[i] = src.F[j]
		} else {
			dst.F[i] = float64(src.I[j])
		}
	case types.Text:
		dst.S[i] = src.S[j]
	case types.Bool:
		dst.B[i] = src.B[j]
	}
}
