package agg

import (
	"testing"

	"github.com/turbinesql/turbinesql/types"
)

// TestMergesExactly: every aggregate that claims an exact merge is one the
// merge property test (TestMergeEqualsSingleStage) holds to bit-for-bit
// equality, and the claim is made for the ones exec's blind writes are
// meant for and not for the order- or rounding-dependent ones.
func TestMergesExactly(t *testing.T) {
	for _, c := range propCases() {
		if MergesExactly(mustNew(t, c.spec)) && c.check != exact {
			t.Errorf("%v claims an exact merge, but its merge is only checked within an error", c)
		}
	}
	want := map[string]bool{
		"COUNT(*)":                  true,
		"COUNT(BIGINT)":             true,
		"SUM(BIGINT)":               true,
		"AVG(BIGINT)":               true,
		"MIN(TEXT)":                 true,
		"MAX(TIMESTAMP)":            true,
		"BOOL_AND(BOOLEAN)":         true,
		"VAR_POP(BIGINT)":           true,
		"SUM(DOUBLE)":               false,
		"AVG(DOUBLE)":               false,
		"MAX(DOUBLE)":               false,
		"COUNT(DISTINCT BIGINT)":    false,
		"FIRST_VALUE(BIGINT)":       false,
		"STRING_AGG(TEXT)":          false,
		"APPROX_PERCENTILE(DOUBLE)": false,
	}
	specs := map[string]Spec{
		"COUNT(*)":                  {Name: "COUNT", Star: true},
		"COUNT(BIGINT)":             specOf("COUNT", types.Int),
		"SUM(BIGINT)":               specOf("SUM", types.Int),
		"AVG(BIGINT)":               specOf("AVG", types.Int),
		"MIN(TEXT)":                 specOf("MIN", types.Text),
		"MAX(TIMESTAMP)":            specOf("MAX", types.Timestamp),
		"BOOL_AND(BOOLEAN)":         specOf("BOOL_AND", types.Bool),
		"VAR_POP(BIGINT)":           specOf("VAR_POP", types.Int),
		"SUM(DOUBLE)":               specOf("SUM", types.Double),
		"AVG(DOUBLE)":               specOf("AVG", types.Double),
		"MAX(DOUBLE)":               specOf("MAX", types.Double),
		"COUNT(DISTINCT BIGINT)":    distinctOf("COUNT", types.Int),
		"FIRST_VALUE(BIGINT)":       specOf("FIRST_VALUE", types.Int, types.Timestamp, types.Int),
		"STRING_AGG(TEXT)":          {Name: "STRING_AGG", ArgTypes: []types.Type{types.Text}, Params: []any{","}},
		"APPROX_PERCENTILE(DOUBLE)": pctOf(0.5, types.Double),
	}
	for name, w := range want {
		if got := MergesExactly(mustNew(t, specs[name])); got != w {
			t.Errorf("MergesExactly(%s) = %v, want %v", name, got, w)
		}
	}
}
