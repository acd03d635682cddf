// Command state measures keyed state larger than memory: N distinct keys
// open at once in one 1-hour TUMBLE window (COUNT(*), SUM(v) GROUP BY k),
// driven through the HashAgg operator over a real Pebble store exactly as a
// task drives it (batches of 4096 rows, a commit every -commit-rows rows,
// then the watermark that closes the window and its commit). No Kafka: the
// figures are the aggregation and its state alone.
//
// Each (keys, cache) run is a child process, so its peak RSS is its own.
// It reports events per CPU-second of the ingest (user+system CPU of the
// child), peak RSS (ru_maxrss), Pebble bytes on disk with the window open,
// and the time to close the window (emit every pane and commit).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turbinesql/turbinesql/bench/harness"
	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/dataflow"
	texec "github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/streamplan"
	"github.com/turbinesql/turbinesql/types"
)

const (
	batchRows = 4096
	hour      = int64(3600_000)
	base      = int64(1_700_000_000_000) / hour * hour // a window start
	query     = `CREATE STREAM s AS SELECT k, TUMBLE_START(ts, INTERVAL '1' HOUR) AS ws, COUNT(*) AS n, SUM(v) AS total
	FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' HOUR)`
	// sessionQuery: one session per key, open through the hour (its gap
	// is the hour), closed by the same watermark.
	sessionQuery = `CREATE STREAM s AS SELECT k, SESSION_START(ts, INTERVAL '1' HOUR) AS ss, COUNT(*) AS n, SUM(v) AS total
	FROM ev GROUP BY k, SESSION(ts, INTERVAL '1' HOUR)`
)

// result is what a child reports.
type result struct {
	Keys, Events    int
	CacheMB         int
	EventsPerCPUSec float64
	PeakRSSMB       float64
	PebbleMB        float64
	CloseSec        float64
	Panes           int
}

func main() {
	harness.MaybeRunBroker() // -engine runs start their broker so
	keysFlag := flag.String("keys", "100000,1000000", "comma-separated distinct key counts")
	cachesFlag := flag.String("cache-mb", "64,1024", "comma-separated --state-cache-mb values (0: unlimited)")
	events := flag.Int("events", 0, "events per run (0: max(2 x keys, 2,000,000))")
	commitRows := flag.Int("commit-rows", 500_000, "rows between commits (a task commits every second)")
	child := flag.Bool("child", false, "run one configuration (internal)")
	windowFlag := flag.String("window", "tumble", "tumble (a 1-hour TUMBLE window) or session (a session per key, 1-hour gap)")
	profile := flag.String("cpuprofile", "", "write a CPU profile of each run's ingest and close to this file (one configuration only)")
	engine := flag.Bool("engine", false, "run the workload through the whole engine (a server reading JSON from Kafka, its changelog and output) instead of the aggregation alone (tumble only)")
	baseline := flag.Int("baseline", 0, "first run this many keys with an unlimited cache, and print each run's events/CPU-s as a fraction of it (0: no baseline)")
	flag.Parse()
	if *child {
		if *profile != "" && *engine {
			enginePprof = *profile // runEngine profiles the engine's part only
		} else if *profile != "" {
			f, err := os.Create(*profile)
			if err == nil {
				err = pprof.StartCPUProfile(f)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "state:", err)
				os.Exit(1)
			}
			defer pprof.StopCPUProfile()
		}
		keys, _ := strconv.Atoi(*keysFlag)
		cache, _ := strconv.Atoi(*cachesFlag)
		var r result
		var err error
		if *engine {
			r, err = runEngine(keys, cache, *events)
		} else {
			r, err = run(keys, cache, *events, *commitRows, *windowFlag)
		}
		if err != nil {
			pprof.StopCPUProfile()
			fmt.Fprintln(os.Stderr, "state:", err)
			os.Exit(1)
		}
		json.NewEncoder(os.Stdout).Encode(r)
		return
	}
	what := "one 1-hour TUMBLE window"
	if *windowFlag == "session" {
		what = "a SESSION per key (1-hour gap)"
	}
	how := "the aggregation and its state alone"
	if *engine {
		if *windowFlag != "tumble" {
			fmt.Fprintln(os.Stderr, "state: -engine runs the tumble window only")
			os.Exit(2)
		}
		how = fmt.Sprintf("the whole engine: JSON from a %d-partition topic, changelog, output; broker in its own process", engineParts)
	}
	fmt.Printf("state larger than memory: COUNT(*)+SUM(v) GROUP BY k, %s, all keys open; %s; GOMAXPROCS=%d\n", what, how, runtime.GOMAXPROCS(0))
	header := fmt.Sprintf("%10s %10s %9s %14s %12s %11s %10s %10s", "keys", "events", "cache MB", "events/CPU-s", "peak RSS MB", "Pebble MB", "close s", "panes")
	if *baseline > 0 {
		header += fmt.Sprintf("%12s", "x baseline")
	}
	fmt.Println(header)
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "state:", err)
		os.Exit(1)
	}
	// The baseline is the yardstick: the goal at 10^7 keys in
	// 64 MB is half of what 10^4 keys make all in memory, run here on the
	// same machine in the same minute.
	base := 0.0
	runOne := func(k, c string) float64 {
		cmd := exec.Command(self, "-child", "-keys", k, "-cache-mb", c, "-events", strconv.Itoa(*events), "-commit-rows", strconv.Itoa(*commitRows), "-cpuprofile", *profile, "-window", *windowFlag, "-engine="+strconv.FormatBool(*engine))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			fmt.Fprintf(os.Stderr, "state: keys %s cache %s: %v\n", k, c, err)
			os.Exit(1)
		}
		var r result
		if err := json.Unmarshal(out, &r); err != nil {
			fmt.Fprintf(os.Stderr, "state: %s: %v\n", out, err)
			os.Exit(1)
		}
		cache := strconv.Itoa(r.CacheMB)
		if r.CacheMB == 0 {
			cache = "unlimited"
		}
		vs := ""
		if base > 0 {
			vs = fmt.Sprintf("%12.2f", r.EventsPerCPUSec/base)
		}
		fmt.Printf("%10d %10d %9s %14.0f %12.0f %11.1f %10.2f %10d%s\n", r.Keys, r.Events, cache, r.EventsPerCPUSec, r.PeakRSSMB, r.PebbleMB, r.CloseSec, r.Panes, vs)
		return r.EventsPerCPUSec
	}
	if *baseline > 0 {
		base = runOne(strconv.Itoa(*baseline), "0")
	}
	for _, k := range strings.Split(*keysFlag, ",") {
		for _, c := range strings.Split(*cachesFlag, ",") {
			runOne(k, c)
		}
	}
}

type resolver map[string]*catalog.Relation

func (r resolver) Relation(name string) (*catalog.Relation, bool) { rel, ok := r[name]; return rel, ok }

// discard is a producer nothing reaches (HashAgg produces only late rows).
type discard struct{}

func (discard) Produce(context.Context, *kafkaio.Record)                            {}
func (discard) ProduceOr(context.Context, *kafkaio.Record, func(r *kafkaio.Record)) {}

func run(keys, cacheMB, events, commitRows int, window string) (result, error) {
	if events == 0 {
		events = max(2*keys, 2_000_000)
	}
	res := result{Keys: keys, Events: events, CacheMB: cacheMB}
	src := &catalog.Source{Name: "ev", Topic: "ev", PartitionKey: "k", OnError: streamplan.OnErrorFail,
		Schema:    types.Schema{{Name: "k", Type: types.Int}, {Name: "v", Type: types.Int}, {Name: "ts", Type: types.Timestamp}},
		Watermark: &catalog.Watermark{Column: "ts"}}
	rel := &catalog.Relation{Name: "ev", Topic: "ev", Schema: src.Schema, PartitionKey: "k", Watermark: src.Watermark, Source: src}
	q := query
	switch window {
	case "tumble":
	case "session":
		q = sessionQuery
	default:
		return res, fmt.Errorf("-window %q: tumble or session", window)
	}
	stmt, err := sql.Parse(q)
	if err != nil {
		return res, err
	}
	plan, err := planner.BuildStream(resolver{"ev": rel}, stmt.(*sql.CreateStream).Query, q, streamplan.StrategyAuto)
	if err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "bench-state-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	store, err := state.Open(dir, slog.New(slog.DiscardHandler), state.Options{})
	if err != nil {
		return res, err
	}
	defer store.Close()
	env := &dataflow.Env{Name: "s", State: "s", Partition: 0, Partitions: 1, Store: store, Out: discard{},
		Metrics: dataflow.NewMetrics(prometheus.NewRegistry()), Counts: &dataflow.TaskCounts{}, Now: time.Now,
		Log: slog.New(slog.DiscardHandler)}
	op := &dataflow.HashAgg{Plan: plan, Cache: dataflow.NewCacheBudget(cacheMB)}
	ctx := context.Background()
	if err := op.Open(ctx, env); err != nil {
		return res, err
	}
	commit := func(off int64) error {
		c := &dataflow.Commit{State: store.NewBatch("s"), Offset: off}
		defer c.State.Close()
		if err := op.Commit(ctx, c); err != nil {
			return err
		}
		if err := c.State.PutPartition(0, state.PartitionMeta{Offset: c.Offset, Closed: c.Closed, HasClosed: c.HasClosed}); err != nil {
			return err
		}
		return c.State.Commit()
	}
	// Keys (event): no locality for a cache to use.
	rng := rand.New(rand.NewPCG(1, 2))
	b := &texec.Batch{N: batchRows, Cols: []*texec.Vec{
		{T: types.Int, N: batchRows, I: make([]int64, batchRows)},
		{T: types.Int, N: batchRows, I: make([]int64, batchRows)},
		{T: types.Timestamp, N: batchRows, I: make([]int64, batchRows)},
	}}
	runtime.GC()
	cpu0 := harness.CPUSeconds()
	sinceCommit := 0
	for done := 0; done < events; {
		n := min(batchRows, events-done)
		b.N = n
		for _, c := range b.Cols {
			c.N = n
		}
		for i := 0; i < n; i++ {
			b.Cols[0].I[i], b.Cols[1].I[i], b.Cols[2].I[i] = event(rng, done+i, keys)
		}
		if _, err := op.Process(ctx, &dataflow.Batch{Data: b, MaxTime: base, HasTime: true}); err != nil {
			return res, err
		}
		done += n
		// A task commits every second, or sooner when the operator asks
		// (its evicted groups fill half its cache share).
		if sinceCommit += n; sinceCommit >= commitRows || done == events || op.Due(time.Now()) {
			sinceCommit = 0
			if err := commit(int64(done)); err != nil {
				return res, err
			}
		}
	}
	res.EventsPerCPUSec = float64(events) / (harness.CPUSeconds() - cpu0)
	if res.PebbleMB, err = dirMB(dir); err != nil {
		return res, err
	}
	start := time.Now()
	out, err := op.OnWatermark(ctx, dataflow.Watermark{WM: base + 3*hour, Has: true, Now: time.Now()})
	if err != nil {
		return res, err
	}
	for out != nil {
		res.Panes += out.Data.N
		if out, err = out.Following(); err != nil {
			return res, err
		}
	}
	if err := commit(int64(events)); err != nil {
		return res, err
	}
	res.CloseSec = time.Since(start).Seconds()
	if res.Panes != keys {
		return res, fmt.Errorf("closed %d panes, want %d", res.Panes, keys)
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	res.PeakRSSMB = float64(ru.Maxrss) / 1024
	return res, nil
}

// event is the e-th event of a run over keys distinct keys, drawing from
// rng: its key, value and event time. The first keys events visit every
// key once, the rest pick keys uniformly; keys are scrambled over the
// int64s (perm). Both modes draw their events here, so the engine runs
// the aggregation's workload exactly.
func event(rng *rand.Rand, e, keys int) (k, v, ts int64) {
	i := e
	if e >= keys {
		i = rng.IntN(keys)
	}
	return perm(i), int64(e & 1023), base + int64(e)%hour
}

// perm is the key of the i-th distinct key: scrambled over the int64s, so
// that keys arrive in no order a cache could use.
func perm(i int) int64 { return int64((uint64(i)*0x9E3779B97F4A7C15)>>1) % int64(1<<62) }

func dirMB(dir string) (float64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	return float64(n) / (1 << 20), err
}
