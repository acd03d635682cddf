package agg

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/turbinesql/turbinesql/types"
)

// arr builds a column of type t from Go values (nil is NULL; TIMESTAMP
// values are int64 millis). types.Unknown gives Arrow's Null type, what the
// caller passes for a bare NULL literal.
func arr(t types.Type, vals ...any) arrow.Array {
	switch t {
	case types.Unknown:
		return array.NewNull(len(vals))
	case types.Double:
		b := array.NewFloat64Builder(mem)
		defer b.Release()
		for _, v := range vals {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.(float64))
			}
		}
		return b.NewArray()
	case types.Text:
		b := array.NewStringBuilder(mem)
		defer b.Release()
		for _, v := range vals {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.(string))
			}
		}
		return b.NewArray()
	case types.Bool:
		b := array.NewBooleanBuilder(mem)
		defer b.Release()
		for _, v := range vals {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(v.(bool))
			}
		}
		return b.NewArray()
	case types.Timestamp:
		b := array.NewTimestampBuilder(mem, arrow.FixedWidthTypes.Timestamp_ms.(*arrow.TimestampType))
		defer b.Release()
		for _, v := range vals {
			if v == nil {
				b.AppendNull()
			} else {
				b.Append(arrow.Timestamp(v.(int64)))
			}
		}
		return b.NewArray()
	}
	b := array.NewInt64Builder(mem)
	defer b.Release()
	for _, v := range vals {
		if v == nil {
			b.AppendNull()
		} else {
			b.Append(v.(int64))
		}
	}
	return b.NewArray()
}

// ints and floats as []any, for the tables.
func is(vs ...int64) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

func fs(vs ...float64) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

var (
	nan     = math.NaN()
	inf     = math.Inf(1)
	negZero = math.Copysign(0, -1)
)

// TestAgainstPostgres checks small inputs against PostgreSQL's answers
// (worked out by hand from its definitions; the comments show the SQL),
// single stage and merged from one partial per row.
func TestAgainstPostgres(t *testing.T) {
	cases := []struct {
		name string
		spec Spec
		cols [][]any
		want any
	}{
		{"count(*)", Spec{Name: "COUNT", Star: true}, nil, int64(3)},
		{"count(x) skips NULL", specOf("COUNT", I), [][]any{{int64(1), nil, int64(3)}}, int64(2)},
		{"count(NULL)", specOf("COUNT", types.Unknown), [][]any{{nil, nil}}, int64(0)},
		{"count(distinct x) with NULLs", distinctOf("COUNT", I), [][]any{{int64(1), nil, int64(1), int64(2), nil}}, int64(2)},
		{"count(distinct float8): -0 = 0, NaN = NaN", distinctOf("COUNT", D), [][]any{fs(0, negZero, nan, nan, 1)}, int64(3)},
		{"count(distinct text)", distinctOf("COUNT", T), [][]any{{"a", "a", "b", nil, ""}}, int64(3)},
		{"sum(bigint) exact through overflow", specOf("SUM", I), [][]any{is(math.MaxInt64, 1, -1)}, int64(math.MaxInt64)},
		{"sum(bigint) beyond bigint", specOf("SUM", I), [][]any{is(math.MaxInt64, math.MaxInt64)}, 1.8446744073709552e19},
		{"sum(float8) NaN", specOf("SUM", D), [][]any{fs(1.5, nan)}, nan},
		{"sum(float8) inf - inf", specOf("SUM", D), [][]any{fs(inf, -inf)}, nan},
		{"sum(distinct)", distinctOf("SUM", I), [][]any{is(1, 1, 2)}, int64(3)},
		{"avg(bigint)", specOf("AVG", I), [][]any{is(1, 2, 2)}, 1.6666666666666667},
		{"avg(bigint) exact: numeric, then float8", specOf("AVG", I), [][]any{is(math.MaxInt64, math.MaxInt64, 1)}, 6.148914691236517e18},
		{"avg(distinct)", distinctOf("AVG", I), [][]any{is(1, 1, 2)}, 1.5},
		{"avg(float8) NaN", specOf("AVG", D), [][]any{fs(1, nan)}, nan},
		{"max(float8): NaN above all", specOf("MAX", D), [][]any{fs(1, nan, inf)}, nan},
		{"min(float8): NaN above all", specOf("MIN", D), [][]any{fs(1, nan, -inf)}, -inf},
		{"min(text), collation C", specOf("MIN", T), [][]any{{"b", "a", "ab", "B"}}, "B"},
		{"max(bool)", specOf("MAX", B), [][]any{{false, nil, true}}, true},
		{"min(timestamp)", specOf("MIN", TS), [][]any{is(2000, 1000, 3000)}, time.UnixMilli(1000).UTC()},
		// select var_samp(x) from (values (1),(2),(3),(4)) v(x)
		{"var_samp(bigint)", specOf("VAR_SAMP", I), [][]any{is(1, 2, 3, 4)}, 1.6666666666666667},
		{"var_samp(float8)", specOf("VAR_SAMP", D), [][]any{fs(1, 2, 3, 4)}, 1.6666666666666667},
		{"variance = var_samp", specOf("VARIANCE", I), [][]any{is(1, 2, 3, 4)}, 1.6666666666666667},
		{"var_pop", specOf("VAR_POP", I), [][]any{is(1, 2, 3, 4)}, 1.25},
		{"stddev_samp", specOf("STDDEV_SAMP", D), [][]any{fs(1, 2, 3, 4)}, 1.2909944487358056},
		{"stddev = stddev_samp", specOf("STDDEV", I), [][]any{is(1, 2, 3, 4)}, 1.2909944487358056},
		{"stddev_pop", specOf("STDDEV_POP", I), [][]any{is(1, 2, 3, 4)}, 1.118033988749895},
		{"stddev_pop(float8)", specOf("STDDEV_POP", D), [][]any{fs(1, 2, 3, 4)}, 1.118033988749895},
		{"var_samp of one row", specOf("VAR_SAMP", I), [][]any{is(5)}, nil},
		{"stddev_samp of one row", specOf("STDDEV_SAMP", D), [][]any{fs(5)}, nil},
		{"var_pop of one row", specOf("VAR_POP", D), [][]any{fs(5)}, 0.0},
		{"stddev_pop of one row", specOf("STDDEV_POP", I), [][]any{is(5)}, 0.0},
		// numeric is exact where float8 is not: 2^53+1 and 2^53+3.
		{"var_pop(bigint) exact", specOf("VAR_POP", I), [][]any{is(1<<53+1, 1<<53+3)}, 1.0},
		{"var_samp(bigint) exact", specOf("VAR_SAMP", I), [][]any{is(1<<53+1, 1<<53+3)}, 2.0},
		{"var_pop(float8) of inf", specOf("VAR_POP", D), [][]any{fs(inf)}, nan},
		{"var_samp(float8) with NaN", specOf("VAR_SAMP", D), [][]any{fs(1, nan)}, nan},
		// select corr(y, x) from (values (1,2),(2,4),(3,6)) v(y, x)
		{"corr perfectly correlated", specOf("CORR", I, D), [][]any{is(1, 2, 3), fs(2, 4, 6)}, 1.0},
		{"corr anticorrelated", specOf("CORR", D, D), [][]any{fs(3, 2, 1), fs(1, 2, 3)}, -1.0},
		{"corr skips NULL pairs", specOf("CORR", I, I), [][]any{{int64(1), nil, int64(2), int64(3)}, {int64(1), int64(9), nil, int64(3)}}, 1.0},
		{"corr of one row", specOf("CORR", D, D), [][]any{fs(1), fs(2)}, nil},
		{"corr with zero variance", specOf("CORR", D, D), [][]any{fs(1, 2, 3), fs(5, 5, 5)}, nil},
		{"covar_pop", specOf("COVAR_POP", I, I), [][]any{is(1, 2, 3), is(2, 4, 6)}, 1.3333333333333333},
		{"covar_samp", specOf("COVAR_SAMP", I, I), [][]any{is(1, 2, 3), is(2, 4, 6)}, 2.0},
		{"bool_or", specOf("BOOL_OR", B), [][]any{{false, nil, true}}, true},
		{"bool_or all false", specOf("BOOL_OR", B), [][]any{{false, false}}, false},
		{"bool_and skips NULL", specOf("BOOL_AND", B), [][]any{{true, nil}}, true},
		{"bool_and", specOf("BOOL_AND", B), [][]any{{true, false}}, false},
		{"every = bool_and", specOf("EVERY", B), [][]any{{true, true}}, true},
		{"bool_or of NULLs", specOf("BOOL_OR", B), [][]any{{nil, nil}}, nil},
		{"approx_count_distinct", specOf("APPROX_COUNT_DISTINCT", I), [][]any{{int64(1), int64(2), int64(2), int64(3), nil}}, int64(3)},
		{"approx_count_distinct(text)", specOf("APPROX_COUNT_DISTINCT", T), [][]any{{"a", "b", "a"}}, int64(2)},
		// select percentile_cont(0.5) within group (order by x) from generate_series(1, 10) x
		{"percentile_cont(0.5)", pctOf(0.5, I), [][]any{is(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)}, 5.5},
		{"percentile_cont(0.25)", pctOf(0.25, I), [][]any{is(10, 9, 8, 7, 6, 5, 4, 3, 2, 1)}, 3.25},
		{"percentile_cont(0)", pctOf(int64(0), D), [][]any{fs(3, 1, 2)}, 1.0},
		{"percentile_cont(1)", pctOf(1.0, D), [][]any{fs(3, 1, 2)}, 3.0},
		{"median", specOf("APPROX_MEDIAN", I), [][]any{is(4, 1, 3, 2)}, 2.5},
		{"median skips NULL", specOf("APPROX_MEDIAN", D), [][]any{{1.0, nil, 2.0, 3.0}}, 2.0},
		{"percentile_cont with NaN: NaN sorts last", pctOf(0.5, D), [][]any{fs(nan, 1, 2)}, 2.0},
		{"percentile_cont(1) with NaN", pctOf(1.0, D), [][]any{fs(nan, 1, 2)}, nan},
		{"percentile_cont(0.75) next to NaN", pctOf(0.75, D), [][]any{fs(nan, 1, 2)}, nan},
		{"percentile_cont(0) with -inf", pctOf(0.0, D), [][]any{fs(2, -inf, 1)}, -inf},
		// FIRST_VALUE / LAST_VALUE (x, event time, sequence): rows with a
		// NULL x or time are skipped; (time, seq) orders the rest.
		{"first_value", specOf("FIRST_VALUE", T, TS, I), [][]any{{"b", "a", nil, "c", "z"}, {int64(2000), int64(1000), int64(500), int64(1000), nil}, is(5, 7, 1, 3, 0)}, "c"},
		{"last_value", specOf("LAST_VALUE", T, TS, I), [][]any{{"b", "a", nil, "c", "z"}, {int64(2000), int64(1000), int64(500), int64(1000), nil}, is(5, 7, 1, 3, 0)}, "b"},
		{"last_value by seq within a millisecond", specOf("LAST_VALUE", I, I, I), [][]any{is(10, 20, 30), is(7, 7, 7), is(3, 9, 4)}, int64(20)},
		{"first_value of NULLs", specOf("FIRST_VALUE", D, I, I), [][]any{{nil, nil}, is(1, 2), is(1, 2)}, nil},
		// ARG_MAX / ARG_MIN (x, by): ties on by go to the smallest x.
		{"arg_max tie: smallest x", specOf("ARG_MAX", T, I), [][]any{{"a", "c", "b", nil, "d"}, {int64(1), int64(3), int64(3), int64(9), nil}}, "b"},
		{"arg_min", specOf("ARG_MIN", T, I), [][]any{{"a", "c", "b", nil, "d"}, {int64(1), int64(3), int64(3), int64(9), nil}}, "a"},
		{"arg_max: NaN is the largest by", specOf("ARG_MAX", I, D), [][]any{is(1, 2, 3), fs(inf, nan, 5)}, int64(2)},
		{"arg_min: -0 ties with 0", specOf("ARG_MIN", I, D), [][]any{is(7, 4), fs(0, negZero)}, int64(4)},
		{"max_by = arg_max", specOf("MAX_BY", TS, T), [][]any{is(1000, 2000), {"x", "y"}}, time.UnixMilli(2000).UTC()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := 3
			if len(c.cols) > 0 {
				n = len(c.cols[0])
			}
			cols := make([]arrow.Array, len(c.cols))
			for j, vals := range c.cols {
				cols[j] = arr(c.spec.ArgTypes[j], vals...)
				defer cols[j].Release()
			}
			f := mustNew(t, c.spec)
			f.Grow(1)
			f.Update(make([]uint32, n), cols)
			if got := f.Result(0); !same(got, c.want) {
				t.Errorf("single stage: got %v, want %v", show(got), show(c.want))
			}
			// Merged: one partial per row, in reverse order.
			m := mustNew(t, c.spec)
			m.Grow(1)
			for i := n - 1; i >= 0; i-- {
				p := mustNew(t, c.spec)
				p.Grow(1)
				args := make([]arrow.Array, len(cols))
				for j, col := range cols {
					args[j] = array.NewSlice(col, int64(i), int64(i+1))
					defer args[j].Release()
				}
				p.Update([]uint32{0}, args)
				if err := m.Merge(0, p.Encode(nil, 0)); err != nil {
					t.Fatal(err)
				}
			}
			if got := m.Result(0); !same(got, c.want) {
				t.Errorf("merged: got %v, want %v", show(got), show(c.want))
			}
		})
	}
}

// TestEmptyInputIsNullExceptCount: an aggregate over no row is NULL, except
// the counts, which are 0.
func TestEmptyInputIsNullExceptCount(t *testing.T) {
	for _, c := range propCases() {
		f := mustNew(t, c.spec)
		f.Grow(1)
		got := f.Result(0)
		switch c.spec.Name {
		case "COUNT", "APPROX_COUNT_DISTINCT":
			if got != int64(0) {
				t.Errorf("%v of nothing = %v, want 0", c, got)
			}
		default:
			if got != nil {
				t.Errorf("%v of nothing = %v, want NULL", c, got)
			}
		}
	}
}

// TestResultTypes: every Result is a Go value the caller can store in a
// column of ResultType.
func TestResultTypes(t *testing.T) {
	r := testRand(t)
	for _, c := range propCases() {
		f := mustNew(t, c.spec)
		f.Grow(1)
		cols := make([]arrow.Array, len(c.cols))
		for j, g := range c.cols {
			cols[j] = g(r, 50).arr
			defer cols[j].Release()
		}
		f.Update(make([]uint32, 50), cols)
		got := f.Result(0)
		ok := got == nil
		switch f.ResultType() {
		case types.Int:
			_, ok = got.(int64)
			// SUM(BIGINT) beyond the BIGINT range is a float64, which the
			// caller stores as NULL (see sumInt.Result).
			_, big := got.(float64)
			ok = ok || got == nil || big && c.spec.Name == "SUM"
		case types.Double:
			_, ok = got.(float64)
			ok = ok || got == nil
		case types.Text:
			_, ok = got.(string)
			ok = ok || got == nil
		case types.Bool:
			_, ok = got.(bool)
			ok = ok || got == nil
		case types.Timestamp:
			_, ok = got.(time.Time)
			ok = ok || got == nil
		}
		if !ok {
			t.Errorf("%v: Result %T does not match ResultType %v", c, got, f.ResultType())
		}
	}
}

// TestResetGivesCleanSlot: slots are recycled, so a Reset slot must behave
// exactly as a new one, whatever it held.
func TestResetGivesCleanSlot(t *testing.T) {
	r := testRand(t)
	for _, c := range propCases() {
		n := 2000
		dirty := make([]arrow.Array, len(c.cols))
		clean := make([]arrow.Array, len(c.cols))
		for j, g := range c.cols {
			dirty[j], clean[j] = g(r, n).arr, g(r, n).arr
		}
		slots := make([]uint32, n)
		for i := range slots {
			slots[i] = uint32(i % 2)
		}
		f := mustNew(t, c.spec)
		f.Grow(2)
		f.Update(slots, dirty)
		f.Reset(0)
		fresh := mustNew(t, c.spec)
		fresh.Grow(1)
		if got, want := f.Encode(nil, 0), fresh.Encode(nil, 0); string(got) != string(want) {
			t.Errorf("%v: reset slot encodes %x, new slot %x", c, got, want)
		}
		f.Update(make([]uint32, n), clean)
		fresh.Update(make([]uint32, n), clean)
		if got, want := f.Result(0), fresh.Result(0); !same(got, want) {
			t.Errorf("%v: reused slot gives %v, new slot %v", c, show(got), show(want))
		}
		for j := range dirty {
			dirty[j].Release()
			clean[j].Release()
		}
	}
}

// TestEncodingRoundTrip: encode, merge into an empty slot, encode again:
// the same bytes, for every aggregate (all encodings are canonical), and
// the same result. Truncated or foreign bytes are refused, never a panic.
func TestEncodingRoundTrip(t *testing.T) {
	r := testRand(t)
	for _, c := range propCases() {
		for _, n := range []int{0, 1, 40, 3000} {
			cols := make([]arrow.Array, len(c.cols))
			for j, g := range c.cols {
				cols[j] = g(r, n).arr
			}
			f := mustNew(t, c.spec)
			f.Grow(1)
			f.Update(make([]uint32, n), cols)
			enc := f.Encode(nil, 0)
			if enc[0] != encV1 {
				t.Fatalf("%v: encoding starts with %d, want version %d", c, enc[0], encV1)
			}
			g := mustNew(t, c.spec)
			g.Grow(1)
			if err := g.Merge(0, enc); err != nil {
				t.Fatalf("%v: %v", c, err)
			}
			if again := g.Encode(nil, 0); string(again) != string(enc) {
				t.Errorf("%v n=%d: re-encoding differs:\n%x\n%x", c, n, enc, again)
			}
			if got, want := g.Result(0), f.Result(0); !same(got, want) {
				t.Errorf("%v n=%d: after round trip %v, before %v", c, n, show(got), show(want))
			}
			if err := g.Merge(0, append([]byte{encV1 + 1}, enc[1:]...)); err == nil {
				t.Errorf("%v: accepted an unknown encoding version", c)
			}
			if err := g.Merge(0, nil); err == nil {
				t.Errorf("%v: accepted an empty encoding", c)
			}
			for k := 1; k < len(enc); k += 1 + k/8 {
				_ = g.Merge(0, enc[:k]) // may or may not parse; must not panic
			}
			for j := range cols {
				cols[j].Release()
			}
		}
	}
}

func TestLookupAndErrors(t *testing.T) {
	for _, name := range Names() {
		info, ok := Lookup(strings.ToLower(name))
		if !ok || !info.Mergeable || !IsAggregate(name) {
			t.Errorf("%s: Lookup %+v %v", name, info, ok)
		}
	}
	if info, _ := Lookup("variance"); info.Name != "VAR_SAMP" || info.MinArgs != 1 || info.MaxArgs != 1 || !info.Distinct {
		t.Errorf("variance: %+v", info)
	}
	if info, _ := Lookup("approx_percentile"); info.MinArgs != 2 || len(info.Consts) != 1 || info.Consts[0] != 1 {
		t.Errorf("approx_percentile: %+v", info)
	}
	if info, _ := Lookup("LAST_VALUE"); !info.NeedsOrder || info.Distinct {
		t.Errorf("last_value: %+v", info)
	}
	if info, _ := Lookup("count"); !info.Star || !info.Distinct {
		t.Errorf("count: %+v", info)
	}
	if IsAggregate("lower") {
		t.Error("lower is not an aggregate")
	}

	for _, c := range []struct {
		spec Spec
		kind error
		msg  string
	}{
		{Spec{Name: "median_of_medians", ArgTypes: []types.Type{I}}, ErrUnknown, "unknown aggregate"},
		{specOf("SUM", T), ErrArgs, "function sum(text) does not exist"},
		{specOf("sum"), ErrArgs, "takes 1 argument"},
		{specOf("CORR", D), ErrArgs, "takes 2 arguments"},
		{specOf("BOOL_AND", I), ErrArgs, "BOOLEAN"},
		{specOf("MIN", types.Unknown), ErrArgs, "min(unknown)"},
		{Spec{Name: "COUNT", Star: true, Distinct: true}, ErrArgs, "COUNT(*)"},
		{Spec{Name: "SUM", Star: true}, ErrArgs, "SUM(*)"},
		{specOf("APPROX_PERCENTILE", D, D), ErrArgs, "argument 2 must be a constant"},
		{pctOf(1.5, D), ErrParam, "not between 0 and 1"},
		{pctOf(nil, D), ErrParam, "must not be NULL"},
		{pctOf("half", D), ErrParam, "must be a number"},
		{pctOf(0.5, T), ErrArgs, "approx_percentile(text)"},
		{specOf("FIRST_VALUE", I), ErrArgs, "event time and sequence"},
		{specOf("FIRST_VALUE", I, D, I), ErrArgs, "event time column"},
		{specOf("LAST_VALUE", I, TS, D), ErrArgs, "sequence column"},
		{Spec{Name: "FIRST_VALUE", ArgTypes: []types.Type{I, TS, I}, Distinct: true}, ErrNotSupported, "DISTINCT"},
		{Spec{Name: "CORR", ArgTypes: []types.Type{D, D}, Distinct: true}, ErrNotSupported, "DISTINCT"},
	} {
		_, err := New(c.spec)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("New(%+v) = %v, want %v containing %q", c.spec, err, c.kind, c.msg)
		}
	}
	// DISTINCT on aggregates that ignore repeats is accepted and changes
	// nothing.
	for _, s := range []Spec{distinctOf("MAX", I), distinctOf("BOOL_OR", B), distinctOf("APPROX_COUNT_DISTINCT", T)} {
		if _, err := New(s); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
}
