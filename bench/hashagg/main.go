// Command hashagg measures the hash aggregation operator alone: COUNT(*),
// SUM(v), AVG(v) GROUP BY k over in-memory batches of 4096 rows, with 10^2,
// 10^4 and 10^6 distinct keys, BIGINT keys and TEXT keys. As a baseline in
// the same run it folds the same rows with a plain Go map[key]*struct loop,
// and prints rows per CPU-second of both and their ratio (grouper / map;
// above 1 means the grouper is faster).
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/types"
)

const batchRows = 4096

func main() {
	rows := flag.Int("rows", 10_000_000, "rows per run")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the grouper runs to this file")
	flag.Parse()
	if *profile != "" {
		f, err := os.Create(*profile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hashagg:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "hashagg:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Printf("hash aggregation, COUNT(*)+SUM(v)+AVG(v) GROUP BY k, %d rows in batches of %d, GOMAXPROCS=%d\n",
		*rows, batchRows, runtime.GOMAXPROCS(0))
	fmt.Printf("%-6s %9s %16s %16s %7s\n", "key", "groups", "grouper rows/s", "map rows/s", "ratio")
	for _, text := range []bool{false, true} {
		for _, groups := range []int{100, 10_000, 1_000_000} {
			batches := makeBatches(*rows, groups, text)
			g, err := runGrouper(batches, text)
			if err != nil {
				fmt.Fprintln(os.Stderr, "hashagg:", err)
				os.Exit(1)
			}
			m := runMap(batches, text)
			kind := "BIGINT"
			if text {
				kind = "TEXT"
			}
			fmt.Printf("%-6s %9d %16.0f %16.0f %7.2f\n", kind, groups, float64(*rows)/g.Seconds(), float64(*rows)/m.Seconds(), m.Seconds()/g.Seconds())
		}
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Printf("peak RSS %.0f MB\n", float64(ru.Maxrss)/1024)
}

// makeBatches draws keys uniformly from [0, groups) and values in [0, 1000).
func makeBatches(rows, groups int, text bool) []*exec.Batch {
	rng := rand.New(rand.NewPCG(uint64(groups), 3))
	var out []*exec.Batch
	for done := 0; done < rows; done += batchRows {
		n := min(batchRows, rows-done)
		k := &exec.Vec{T: types.Int, N: n, I: make([]int64, n)}
		if text {
			k = &exec.Vec{T: types.Text, N: n, S: make([]string, n)}
		}
		v := &exec.Vec{T: types.Int, N: n, I: make([]int64, n)}
		for i := 0; i < n; i++ {
			key := rng.IntN(groups)
			if text {
				k.S[i] = "user-" + strconv.Itoa(key)
			} else {
				k.I[i] = int64(key)
			}
			v.I[i] = int64(rng.IntN(1000))
		}
		out = append(out, &exec.Batch{N: n, Cols: []*exec.Vec{k, v}})
	}
	return out
}

func runGrouper(batches []*exec.Batch, text bool) (time.Duration, error) {
	kt := types.Int
	if text {
		kt = types.Text
	}
	k := &exec.ColRef{Idx: 0, Name: "k", T: kt}
	v := &exec.ColRef{Idx: 1, Name: "v", T: types.Int}
	specs := []agg.Spec{
		{Name: "COUNT", Star: true},
		{Name: "SUM", ArgTypes: []types.Type{types.Int}},
		{Name: "AVG", ArgTypes: []types.Type{types.Int}},
	}
	a, err := exec.NewAggregator(exec.AggConfig{Keys: []exec.Expr{k}, PK: -1, TimeIdx: -1, Specs: specs, Args: [][]exec.Expr{nil, {v}, {v}}})
	if err != nil {
		return 0, err
	}
	runtime.GC()
	t0 := cpuTime()
	for _, b := range batches {
		if _, err := a.Consume(b, 0, false); err != nil {
			return 0, err
		}
	}
	return cpuTime() - t0, nil
}

type acc struct {
	count, sum, avgSum, avgN int64
}

func runMap(batches []*exec.Batch, text bool) time.Duration {
	runtime.GC()
	t0 := cpuTime()
	if text {
		m := map[string]*acc{}
		for _, b := range batches {
			ks, vs := b.Cols[0].S, b.Cols[1].I
			for i, k := range ks {
				a := m[k]
				if a == nil {
					a = &acc{}
					m[k] = a
				}
				a.count++
				a.sum += vs[i]
				a.avgSum += vs[i]
				a.avgN++
			}
		}
	} else {
		m := map[int64]*acc{}
		for _, b := range batches {
			ks, vs := b.Cols[0].I, b.Cols[1].I
			for i, k := range ks {
				a := m[k]
				if a == nil {
					a = &acc{}
					m[k] = a
				}
				a.count++
				a.sum += vs[i]
				a.avgSum += vs[i]
				a.avgN++
			}
		}
	}
	return cpuTime() - t0
}

// cpuTime is the CPU time of the process (user + system, GC included), so
// the figures hold on a machine busy with other work, where wall time would
// not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
