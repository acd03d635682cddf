package agg

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/turbinesql/turbinesql/types"
)

// BenchmarkUpdate measures the per-row cost of Update over 4096-row batches
// spread over 1024 slots (groups), with 10% NULLs, as the hash aggregate
// calls it; ns/row is the figure to watch.
func BenchmarkUpdate(b *testing.B) {
	const rows, nslots = 4096, 1024
	r := rand.New(rand.NewPCG(1, 2))
	slots := make([]uint32, rows)
	for i := range slots {
		slots[i] = uint32(r.IntN(nslots))
	}
	valid := make([]bool, rows)
	iv := make([]int64, rows)
	fv := make([]float64, rows)
	tv := make([]arrow.Timestamp, rows)
	sv := make([]string, rows)
	texts := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}
	for i := range rows {
		valid[i] = r.IntN(10) > 0
		iv[i] = r.Int64N(1_000_000)
		fv[i] = r.NormFloat64()*100 + 50
		tv[i] = arrow.Timestamp(1_700_000_000_000 + int64(i))
		sv[i] = texts[r.IntN(len(texts))]
	}
	ib := array.NewInt64Builder(mem)
	ib.AppendValues(iv, valid)
	ints := ib.NewArray()
	fb := array.NewFloat64Builder(mem)
	fb.AppendValues(fv, valid)
	floats := fb.NewArray()
	tb := array.NewTimestampBuilder(mem, arrow.FixedWidthTypes.Timestamp_ms.(*arrow.TimestampType))
	tb.AppendValues(tv, nil)
	times := tb.NewArray()
	sb := array.NewInt64Builder(mem)
	for i := range rows {
		sb.Append(int64(i))
	}
	seqs := sb.NewArray()
	xb := array.NewStringBuilder(mem)
	xb.AppendValues(sv, valid)
	texts2 := xb.NewArray()
	defer func() {
		for _, a := range []arrow.Array{ints, floats, times, seqs, texts2} {
			a.Release()
		}
		for _, bl := range []interface{ Release() }{ib, fb, tb, sb, xb} {
			bl.Release()
		}
	}()

	for _, c := range []struct {
		name string
		spec Spec
		args []arrow.Array
	}{
		{"COUNT(*)", Spec{Name: "COUNT", Star: true}, nil},
		{"COUNT(bigint)", specOf("COUNT", I), []arrow.Array{ints}},
		{"SUM(bigint)", specOf("SUM", I), []arrow.Array{ints}},
		{"SUM(double)", specOf("SUM", D), []arrow.Array{floats}},
		{"AVG(bigint)", specOf("AVG", I), []arrow.Array{ints}},
		{"AVG(double)", specOf("AVG", D), []arrow.Array{floats}},
		{"MAX(double)", specOf("MAX", D), []arrow.Array{floats}},
		{"VAR_SAMP(bigint)", specOf("VAR_SAMP", I), []arrow.Array{ints}},
		{"VAR_SAMP(double)", specOf("VAR_SAMP", D), []arrow.Array{floats}},
		{"CORR(double,bigint)", specOf("CORR", D, I), []arrow.Array{floats, ints}},
		{"COUNT(DISTINCT bigint)", distinctOf("COUNT", I), []arrow.Array{ints}},
		{"COUNT(DISTINCT text)", distinctOf("COUNT", T), []arrow.Array{texts2}},
		{"APPROX_COUNT_DISTINCT(bigint)", specOf("APPROX_COUNT_DISTINCT", I), []arrow.Array{ints}},
		{"APPROX_COUNT_DISTINCT(text)", specOf("APPROX_COUNT_DISTINCT", T), []arrow.Array{texts2}},
		{"APPROX_PERCENTILE(double)", pctOf(0.95, D), []arrow.Array{floats}},
		{"LAST_VALUE(text)", specOf("LAST_VALUE", T, TS, I), []arrow.Array{texts2, times, seqs}},
		{"ARG_MAX(bigint,double)", specOf("ARG_MAX", I, D), []arrow.Array{ints, floats}},
		{"BOOL_OR", specOf("BOOL_OR", types.Bool), nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			args := c.args
			if c.spec.Name == "BOOL_OR" {
				bb := array.NewBooleanBuilder(mem)
				defer bb.Release()
				for i := range rows {
					bb.Append(iv[i]%7 == 0)
				}
				a := bb.NewArray()
				defer a.Release()
				args = []arrow.Array{a}
			}
			f := mustNew(b, c.spec)
			f.Grow(nslots)
			b.ResetTimer()
			for b.Loop() {
				f.Update(slots, args)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
		})
	}
}
