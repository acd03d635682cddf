package exec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// Cast converts X to type To, with PostgreSQL's rules: text is parsed (a bad
// value is 22P02, 22007 for timestamps and intervals), DOUBLE to BIGINT
// rounds half to even as PostgreSQL's float8-to-int8 does, anything prints
// as text. Beyond PostgreSQL, TIMESTAMP and INTERVAL convert to and from
// BIGINT as milliseconds (epoch milliseconds for a TIMESTAMP).
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
	return castVec(x, c.To)
}

// CanCast reports whether a value of type from can be cast to type to.
func CanCast(from, to types.Type) bool {
	if from == to || from == types.Unknown || to == types.Text || from == types.Text {
		return to != types.Unknown
	}
	switch to {
	case types.Int:
		return from == types.Double || from == types.Bool || from == types.Timestamp || from == types.Interval
	case types.Double:
		return from == types.Int
	case types.Bool:
		return from == types.Int
	case types.Timestamp, types.Interval:
		return from == types.Int
	}
	return false
}

// castVec converts x to type to, one typed loop per (from, to) pair.
func castVec(x *Vec, to types.Type) (*Vec, error) {
	if x.T == to {
		return x, nil
	}
	if !x.typed() {
		return allNull(to, x.N), nil
	}
	if !CanCast(x.T, to) {
		return nil, sql.Errorf("42846", "cannot cast type %s to %s", PGName(x.T), PGName(to))
	}
	n := x.N
	out := newVec(to, n)
	out.Null = x.copyNulls()
	null := x.Null
	switch to {
	case types.Text:
		formatVec(x, out.S)
	case types.Int:
		switch x.T {
		case types.Double:
			for i, f := range x.F {
				if null != nil && null[i] {
					continue
				}
				f = math.RoundToEven(f)
				if math.IsNaN(f) || f >= 9.223372036854775807e18 || f < -9.223372036854775808e18 {
					return nil, bigintRange()
				}
				out.I[i] = int64(f)
			}
		case types.Bool:
			for i, v := range x.B {
				if v {
					out.I[i] = 1
				}
			}
		case types.Text:
			for i, s := range x.S {
				if null != nil && null[i] {
					continue
				}
				v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
				if err != nil {
					if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
						return nil, sql.Errorf("22003", "value %q is out of range for type bigint", s)
					}
					return nil, sql.Errorf("22P02", "invalid input syntax for type bigint: %q", s)
				}
				out.I[i] = v
			}
		default: // TIMESTAMP, INTERVAL: milliseconds
			copy(out.I, x.I)
		}
	case types.Double:
		switch x.T {
		case types.Int:
			for i, v := range x.I {
				out.F[i] = float64(v)
			}
		case types.Text:
			for i, s := range x.S {
				if null != nil && null[i] {
					continue
				}
				f, err := ParseFloat(s)
				if err != nil {
					if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
						return nil, sql.Errorf("22003", "%q is out of range for type double precision", s)
					}
					return nil, sql.Errorf("22P02", "invalid input syntax for type double precision: %q", s)
				}
				out.F[i] = f
			}
		}
	case types.Bool:
		switch x.T {
		case types.Int:
			for i, v := range x.I {
				out.B[i] = v != 0
			}
		case types.Text:
			for i, s := range x.S {
				if null != nil && null[i] {
					continue
				}
				v, ok := ParseBool(s)
				if !ok {
					return nil, sql.Errorf("22P02", "invalid input syntax for type boolean: %q", s)
				}
				out.B[i] = v
			}
		}
	case types.Timestamp:
		switch x.T {
		case types.Int:
			copy(out.I, x.I)
		case types.Text:
			for i, s := range x.S {
				if null != nil && null[i] {
					continue
				}
				ms, err := ParseTimestamp(s)
				if err != nil {
					return nil, sql.Errorf("22007", "invalid input syntax for type timestamp: %q", s)
				}
				out.I[i] = ms
			}
		}
	case types.Interval:
		switch x.T {
		case types.Int:
			copy(out.I, x.I)
		case types.Text:
			for i, s := range x.S {
				if null != nil && null[i] {
					continue
				}
				ms, err := sql.ParseIntervalText(s)
				if err != nil {
					return nil, sql.Errorf("22007", "invalid input syntax for type interval: %q", s).WithHint("%v", err)
				}
				out.I[i] = ms
			}
		}
	}
	return out, nil
}

// formatVec prints every row of x as PostgreSQL's text output would.
func formatVec(x *Vec, out []string) {
	switch x.T {
	case types.Text:
		copy(out, x.S)
	case types.Int:
		for i, v := range x.I {
			out[i] = strconv.FormatInt(v, 10)
		}
	case types.Double:
		for i, v := range x.F {
			out[i] = FormatFloat(v)
		}
	case types.Bool:
		for i, v := range x.B {
			if v {
				out[i] = "true"
			} else {
				out[i] = "false"
			}
		}
	case types.Timestamp:
		for i, v := range x.I {
			out[i] = FormatTimestamp(types.MillisTime(v))
		}
	case types.Interval:
		for i, v := range x.I {
			out[i] = FormatInterval(v)
		}
	}
}

// ParseFloat reads a DOUBLE as PostgreSQL does, including NaN and Infinity.
func ParseFloat(s string) (float64, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "nan":
		return math.NaN(), nil
	case "infinity", "+infinity", "inf", "+inf":
		return math.Inf(1), nil
	case "-infinity", "-inf":
		return math.Inf(-1), nil
	}
	for k := 0; k < len(s); k++ {
		// Go also reads hex floats, underscores and "Inf" spellings PostgreSQL
		// refuses.
		if c := s[k]; c == '_' || c == 'x' || c == 'X' || c == 'p' || c == 'P' || c == 'i' || c == 'I' || c == 'n' || c == 'N' {
			return 0, &strconv.NumError{Func: "ParseFloat", Num: s, Err: strconv.ErrSyntax}
		}
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

// Call is a scalar function over already-typed arguments (the planner
// checks argument types and casts them; see Arity for the functions).
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
	if c.Name == "||" && len(parts) == 2 {
		return "(" + parts[0] + " || " + parts[1] + ")"
	}
	return c.Name + "(" + strings.Join(parts, ", ") + ")"
}

// scalarArity is the minimum and maximum argument count of each function
// Call implements (max -1: variadic). "||" is the concatenation operator,
// which unlike CONCAT() is NULL when either side is.
var scalarArity = map[string][2]int{
	"COALESCE": {1, -1}, "CONCAT": {1, -1}, "||": {2, 2}, "NULLIF": {2, 2},
	"LOWER": {1, 1}, "UPPER": {1, 1}, "LENGTH": {1, 1}, "CHAR_LENGTH": {1, 1}, "CHARACTER_LENGTH": {1, 1},
	"OCTET_LENGTH": {1, 1}, "SUBSTRING": {2, 3}, "SUBSTR": {2, 3},
	"TRIM": {1, 2}, "BTRIM": {1, 2}, "LTRIM": {1, 2}, "RTRIM": {1, 2},
	"REPLACE": {3, 3}, "STRPOS": {2, 2}, "POSITION": {2, 2},
	"ABS": {1, 1}, "ROUND": {1, 2}, "FLOOR": {1, 1}, "CEIL": {1, 1}, "CEILING": {1, 1},
}

// ScalarFuncs lists the functions Call implements, with their arity
// (-1: a variable number of arguments; Arity gives the bounds).
var ScalarFuncs = func() map[string]int {
	m := make(map[string]int, len(scalarArity))
	for name, a := range scalarArity {
		if a[0] == a[1] {
			m[name] = a[0]
		} else {
			m[name] = -1
		}
	}
	return m
}()

// Arity returns the least and most arguments function name takes (most is
// -1 when unbounded); ok is false for an unknown function.
// FuncNames lists the scalar functions, upper case (for a hint naming the
// closest one).
func FuncNames() []string {
	out := make([]string, 0, len(scalarArity)+len(builtins))
	for n := range scalarArity {
		out = append(out, n)
	}
	for n := range builtins {
		if n[0] >= 'A' && n[0] <= 'Z' && !strings.Contains(n, " ") {
			out = append(out, n)
		}
	}
	return out
}

func Arity(name string) (least, most int, ok bool) {
	if a, ok := scalarArity[name]; ok {
		return a[0], a[1], true
	}
	b, ok := builtins[name]
	if !ok {
		return 0, 0, false
	}
	least = math.MaxInt
	for _, s := range b.sigs {
		least = min(least, len(s.Args))
		switch {
		case s.Variadic:
			most = -1
		case most >= 0:
			most = max(most, len(s.Args))
		}
	}
	return least, most, true
}

func (c *Call) Eval(b *Batch) (*Vec, error) {
	if c.Name == "COALESCE" {
		return c.coalesce(b)
	}
	if c.Name == "RANDOM" {
		// A value per row in [0, 1); only bounded queries plan it (a
		// stream's replay must recompute the same output).
		out := newVec(types.Double, b.N)
		for i := range out.F {
			out.F[i] = rand.Float64()
		}
		return out, nil
	}
	args, err := evalAll(b, c.Args)
	if err != nil {
		return nil, err
	}
	if bi, ok := builtins[c.Name]; ok {
		return evalBuiltin(bi, c.T, args, b.N)
	}
	if c.Name == "CONCAT" { // NULL arguments are skipped, as in PostgreSQL's concat()
		return concat(args, b.N)
	}
	// Every other function is strict: NULL in any argument gives NULL.
	for _, a := range args {
		if !a.typed() {
			return allNull(c.T, b.N), nil
		}
	}
	out := newVec(c.T, b.N)
	out.Null = args[0].copyNulls()
	for _, a := range args[1:] {
		if a.Null != nil {
			out.Null = orNulls(out.Null, a.Null, b.N)
		}
	}
	switch c.Name {
	case "||":
		if err = wantTypes(c.Name, args, types.Text, types.Text); err == nil {
			l, r := args[0].S, args[1].S
			for i := range out.S {
				out.S[i] = l[i] + r[i]
			}
		}
	case "NULLIF":
		err = nullif(out, args[0], args[1])
	case "LOWER", "UPPER", "LENGTH", "CHAR_LENGTH", "CHARACTER_LENGTH", "OCTET_LENGTH":
		if err = wantTypes(c.Name, args, types.Text); err == nil {
			textFunc(c.Name, args[0].S, out)
		}
	case "SUBSTRING", "SUBSTR":
		err = substring(out, args)
	case "TRIM", "BTRIM", "LTRIM", "RTRIM":
		err = trim(c.Name, out, args)
	case "REPLACE":
		if err = wantTypes(c.Name, args, types.Text, types.Text, types.Text); err == nil {
			for i, s := range args[0].S {
				out.S[i] = strings.ReplaceAll(s, args[1].S[i], args[2].S[i])
			}
		}
	case "STRPOS", "POSITION":
		if err = wantTypes(c.Name, args, types.Text, types.Text); err == nil {
			s, sub := args[0].S, args[1].S
			if c.Name == "POSITION" { // POSITION(sub IN s)
				s, sub = sub, s
			}
			for i := range out.I {
				out.I[i] = strpos(s[i], sub[i])
			}
		}
	case "ABS", "ROUND", "FLOOR", "CEIL", "CEILING":
		err = mathFunc(c.Name, out, args)
	default:
		err = sql.Errorf(sql.CodeUndefinedFunc, "function %s does not exist", strings.ToLower(c.Name))
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// wantTypes checks argument types; the planner guarantees them, so a
// mismatch is an internal error, never a panic.
func wantTypes(name string, args []*Vec, ts ...types.Type) error {
	for i, t := range ts {
		if i < len(args) && args[i].T != t {
			return sql.Errorf(sql.CodeUndefinedFunc, "function %s: argument %d is %s, not %s", strings.ToLower(name), i+1, PGName(args[i].T), PGName(t))
		}
	}
	return nil
}

// coalesce returns the first non-NULL argument, evaluating each argument
// only on the rows still NULL, as PostgreSQL does.
func (c *Call) coalesce(b *Batch) (*Vec, error) {
	out := allNull(c.T, b.N)
	rem := make([]bool, b.N)
	for i := range rem {
		rem[i] = true
	}
	k := b.N
	take := make([]bool, b.N)
	for _, a := range c.Args {
		if k == 0 {
			break
		}
		v, err := evalOn(a, b, rem, k)
		if err != nil {
			return nil, err
		}
		if !v.typed() {
			continue
		}
		if v, err = conform(v, c.T); err != nil {
			return nil, err
		}
		nt := 0
		for i, r := range rem {
			t := r && !v.IsNull(i)
			take[i] = t
			if t {
				rem[i] = false
				nt++
			}
		}
		if nt > 0 {
			out.mergeFrom(v, take)
			k -= nt
		}
	}
	return out, nil
}

// concat is CONCAT(...): arguments as text, NULLs skipped; never NULL.
func concat(args []*Vec, n int) (*Vec, error) {
	out := newVec(types.Text, n)
	var sb strings.Builder
	all, err := outputTexts(args)
	if err != nil {
		return nil, err
	}
	texts := make([]*Vec, 0, len(args))
	for _, t := range all {
		if t != nil {
			texts = append(texts, t)
		}
	}
	if len(texts) == 1 && texts[0].Null == nil {
		copy(out.S, texts[0].S)
		return out, nil
	}
	for i := range out.S {
		sb.Reset()
		for _, t := range texts {
			if t.Null == nil || !t.Null[i] {
				sb.WriteString(t.S[i])
			}
		}
		out.S[i] = sb.String()
	}
	return out, nil
}

// nullif is NULLIF(a, b): NULL where a = b, else a.
func nullif(out, a, b *Vec) error {
	if a.T != b.T && !(a.T.Numeric() && b.T.Numeric()) {
		return cmpTypeError(a.T, b.T)
	}
	eq := make([]bool, a.N)
	switch {
	case a.T == types.Text && b.T == types.Text:
		cmpOrdered("=", a.S, b.S, eq)
	case a.T == types.Bool && b.T == types.Bool:
		cmpBool("=", a.B, b.B, eq)
	case a.T == types.Double || b.T == types.Double:
		cmpFloat("=", asFloat(a), asFloat(b), eq)
	default:
		cmpOrdered("=", a.I, b.I, eq)
	}
	v, err := conform(a, out.T)
	if err != nil {
		return err
	}
	out.Null = v.copyNulls()
	if out.Null == nil {
		out.Null = make([]bool, a.N)
	}
	for i, e := range eq {
		if e && !b.IsNull(i) {
			out.Null[i] = true
		}
	}
	switch out.T {
	case types.Int, types.Timestamp, types.Interval:
		copy(out.I, v.I)
	case types.Double:
		copy(out.F, v.F)
	case types.Text:
		copy(out.S, v.S)
	case types.Bool:
		copy(out.B, v.B)
	}
	return nil
}
