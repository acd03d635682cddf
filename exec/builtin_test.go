package exec

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// TestFunctionsDocumented: every function of the library has a line in
// docs/functions.md, so the reference cannot fall behind the code.
func TestFunctionsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/functions.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	for _, f := range Signatures() {
		if strings.ContainsAny(f.Name, " ~") { // operators: ~, IS DISTINCT FROM
			continue
		}
		if !strings.Contains(text, "`"+f.Name+"(") && !strings.Contains(text, "`"+f.Name+"`") && !strings.Contains(text, " `"+f.Name) {
			t.Errorf("function %s is not in docs/functions.md", f.Name)
		}
	}
}

// TestLibraryKernels: the library's kernels over columns, with values
// PostgreSQL 15 gives: per-row arguments (a format or pattern that changes
// from row to row), NULL rows that would fail were they read (a NULL
// divisor of zero, a NULL negative square root), timestamps before 1970.
func TestLibraryKernels(t *testing.T) {
	I, S, D, T, B := types.Int, types.Text, types.Double, types.Timestamp, types.Bool
	ts := func(s string) time.Time {
		ms, err := ParseTimestamp(s)
		if err != nil {
			panic(err)
		}
		return types.MillisTime(ms)
	}
	before1970 := []*Vec{vecOf(T, "1969-12-31T23:59:59.5Z", "1900-02-28T12:34:56.789Z", nil)}
	// A NULL row holding a value that would fail: its null mask must win.
	nullNeg := vecOf(D, 4.0, -1.0)
	nullNeg.ensureNull()[1] = true
	zeroNull := vecOf(I, 2, 0)
	zeroNull.ensureNull()[1] = true
	runEval(t, []evalCase{
		{"date_trunc before 1970", call("DATE_TRUNC", T, lit("hour"), c0(T)), before1970,
			[]any{ts("1969-12-31T23:00:00Z"), ts("1900-02-28T12:00:00Z"), nil}, ""},
		{"date_trunc week", call("DATE_TRUNC", T, lit("week"), c0(T)), before1970,
			[]any{ts("1969-12-29T00:00:00Z"), ts("1900-02-26T00:00:00Z"), nil}, ""},
		{"date_trunc per-row unit", call("DATE_TRUNC", T, c1(S), c0(T)), []*Vec{vecOf(T, "2024-03-15T13:45:30Z", "2024-03-15T13:45:30Z"), vecOf(S, "MONTH", "minutes")},
			[]any{ts("2024-03-01T00:00:00Z"), ts("2024-03-15T13:45:00Z")}, ""},
		{"date_trunc unknown unit", call("DATE_TRUNC", T, lit("fortnight"), c0(T)), before1970, nil, sql.CodeInvalidParameter},
		{"date_part second before 1970", call("DATE_PART", D, lit("second"), c0(T)), before1970, []any{59.5, 56.789, nil}, ""},
		{"date_part epoch before 1970", call("DATE_PART", D, lit("epoch"), c0(T)), before1970, []any{-0.5, -2203932303.211, nil}, ""},
		{"date_part dow, doy, isoyear", call("DATE_PART", D, c1(S), c0(T)),
			[]*Vec{vecOf(T, "2021-01-03T00:00:00Z", "2024-12-31T00:00:00Z", "2021-01-01T00:00:00Z"), vecOf(S, "dow", "doy", "isoyear")}, []any{0.0, 366.0, 2020.0}, ""},
		{"date_part of an interval", call("DATE_PART", D, lit("hour"), ivl(93_784_000)), nil, []any{2.0}, ""},
		{"date_part timezone of a timestamp", call("DATE_PART", D, lit("timezone"), c0(T)), before1970, nil, sql.CodeNotSupported},
		{"to_char per-row format", call("TO_CHAR", S, c0(T), c1(S)),
			[]*Vec{vecOf(T, "2024-03-05T03:04:05.006Z", "2024-03-05T15:04:05Z"), vecOf(S, "FMDD/FMMM HH12:MI:SS.MS am", "Day DDth IW")},
			[]any{"5/3 03:04:05.006 am", "Tuesday   05th 10"}, ""},
		{"to_timestamp text", call("TO_TIMESTAMP", T, c0(S), lit("DD Mon YYYY HH24:MI:SS.MS")), []*Vec{vecOf(S, "05 mar 2024 13:04:05.5", "31 Dec 1969 23:59:59.999", nil)},
			[]any{ts("2024-03-05T13:04:05.5Z"), ts("1969-12-31T23:59:59.999Z"), nil}, ""},
		{"to_timestamp bad month", call("TO_TIMESTAMP", T, lit("2024-13-01"), lit("YYYY-MM-DD")), nil, nil, sql.CodeDatetimeOutOfRange},
		{"to_timestamp seconds", call("TO_TIMESTAMP", T, c0(D)), []*Vec{vecOf(D, -0.25, 1710510330.5, nil)},
			[]any{ts("1969-12-31T23:59:59.75Z"), ts("2024-03-15T13:45:30.5Z"), nil}, ""},
		{"date_bin before the origin", call("DATE_BIN", T, ivl(600_000), c0(T), tsLit("2000-01-01 00:00:00")), before1970,
			[]any{ts("1969-12-31T23:50:00Z"), ts("1900-02-28T12:30:00Z"), nil}, ""},
		{"sqrt skips a NULL row", call("SQRT", D, c0(D)), []*Vec{nullNeg}, []any{2.0, nil}, ""},
		{"sqrt of a negative", call("SQRT", D, lit(-1.0)), nil, nil, sql.CodeInvalidArgPower},
		{"mod skips a NULL zero", call("MOD", I, lit(7), c0(I)), []*Vec{zeroNull}, []any{int64(1), nil}, ""},
		{"div by zero", call("DIV", I, lit(7), lit(0)), nil, nil, sql.CodeDivisionByZero},
		{"ln of zero", call("LN", D, lit(0.0)), nil, nil, sql.CodeInvalidArgLog},
		{"power overflow", call("POWER", D, lit(10.0), lit(400.0)), nil, nil, sql.CodeNumericOutOfRange},
		{"cbrt as glibc", call("CBRT", D, c0(D)), []*Vec{vecOf(D, 27.0, -8.0, 0.001)}, []any{3.0000000000000004, -2.0, 0.1}, ""},
		{"width_bucket", call("WIDTH_BUCKET", I, c0(D), lit(0.0), lit(10.0), lit(4)), []*Vec{vecOf(D, -1.0, 0.0, 9.99, 10.0, nil)},
			[]any{int64(0), int64(1), int64(4), int64(5), nil}, ""},
		{"gcd of minimums overflows", call("GCD", I, lit(int64(math.MinInt64)), lit(0)), nil, nil, sql.CodeNumericOutOfRange},
		{"greatest ignores NULLs", call("GREATEST", I, c0(I), c1(I)), []*Vec{vecOf(I, 1, nil, nil), vecOf(I, nil, 5, nil)}, []any{int64(1), int64(5), nil}, ""},
		{"least of text", call("LEAST", S, c0(S), lit("m")), []*Vec{vecOf(S, "a", "z", nil)}, []any{"a", "m", "m"}, ""},
		{"is distinct from", call(DistinctFunc, B, c0(I), c1(I)), []*Vec{vecOf(I, 1, 1, nil, nil), vecOf(I, 1, 2, 1, nil)}, []any{false, true, true, false}, ""},
		{"is not distinct from", call(NotDistinctFunc, B, c0(I), c1(I)), []*Vec{vecOf(I, 1, 1, nil, nil), vecOf(I, 1, 2, 1, nil)}, []any{true, false, false, true}, ""},
		{"regexp per-row pattern", call("~", B, c0(S), c1(S)), []*Vec{vecOf(S, "abc", "abc", "line1\nline2"), vecOf(S, "^a", "^b", "1.line")}, []any{true, false, true}, ""},
		{"~* ignores case", call("~*", B, c0(S), lit("^ñ")), []*Vec{vecOf(S, "Ñandú", "and")}, []any{true, false}, ""},
		{"\\w matches any script", call("REGEXP_MATCH", S, c0(S), lit(`(\w+)`)), []*Vec{vecOf(S, "  ünï x", "--")}, []any{"{ünï}", nil}, ""},
		{"regexp_replace groups", call("REGEXP_REPLACE", S, c0(S), lit(`(\w+)@(\w+)`), lit(`\2 at \1 (\&)`), lit("g")), []*Vec{vecOf(S, "a@b, c@d")}, []any{"b at a (a@b), d at c (c@d)"}, ""},
		{"invalid regex", call("REGEXP_REPLACE", S, lit("x"), lit("("), lit("y")), nil, nil, sql.CodeInvalidRegex},
		{"bad regex flag", call("REGEXP_REPLACE", S, lit("x"), lit("x"), lit("y"), lit("z")), nil, nil, sql.CodeInvalidParameter},
		{"split_part from the end", call("SPLIT_PART", S, c0(S), lit(","), c1(I)), []*Vec{vecOf(S, "a,b,c", "a,b,c", "", nil), vecOf(I, -1, 4, 1, 1)}, []any{"c", "", "", nil}, ""},
		{"lpad cuts and fills", call("LPAD", S, c0(S), lit(5), lit("ñx")), []*Vec{vecOf(S, "ab", "abcdefg", "")}, []any{"ñxñab", "abcde", "ñxñxñ"}, ""},
		{"left and right of characters", call("RIGHT", S, c0(S), c1(I)), []*Vec{vecOf(S, "ñandú", "ñandú"), vecOf(I, 2, -2)}, []any{"dú", "ndú"}, ""},
		{"format", call("FORMAT", S, lit("%2$s|%1$-4s|%L|%I"), c0(S), lit(7), lit(true), lit("Ab")), []*Vec{vecOf(S, "x", nil)},
			[]any{"7|x   |'7'|t", "7|    |'7'|t"}, ""}, // after %1$, the next argument is the second
		{"format too few arguments", call("FORMAT", S, lit("%s %s"), lit("a")), nil, nil, sql.CodeInvalidParameter},
		{"concat_ws NULL separator", call("CONCAT_WS", S, c0(S), lit("a"), lit(1)), []*Vec{vecOf(S, "-", nil)}, []any{"a-1", nil}, ""},
		{"string_to_array quoting", call("STRING_TO_ARRAY", S, c0(S), lit(",")), []*Vec{vecOf(S, `a,,b c,"q",NULL`, "")}, []any{`{a,"","b c","\"q\"","NULL"}`, "{}"}, ""},
		{"encode base64 wraps at 76", call("ENCODE", S, lit(strings.Repeat("x", 60)), lit("base64")), nil,
			[]any{strings.Repeat("eHh4", 19) + "\n" + strings.Repeat("eHh4", 1)}, ""},
		{"decode hex", call("DECODE", S, lit("6869"), lit("hex")), nil, []any{`\x6869`}, ""},
		{"encode escape of bytea input", call("ENCODE", S, lit(`\x00ff5c41`), lit("escape")), nil, []any{`\000\377\\A`}, ""},
		{"chr(0)", call("CHR", S, lit(0)), nil, nil, sql.CodeProgramLimitExceeded},
		{"translate drops", call("TRANSLATE", S, lit("hello"), lit("elo"), lit("i")), nil, []any{"hi"}, ""},
		{"initcap", call("INITCAP", S, c0(S)), []*Vec{vecOf(S, "hELLO wORLD-x 1ab ñu")}, []any{"Hello World-X 1ab Ñu"}, ""},
		{"make_timestamp", call("MAKE_TIMESTAMP", T, lit(2024), lit(2), lit(29), lit(23), lit(59), lit(59.999)), nil, []any{ts("2024-02-29T23:59:59.999Z")}, ""},
		{"make_timestamp bad day", call("MAKE_TIMESTAMP", T, lit(2023), lit(2), lit(29), lit(0), lit(0), lit(0.0)), nil, nil, sql.CodeDatetimeOutOfRange},
		{"trunc to places", call("TRUNC", D, c0(D), lit(2)), []*Vec{vecOf(D, 2.789, -2.789, 1e-9)}, []any{2.78, -2.78, 0.0}, ""},
		{"sign", call("SIGN", D, c0(D)), []*Vec{vecOf(D, -2.5, 0.0, 3.0)}, []any{-1.0, 0.0, 1.0}, ""},
		{"to_hex of a negative bigint", call("TO_HEX", S, lit(-3)), nil, []any{"fffffffffffffffd"}, ""},
	})
}
