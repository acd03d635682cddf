package exec

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// vecOf builds a Vec of type t; nil values are NULL. Ints may be given as
// int or int64, timestamps as RFC 3339 text.
func vecOf(t types.Type, vals ...any) *Vec {
	v := newVec(t, len(vals))
	for i, x := range vals {
		if x == nil {
			v.ensureNull()[i] = true
			continue
		}
		switch y := x.(type) {
		case int:
			v.I[i] = int64(y)
		case int64:
			v.I[i] = y
		case float64:
			v.F[i] = y
		case string:
			if t == types.Timestamp {
				ms, err := ParseTimestamp(y)
				if err != nil {
					panic(err)
				}
				v.I[i] = ms
			} else {
				v.S[i] = y
			}
		case bool:
			v.B[i] = y
		}
	}
	return v
}

// lit is a constant of the type its Go value implies (nil: untyped NULL).
func lit(v any) *Literal {
	switch x := v.(type) {
	case nil:
		return &Literal{T: types.Unknown}
	case int:
		return &Literal{V: int64(x), T: types.Int}
	case int64:
		return &Literal{V: x, T: types.Int}
	case float64:
		return &Literal{V: x, T: types.Double}
	case string:
		return &Literal{V: x, T: types.Text}
	case bool:
		return &Literal{V: x, T: types.Bool}
	}
	panic(v)
}

func null(t types.Type) *Literal { return &Literal{T: t} }
func ivl(ms int64) *Literal      { return &Literal{V: ms, T: types.Interval} }
func tsLit(s string) *Literal {
	ms, err := ParseTimestamp(s)
	if err != nil {
		panic(err)
	}
	return &Literal{V: ms, T: types.Timestamp}
}

// c0, c1, c2 read the test batch's columns.
func c0(t types.Type) *ColRef { return &ColRef{Idx: 0, Name: "c0", T: t} }
func c1(t types.Type) *ColRef { return &ColRef{Idx: 1, Name: "c1", T: t} }

type evalCase struct {
	name string
	e    Expr
	in   []*Vec // the batch; nil: one row with no columns
	want []any  // one value per row (nil: NULL); time.Time for timestamps
	code string // expected SQLSTATE instead of a result
}

func runEval(t *testing.T, cases []evalCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := &Batch{N: 1, Cols: c.in}
			if len(c.in) > 0 {
				b.N = c.in[0].N
			}
			v, err := c.e.Eval(b)
			if c.code != "" {
				if err == nil {
					t.Fatalf("%s: want error %s, got %v", c.e, c.code, values(v))
				}
				var se *sql.Error
				if !errors.As(err, &se) || se.Code != c.code {
					t.Fatalf("%s: want SQLSTATE %s, got %v (%s)", c.e, c.code, err, sql.CodeOf(err))
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", c.e, err)
			}
			if v.N != b.N {
				t.Fatalf("%s: %d rows, want %d", c.e, v.N, b.N)
			}
			if v.T != c.e.Type() {
				t.Fatalf("%s: result type %s, expression type %s", c.e, v.T, c.e.Type())
			}
			got := values(v)
			if len(got) != len(c.want) {
				t.Fatalf("%s: got %v, want %v", c.e, got, c.want)
			}
			for i := range got {
				if !sameValue(got[i], c.want[i]) {
					t.Fatalf("%s: row %d: got %#v, want %#v (all: %v)", c.e, i, got[i], c.want[i], got)
				}
			}
		})
	}
}

func values(v *Vec) []any {
	if v == nil {
		return nil
	}
	out := make([]any, v.N)
	for i := range out {
		out[i] = v.Value(i)
	}
	return out
}

func sameValue(got, want any) bool {
	switch w := want.(type) {
	case int:
		want = int64(w)
	case float64:
		g, ok := got.(float64)
		if !ok {
			return false
		}
		if math.IsNaN(w) {
			return math.IsNaN(g)
		}
		return g == w && math.Signbit(g) == math.Signbit(w)
	case time.Time:
		g, ok := got.(time.Time)
		return ok && g.Equal(w)
	}
	return got == want
}

func ts(s string) time.Time {
	ms, err := ParseTimestamp(s)
	if err != nil {
		panic(err)
	}
	return types.MillisTime(ms)
}

const (
	maxI = int64(math.MaxInt64)
	minI = int64(math.MinInt64)
)

func ar(op byte, l, r Expr, t types.Type) *Arith { return &Arith{Op: op, L: l, R: r, T: t} }

func TestArithInt(t *testing.T) {
	I := types.Int
	runEval(t, []evalCase{
		{"add nulls", ar('+', c0(I), c1(I), I), []*Vec{vecOf(I, 1, nil, 3), vecOf(I, 2, 2, nil)}, []any{3, nil, nil}, ""},
		{"sub", ar('-', c0(I), c1(I), I), []*Vec{vecOf(I, 1, -5), vecOf(I, 2, -5)}, []any{-1, 0}, ""},
		{"mul", ar('*', c0(I), c1(I), I), []*Vec{vecOf(I, 6, -4, 0), vecOf(I, 7, 3, minI)}, []any{42, -12, 0}, ""},
		{"div truncates", ar('/', c0(I), c1(I), I), []*Vec{vecOf(I, 7, -7, 7, -7), vecOf(I, 2, 2, -2, -2)}, []any{3, -3, -3, 3}, ""},
		{"mod sign of dividend", ar('%', c0(I), c1(I), I), []*Vec{vecOf(I, 7, -7, 7, minI), vecOf(I, 3, 3, -3, -1)}, []any{1, -1, 1, 0}, ""},
		{"add overflow", ar('+', c0(I), lit(1), I), []*Vec{vecOf(I, maxI)}, nil, "22003"},
		{"sub overflow", ar('-', c0(I), lit(1), I), []*Vec{vecOf(I, minI)}, nil, "22003"},
		{"mul overflow", ar('*', c0(I), lit(2), I), []*Vec{vecOf(I, maxI/2+1)}, nil, "22003"},
		{"mul min by -1", ar('*', c0(I), lit(-1), I), []*Vec{vecOf(I, minI)}, nil, "22003"},
		{"mul -1 by min", ar('*', lit(-1), c0(I), I), []*Vec{vecOf(I, minI)}, nil, "22003"},
		{"div min by -1", ar('/', c0(I), lit(-1), I), []*Vec{vecOf(I, minI)}, nil, "22003"},
		{"div by zero", ar('/', c0(I), c1(I), I), []*Vec{vecOf(I, 1, 1), vecOf(I, 1, 0)}, nil, "22012"},
		{"mod by zero", ar('%', c0(I), lit(0), I), []*Vec{vecOf(I, 5)}, nil, "22012"},
		{"zero divisor in NULL row", ar('/', c0(I), c1(I), I), []*Vec{vecOf(I, 1, nil), vecOf(I, 1, 0)}, []any{1, nil}, ""},
		{"overflow in NULL row", ar('+', c0(I), c1(I), I), []*Vec{{T: I, N: 1, I: []int64{maxI}, Null: []bool{true}}, vecOf(I, 1)}, []any{nil}, ""},
		{"NULL literal", ar('+', c0(I), null(I), I), []*Vec{vecOf(I, 1, 2)}, []any{nil, nil}, ""},
		{"untyped NULL", ar('+', c0(I), lit(nil), I), []*Vec{vecOf(I, 1)}, []any{nil}, ""},
	})
}

func TestArithFloat(t *testing.T) {
	D, I := types.Double, types.Int
	nan, inf := math.NaN(), math.Inf(1)
	runEval(t, []evalCase{
		{"int promoted", ar('+', c0(D), c1(I), D), []*Vec{vecOf(D, 1.5, nil), vecOf(I, 2, 1)}, []any{3.5, nil}, ""},
		{"div", ar('/', c0(D), lit(4.0), D), []*Vec{vecOf(D, 1.0, -3.0)}, []any{0.25, -0.75}, ""},
		{"div by zero", ar('/', c0(D), lit(0.0), D), []*Vec{vecOf(D, 1.0)}, nil, "22012"},
		{"zero by zero", ar('/', c0(D), lit(0.0), D), []*Vec{vecOf(D, 0.0)}, nil, "22012"},
		{"NaN by zero is NaN", ar('/', c0(D), lit(0.0), D), []*Vec{vecOf(D, nan)}, []any{nan}, ""},
		{"div by zero in NULL row", ar('/', c0(D), c1(D), D), []*Vec{vecOf(D, 1.0, nil), vecOf(D, 2.0, 0.0)}, []any{0.5, nil}, ""},
		{"NaN propagates", ar('+', c0(D), lit(1.0), D), []*Vec{vecOf(D, nan)}, []any{nan}, ""},
		{"overflow", ar('*', c0(D), lit(10.0), D), []*Vec{vecOf(D, math.MaxFloat64)}, nil, "22003"},
		{"add overflow", ar('+', c0(D), c0(D), D), []*Vec{vecOf(D, math.MaxFloat64)}, nil, "22003"},
		{"infinity is no overflow", ar('+', c0(D), lit(1.0), D), []*Vec{vecOf(D, inf)}, []any{inf}, ""},
		{"underflow", ar('*', c0(D), c0(D), D), []*Vec{vecOf(D, 1e-300)}, nil, "22003"},
		{"mod", ar('%', c0(D), lit(2.0), D), []*Vec{vecOf(D, 5.5, -5.5)}, []any{1.5, -1.5}, ""},
		{"mod by zero", ar('%', c0(D), lit(0.0), D), []*Vec{vecOf(D, 5.5)}, nil, "22012"},
	})
}

func TestArithDateTime(t *testing.T) {
	TS, IV, I, D := types.Timestamp, types.Interval, types.Int, types.Double
	runEval(t, []evalCase{
		{"ts + interval", ar('+', c0(TS), ivl(3_600_000), TS), []*Vec{vecOf(TS, "2026-01-01T23:30:00Z", nil)}, []any{ts("2026-01-02T00:30:00Z"), nil}, ""},
		{"ts - interval", ar('-', c0(TS), ivl(1), TS), []*Vec{vecOf(TS, "2026-01-01T00:00:00Z")}, []any{ts("2025-12-31T23:59:59.999Z")}, ""},
		{"ts - ts", ar('-', c0(TS), tsLit("2026-01-01"), IV), []*Vec{vecOf(TS, "2026-01-02T01:00:00Z", "2025-12-31T00:00:00Z")}, []any{int64(90_000_000), int64(-86_400_000)}, ""},
		{"interval + interval", ar('+', ivl(1000), ivl(500), IV), nil, []any{int64(1500)}, ""},
		{"interval * int", ar('*', ivl(1000), lit(3), IV), nil, []any{int64(3000)}, ""},
		{"interval * double rounds", ar('*', ivl(1000), lit(0.0015), IV), nil, []any{int64(2)}, ""},
		{"interval / int", ar('/', ivl(1000), lit(3), IV), nil, []any{int64(333)}, ""},
		{"interval / zero", ar('/', ivl(1000), lit(0), IV), nil, nil, "22012"},
		{"interval / double zero", ar('/', ivl(1000), c0(D), IV), []*Vec{vecOf(D, 0.0)}, nil, "22012"},
		{"interval overflow", ar('*', ivl(maxI), lit(2), IV), nil, nil, "22008"},
		{"timestamp overflow", ar('+', c0(TS), ivl(1), TS), []*Vec{{T: TS, N: 1, I: []int64{maxI}}}, nil, "22008"},
		{"bigint times interval", ar('*', ivl(60_000), c0(I), IV), []*Vec{vecOf(I, 2, nil)}, []any{int64(120_000), nil}, ""},
	})
}

func cmp(op string, l, r Expr) *Compare { return &Compare{Op: op, L: l, R: r} }

func TestCompare(t *testing.T) {
	I, D, S, B := types.Int, types.Double, types.Text, types.Bool
	nan := math.NaN()
	ints := []*Vec{vecOf(I, 1, 2, 3, nil), vecOf(I, 2, 2, 2, 2)}
	runEval(t, []evalCase{
		{"=", cmp("=", c0(I), c1(I)), ints, []any{false, true, false, nil}, ""},
		{"<>", cmp("<>", c0(I), c1(I)), ints, []any{true, false, true, nil}, ""},
		{"<", cmp("<", c0(I), c1(I)), ints, []any{true, false, false, nil}, ""},
		{"<=", cmp("<=", c0(I), c1(I)), ints, []any{true, true, false, nil}, ""},
		{">", cmp(">", c0(I), c1(I)), ints, []any{false, false, true, nil}, ""},
		{">=", cmp(">=", c0(I), c1(I)), ints, []any{false, true, true, nil}, ""},
		{"int with double", cmp("=", c0(I), c1(D)), []*Vec{vecOf(I, 1, 1), vecOf(D, 1.0, 1.5)}, []any{true, false}, ""},
		{"NaN equals NaN", cmp("=", c0(D), lit(nan)), []*Vec{vecOf(D, nan, 1.0)}, []any{true, false}, ""},
		{"NaN above all", cmp(">", c0(D), lit(math.Inf(1))), []*Vec{vecOf(D, nan, 1.0)}, []any{true, false}, ""},
		{"negative zero", cmp("=", c0(D), lit(0.0)), []*Vec{vecOf(D, math.Copysign(0, -1))}, []any{true}, ""},
		{"text bytes", cmp("<", c0(S), c1(S)), []*Vec{vecOf(S, "", "a", "e", "B"), vecOf(S, "a", "", "é", "a")}, []any{true, false, true, true}, ""},
		{"empty strings", cmp("=", c0(S), lit("")), []*Vec{vecOf(S, "", " ", nil)}, []any{true, false, nil}, ""},
		{"bool order", cmp("<", c0(B), c1(B)), []*Vec{vecOf(B, false, true, true), vecOf(B, true, false, true)}, []any{true, false, false}, ""},
		{"untyped NULL", cmp("=", lit(nil), lit(nil)), nil, []any{nil}, ""},
	})
}

func TestLogicThreeValued(t *testing.T) {
	B := types.Bool
	// Every combination of true, false and NULL.
	l := vecOf(B, true, true, true, false, false, false, nil, nil, nil)
	r := vecOf(B, true, false, nil, true, false, nil, true, false, nil)
	in := []*Vec{l, r}
	runEval(t, []evalCase{
		{"AND", &Logic{And: true, L: c0(B), R: c1(B)}, in, []any{true, false, nil, false, false, false, nil, false, nil}, ""},
		{"OR", &Logic{L: c0(B), R: c1(B)}, in, []any{true, true, true, true, false, nil, true, nil, nil}, ""},
		{"NOT", &Not{X: c0(B)}, in, []any{false, false, false, true, true, true, nil, nil, nil}, ""},
		{"no nulls", &Logic{And: true, L: c0(B), R: c1(B)}, []*Vec{vecOf(B, true, false), vecOf(B, true, true)}, []any{true, false}, ""},
		{"untyped NULL", &Logic{And: true, L: lit(nil), R: c0(B)}, []*Vec{vecOf(B, true, false)}, []any{nil, false}, ""},
	})
}

func TestLogicSkipsDecidedRows(t *testing.T) {
	I, B := types.Int, types.Bool
	in := []*Vec{vecOf(I, 10, 5, nil), vecOf(I, 2, 0, 0)}
	div := cmp(">", ar('/', c0(I), c1(I), I), lit(1))
	runEval(t, []evalCase{
		// b <> 0 AND a / b > 1: the division never sees b = 0.
		{"AND", &Logic{And: true, L: cmp("<>", c1(I), lit(0)), R: div}, in, []any{true, false, false}, ""},
		{"OR", &Logic{L: cmp("=", c1(I), lit(0)), R: div}, in, []any{true, true, true}, ""},
		{"undecided rows still fail", &Logic{And: true, L: &IsNull{X: c0(I), Negate: true}, R: div}, in, nil, "22012"},
		{"bool column", &Logic{And: true, L: c0(B), R: c1(B)}, []*Vec{vecOf(B, true), vecOf(B, false)}, []any{false}, ""},
	})
}

func TestNegateAndIsNull(t *testing.T) {
	I, D, S := types.Int, types.Double, types.Text
	runEval(t, []evalCase{
		{"minus", &Not{X: c0(I), Neg: true}, []*Vec{vecOf(I, 5, nil, 0)}, []any{-5, nil, 0}, ""},
		{"minus min overflows", &Not{X: c0(I), Neg: true}, []*Vec{vecOf(I, minI)}, nil, "22003"},
		{"minus min in NULL row", &Not{X: c0(I), Neg: true}, []*Vec{{T: I, N: 1, I: []int64{minI}, Null: []bool{true}}}, []any{nil}, ""},
		{"minus double", &Not{X: c0(D), Neg: true}, []*Vec{vecOf(D, 0.0, math.NaN())}, []any{math.Copysign(0, -1), math.NaN()}, ""},
		{"minus interval", &Not{X: ivl(5), Neg: true}, nil, []any{int64(-5)}, ""},
		{"is null", &IsNull{X: c0(S)}, []*Vec{vecOf(S, "", nil)}, []any{false, true}, ""},
		{"is not null", &IsNull{X: c0(S), Negate: true}, []*Vec{vecOf(S, "", nil)}, []any{true, false}, ""},
		{"untyped NULL is null", &IsNull{X: lit(nil)}, nil, []any{true}, ""},
		{"no null mask", &IsNull{X: c0(I), Negate: true}, []*Vec{vecOf(I, 1)}, []any{true}, ""},
	})
}

func cast(x Expr, to types.Type) *Cast { return &Cast{X: x, To: to} }

func TestCast(t *testing.T) {
	I, D, S, B, TS, IV := types.Int, types.Double, types.Text, types.Bool, types.Timestamp, types.Interval
	runEval(t, []evalCase{
		{"text to int", cast(c0(S), I), []*Vec{vecOf(S, " 42 ", "-7", nil)}, []any{42, -7, nil}, ""},
		{"text to int: decimal", cast(c0(S), I), []*Vec{vecOf(S, "4.2")}, nil, "22P02"},
		{"text to int: empty", cast(c0(S), I), []*Vec{vecOf(S, "")}, nil, "22P02"},
		{"text to int: range", cast(c0(S), I), []*Vec{vecOf(S, "99999999999999999999")}, nil, "22003"},
		{"bad text in NULL row", cast(c0(S), I), []*Vec{{T: S, N: 1, S: []string{"x"}, Null: []bool{true}}}, []any{nil}, ""},
		{"text to double", cast(c0(S), D), []*Vec{vecOf(S, "1.5", "NaN", "-Infinity", "1e3")}, []any{1.5, math.NaN(), math.Inf(-1), 1000.0}, ""},
		{"text to double: junk", cast(c0(S), D), []*Vec{vecOf(S, "abc")}, nil, "22P02"},
		{"text to double: hex", cast(c0(S), D), []*Vec{vecOf(S, "0x10")}, nil, "22P02"},
		{"text to double: range", cast(c0(S), D), []*Vec{vecOf(S, "1e400")}, nil, "22003"},
		{"double to int rounds half even", cast(c0(D), I), []*Vec{vecOf(D, 2.5, 3.5, -2.5, 2.4, nil)}, []any{2, 4, -2, 2, nil}, ""},
		{"double to int: NaN", cast(c0(D), I), []*Vec{vecOf(D, math.NaN())}, nil, "22003"},
		{"double to int: range", cast(c0(D), I), []*Vec{vecOf(D, 1e19)}, nil, "22003"},
		{"int to double", cast(c0(I), D), []*Vec{vecOf(I, 3, nil)}, []any{3.0, nil}, ""},
		{"to text", cast(c0(D), S), []*Vec{vecOf(D, pointThree(), 1e20, math.NaN(), 1e-5, nil)}, []any{"0.30000000000000004", "1e+20", "NaN", "1e-05", nil}, ""},
		{"bool to text", cast(c0(B), S), []*Vec{vecOf(B, true, false)}, []any{"true", "false"}, ""},
		{"text to bool", cast(c0(S), B), []*Vec{vecOf(S, "yes", "f", " TRUE ")}, []any{true, false, true}, ""},
		{"text to bool: junk", cast(c0(S), B), []*Vec{vecOf(S, "maybe")}, nil, "22P02"},
		{"int to bool", cast(c0(I), B), []*Vec{vecOf(I, 0, 5)}, []any{false, true}, ""},
		{"bool to int", cast(c0(B), I), []*Vec{vecOf(B, false, true)}, []any{0, 1}, ""},
		{"bool to double refused", cast(c0(B), D), []*Vec{vecOf(B, true)}, nil, "42846"},
		{"text to timestamp", cast(c0(S), TS), []*Vec{vecOf(S, "2026-01-01 10:00:00", "2026-01-01T10:00:00.5Z")}, []any{ts("2026-01-01T10:00:00Z"), ts("2026-01-01T10:00:00.5Z")}, ""},
		{"text to timestamp: junk", cast(c0(S), TS), []*Vec{vecOf(S, "yesterday")}, nil, "22007"},
		{"timestamp to text", cast(c0(TS), S), []*Vec{vecOf(TS, "2026-01-01T10:00:00.25Z")}, []any{"2026-01-01 10:00:00.25"}, ""},
		{"timestamp to bigint", cast(c0(TS), I), []*Vec{vecOf(TS, "1970-01-01T00:00:01Z")}, []any{1000}, ""},
		{"text to interval", cast(c0(S), IV), []*Vec{vecOf(S, "1 day 02:00:00", "90 seconds", "-1.5 hours", "10")}, []any{int64(93_600_000), int64(90_000), int64(-5_400_000), int64(10_000)}, ""},
		{"text to interval: months", cast(c0(S), IV), []*Vec{vecOf(S, "1 month")}, nil, "22007"},
		{"interval to text", cast(ivl(-90_061_001), S), nil, []any{"-1 days -01:01:01.001"}, ""},
		{"untyped NULL", cast(lit(nil), I), nil, []any{nil}, ""},
		{"unicode text stays", cast(c0(S), S), []*Vec{vecOf(S, "ñandú")}, []any{"ñandú"}, ""},
	})
}

// pointThree is 0.1 + 0.2 in float64 arithmetic (a constant expression
// would be exact).
func pointThree() float64 {
	a, b := 0.1, 0.2
	return a + b
}

func call(name string, t types.Type, args ...Expr) *Call { return &Call{Name: name, Args: args, T: t} }

func TestConditionals(t *testing.T) {
	I, S, B := types.Int, types.Text, types.Bool
	in := []*Vec{vecOf(I, 5, 0, nil), vecOf(I, 1, 2, 3)}
	runEval(t, []evalCase{
		{"coalesce", call("COALESCE", I, c0(I), c1(I)), in, []any{5, 0, 3}, ""},
		{"coalesce all NULL", call("COALESCE", I, c0(I), null(I)), in, []any{5, 0, nil}, ""},
		// COALESCE(a, 1 / 0): the division runs only where a is NULL.
		{"coalesce is lazy", call("COALESCE", I, c0(I), ar('/', lit(1), c1(I), I)), []*Vec{vecOf(I, 1, nil), vecOf(I, 0, 1)}, []any{1, 1}, ""},
		{"coalesce still fails", call("COALESCE", I, c0(I), ar('/', lit(1), c1(I), I)), []*Vec{vecOf(I, nil), vecOf(I, 0)}, nil, "22012"},
		{"nullif", call("NULLIF", I, c0(I), lit(0)), in, []any{5, nil, nil}, ""},
		{"nullif NULL second", call("NULLIF", I, c0(I), null(I)), in, []any{5, 0, nil}, ""},
		{"nullif text", call("NULLIF", S, c0(S), lit("")), []*Vec{vecOf(S, "", "x")}, []any{nil, "x"}, ""},
		{"case", &Case{T: S, Whens: []When{{Cond: cmp(">", c0(I), lit(1)), Then: lit("big")}, {Cond: cmp("=", c0(I), lit(0)), Then: lit("zero")}}, Else: lit("null")}, in, []any{"big", "zero", "null"}, ""},
		{"case without else", &Case{T: S, Whens: []When{{Cond: cmp(">", c0(I), lit(1)), Then: lit("big")}}}, in, []any{"big", nil, nil}, ""},
		{"case NULL condition is not true", &Case{T: B, Whens: []When{{Cond: null(B), Then: lit(true)}}, Else: lit(false)}, in, []any{false, false, false}, ""},
		// CASE WHEN a = 0 THEN 0 ELSE 10 / a END never divides by zero.
		{"case is lazy", &Case{T: I, Whens: []When{{Cond: cmp("=", c0(I), lit(0)), Then: lit(0)}}, Else: ar('/', lit(10), c0(I), I)}, in, []any{2, 0, nil}, ""},
		{"case arm error", &Case{T: I, Whens: []When{{Cond: cmp("=", c0(I), lit(0)), Then: ar('/', lit(10), c0(I), I)}}}, in, nil, "22012"},
		{"case first match wins", &Case{T: I, Whens: []When{{Cond: lit(true), Then: lit(1)}, {Cond: lit(true), Then: lit(2)}}}, in, []any{1, 1, 1}, ""},
	})
}

func TestInList(t *testing.T) {
	I, D, S := types.Int, types.Double, types.Text
	in := []*Vec{vecOf(I, 1, 2, nil), vecOf(I, 2, nil, 2)}
	runEval(t, []evalCase{
		{"in", &InList{X: c0(I), List: []Expr{lit(1), lit(3)}}, in, []any{true, false, nil}, ""},
		{"not in", &InList{X: c0(I), List: []Expr{lit(1), lit(3)}, Not: true}, in, []any{false, true, nil}, ""},
		{"NULL item: no match is NULL", &InList{X: c0(I), List: []Expr{lit(1), null(I)}}, in, []any{true, nil, nil}, ""},
		{"not in with NULL item", &InList{X: c0(I), List: []Expr{lit(1), null(I)}, Not: true}, in, []any{false, nil, nil}, ""},
		{"column item", &InList{X: c0(I), List: []Expr{c1(I)}}, in, []any{false, nil, nil}, ""},
		{"NaN in list", &InList{X: c0(D), List: []Expr{lit(math.NaN())}}, []*Vec{vecOf(D, math.NaN(), 1.0)}, []any{true, false}, ""},
		{"text", &InList{X: c0(S), List: []Expr{lit(""), lit("ñ")}}, []*Vec{vecOf(S, "", "ñ", "n")}, []any{true, true, false}, ""},
	})
}

func TestStringFunctions(t *testing.T) {
	I, S, D, B := types.Int, types.Text, types.Double, types.Bool
	s := []*Vec{vecOf(S, "Hello", "", "ñandú", nil)}
	runEval(t, []evalCase{
		{"lower", call("LOWER", S, c0(S)), []*Vec{vecOf(S, "HeLLo", "", "ÑANDÚ", nil)}, []any{"hello", "", "ñandú", nil}, ""},
		{"upper", call("UPPER", S, c0(S)), s, []any{"HELLO", "", "ÑANDÚ", nil}, ""},
		{"length counts characters", call("LENGTH", I, c0(S)), s, []any{5, 0, 5, nil}, ""},
		{"octet_length", call("OCTET_LENGTH", I, c0(S)), s, []any{5, 0, 7, nil}, ""},
		// A boolean prints as t, its output function, as PostgreSQL's concat does (a cast to text is true).
		{"concat skips NULL", call("CONCAT", S, c0(S), null(S), lit(1), lit(2.5), lit(true)), s, []any{"Hello12.5t", "12.5t", "ñandú12.5t", "12.5t"}, ""},
		{"concat one", call("CONCAT", S, c0(S)), s, []any{"Hello", "", "ñandú", ""}, ""},
		{"|| NULL is NULL", call("||", S, c0(S), lit("!")), s, []any{"Hello!", "!", "ñandú!", nil}, ""},
		{"replace", call("REPLACE", S, c0(S), lit("l"), lit("L")), s, []any{"HeLLo", "", "ñandú", nil}, ""},
		{"strpos", call("STRPOS", I, c0(S), lit("dú")), s, []any{0, 0, 4, nil}, ""},
		{"position", call("POSITION", I, lit(""), c0(S)), s, []any{1, 1, 1, nil}, ""},
		{"trim", call("BTRIM", S, c0(S)), []*Vec{vecOf(S, "  a b  ", "\ta ", "")}, []any{"a b", "\ta", ""}, ""},
		{"trim chars", call("BTRIM", S, c0(S), lit("xy")), []*Vec{vecOf(S, "xyaxyx", "xx", "ñañ")}, []any{"a", "", "ñañ"}, ""},
		{"trim unicode chars", call("BTRIM", S, c0(S), lit("ñ")), []*Vec{vecOf(S, "ñañ")}, []any{"a"}, ""},
		{"ltrim", call("LTRIM", S, c0(S), lit("x")), []*Vec{vecOf(S, "xxaxx")}, []any{"axx"}, ""},
		{"rtrim", call("RTRIM", S, c0(S), lit("x")), []*Vec{vecOf(S, "xxaxx")}, []any{"xxa"}, ""},
		{"trim NULL chars", call("BTRIM", S, c0(S), null(S)), []*Vec{vecOf(S, "xa")}, []any{nil}, ""},
		{"abs", call("ABS", I, c0(I)), []*Vec{vecOf(I, -3, 3, nil)}, []any{3, 3, nil}, ""},
		{"abs overflow", call("ABS", I, c0(I)), []*Vec{vecOf(I, minI)}, nil, "22003"},
		{"abs double", call("ABS", D, c0(D)), []*Vec{vecOf(D, -1.5, math.Copysign(0, -1))}, []any{1.5, 0.0}, ""},
		{"untyped NULL argument", call("UPPER", S, lit(nil)), nil, []any{nil}, ""},
		{"bool arg", call("CONCAT", S, c0(B)), []*Vec{vecOf(B, nil)}, []any{""}, ""},
	})
}

func TestSubstring(t *testing.T) {
	S := types.Text
	cases := []struct {
		s          string
		from, size int64 // size -1: no length argument
		want       string
	}{
		{"hello", 2, -1, "ello"},
		{"hello", 0, -1, "hello"},
		{"hello", -5, -1, "hello"},
		{"hello", 10, -1, ""},
		{"hello", 2, 2, "el"},
		{"hello", 0, 2, "h"},
		{"hello", -1, 3, "h"},
		{"hello", -3, 3, ""},
		{"hello", 1, 0, ""},
		{"hello", 4, 100, "lo"},
		{"hello", 2, maxI, "ello"},
		{"hello", minI, maxI, ""},
		{"ñandú", 2, 3, "and"},
		{"ñandú", 5, 1, "ú"},
		{"", 1, 1, ""},
	}
	var ec []evalCase
	for _, c := range cases {
		args := []Expr{lit(c.s), lit(c.from)}
		if c.size >= 0 {
			args = append(args, lit(c.size))
		}
		ec = append(ec, evalCase{c.s, call("SUBSTRING", S, args...), nil, []any{c.want}, ""})
	}
	ec = append(ec,
		evalCase{"negative length", call("SUBSTRING", S, lit("hello"), lit(1), lit(-1)), nil, nil, "22011"},
		evalCase{"negative length in NULL row", call("SUBSTRING", S, c0(S), lit(1), lit(-1)), []*Vec{vecOf(S, nil)}, []any{nil}, ""},
		evalCase{"NULL start", call("SUBSTRING", S, lit("hello"), null(types.Int)), nil, []any{nil}, ""},
	)
	runEval(t, ec)
}

func TestRounding(t *testing.T) {
	I, D := types.Int, types.Double
	negZero := math.Copysign(0, -1)
	runEval(t, []evalCase{
		// ROUND(double) is PostgreSQL's rint: half to even.
		{"round half even", call("ROUND", D, c0(D)), []*Vec{vecOf(D, 2.5, 3.5, -2.5, -0.5, 0.49, nil)}, []any{2.0, 4.0, -2.0, negZero, 0.0, nil}, ""},
		// ROUND(double, n) rounds the decimal form half away from zero.
		{"round places", call("ROUND", D, c0(D), lit(2)), []*Vec{vecOf(D, 2.675, -2.675, 1.005, 0.125, 1.0/3, math.NaN(), math.Inf(1))}, []any{2.68, -2.68, 1.01, 0.13, 0.33, math.NaN(), math.Inf(1)}, ""},
		{"round zero places", call("ROUND", D, c0(D), lit(0)), []*Vec{vecOf(D, 0.5, -0.5, 2.5, 99.5)}, []any{1.0, -1.0, 3.0, 100.0}, ""},
		{"round negative places", call("ROUND", D, c0(D), lit(-2)), []*Vec{vecOf(D, 1234.5, 1250.0, -1250.0, 49.0)}, []any{1200.0, 1300.0, -1300.0, 0.0}, ""},
		{"round far places", call("ROUND", D, c0(D), c1(I)), []*Vec{vecOf(D, 1.5, 1.5, 123.0), vecOf(I, minI, maxI, -3)}, []any{0.0, 1.5, 0.0}, ""},
		{"round bigint", call("ROUND", I, c0(I)), []*Vec{vecOf(I, 7, nil)}, []any{7, nil}, ""},
		{"round bigint places", call("ROUND", I, c0(I), lit(-2)), []*Vec{vecOf(I, 1250, -1250, 1249, 49)}, []any{1300, -1300, 1200, 0}, ""},
		{"round bigint far", call("ROUND", I, c0(I), lit(-19)), []*Vec{vecOf(I, maxI)}, []any{0}, ""},
		{"round bigint overflow", call("ROUND", I, c0(I), lit(-1)), []*Vec{vecOf(I, maxI)}, nil, "22003"},
		{"floor", call("FLOOR", D, c0(D)), []*Vec{vecOf(D, 1.5, -1.5, nil)}, []any{1.0, -2.0, nil}, ""},
		{"ceil", call("CEIL", D, c0(D)), []*Vec{vecOf(D, 1.5, -1.5, -0.5)}, []any{2.0, -1.0, negZero}, ""},
		{"floor bigint", call("FLOOR", I, c0(I)), []*Vec{vecOf(I, -3)}, []any{-3}, ""},
	})
}

func TestLike(t *testing.T) {
	cases := []struct {
		s, p string
		want bool
	}{
		{"abc", "abc", true},
		{"abc", "ab", false},
		{"abc", "a%", true},
		{"abc", "%c", true},
		{"abc", "%b%", true},
		{"abc", "a_c", true},
		{"abc", "_", false},
		{"abc", "___", true},
		{"abc", "%%%", true},
		{"", "%", true},
		{"", "_", false},
		{"", "", true},
		{"ñ", "_", true},
		{"ñandú", "_and_", true},
		{"ñandú", "%dú", true},
		{"a%b", `a\%b`, true},
		{"axb", `a\%b`, false},
		{"a_b", `a\_b`, true},
		{"axb", `a\_b`, false},
		{`a\b`, `a\\b`, true},
		{"abcabc", "%bc%bc", true},
		{"abcab", "%b_a%", true},
		{"aXb", "ax_", false},
		{"mississippi", "%iss%ipp%", true},
		{"mississippi", "m%i_s%p_", true},
		{"mississippi", "m%s_s%", true},
		{"mississippi", "%ss%ss%ss%", false},
		{"abab", "%ab", true},
		{"aab", "a%ab", true},
		{"ab", "a%ab", false},
		{"abc", "%a%b%c%", true},
		{"acb", "%a%b%c%", false},
	}
	var ec []evalCase
	for _, c := range cases {
		l, err := NewLike(c0(types.Text), lit(c.p), '\\', false, false)
		if err != nil {
			t.Fatalf("%q: %v", c.p, err)
		}
		ec = append(ec, evalCase{c.s + " LIKE " + c.p, l, []*Vec{vecOf(types.Text, c.s)}, []any{c.want}, ""})
		// The same pattern from a column takes the per-row path.
		ec = append(ec, evalCase{c.s + " LIKE column " + c.p, &Like{X: c0(types.Text), Pattern: c1(types.Text), Escape: '\\'},
			[]*Vec{vecOf(types.Text, c.s), vecOf(types.Text, c.p)}, []any{c.want}, ""})
	}
	S := types.Text
	must := func(l *Like, err error) *Like {
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ec = append(ec,
		evalCase{"NOT LIKE keeps NULL", must(NewLike(c0(S), lit("a%"), '\\', true, false)), []*Vec{vecOf(S, "ab", "b", nil)}, []any{false, true, nil}, ""},
		evalCase{"ILIKE", must(NewLike(c0(S), lit("ÑA%"), '\\', false, true)), []*Vec{vecOf(S, "ñandú", "Nandu")}, []any{true, false}, ""},
		evalCase{"ESCAPE #", must(NewLike(c0(S), lit("10#%"), '#', false, false)), []*Vec{vecOf(S, "10%", "100")}, []any{true, false}, ""},
		evalCase{"no escape", must(NewLike(c0(S), lit(`a\%`), 0, false, false)), []*Vec{vecOf(S, `a\bc`, "a%")}, []any{true, false}, ""},
		evalCase{"NULL pattern", &Like{X: c0(S), Pattern: c1(S), Escape: '\\'}, []*Vec{vecOf(S, "a"), vecOf(S, nil)}, []any{nil}, ""},
		evalCase{"bad pattern in column", &Like{X: c0(S), Pattern: c1(S), Escape: '\\'}, []*Vec{vecOf(S, "a"), vecOf(S, `a\`)}, nil, "22025"},
	)
	runEval(t, ec)
	if _, err := NewLike(c0(S), lit(`abc\`), '\\', false, false); sql.CodeOf(err) != "22025" {
		t.Fatalf("pattern ending in the escape: got %v", err)
	}
}

func TestFormatInterval(t *testing.T) {
	cases := []struct {
		ms   int64
		want string
	}{
		{0, "00:00:00"},
		{1500, "00:00:01.5"},
		{-1500, "-00:00:01.5"},
		{60_000, "00:01:00"},
		{86_400_000, "1 day"},
		{2 * 86_400_000, "2 days"},
		{-86_400_000, "-1 days"},
		{90_061_001, "1 day 01:01:01.001"},
		{-90_061_001, "-1 days -01:01:01.001"},
		{100 * 3_600_000, "4 days 04:00:00"},
		{10, "00:00:00.01"},
	}
	for _, c := range cases {
		if got := FormatInterval(c.ms); got != c.want {
			t.Errorf("FormatInterval(%d) = %q, want %q", c.ms, got, c.want)
		}
	}
	_ = FormatInterval(minI) // must not panic
	_ = FormatInterval(maxI)
}

// TestGatherScatter checks the helpers conditional evaluation is built on.
func TestGatherScatter(t *testing.T) {
	v := vecOf(types.Text, "a", nil, "c", "d")
	sel := []bool{true, true, false, true}
	g := v.gather(sel, 3)
	if got := values(g); got[0] != "a" || got[1] != nil || got[2] != "d" {
		t.Fatalf("gather: %v", got)
	}
	s := g.scatter(sel, 4)
	if got := values(s); got[0] != "a" || got[1] != nil || got[2] != nil || got[3] != "d" {
		t.Fatalf("scatter: %v", got)
	}
}
