package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/bench/harness"
	"github.com/turbinesql/turbinesql/server"
	"github.com/turbinesql/turbinesql/state"
)

// enginePprof is where runEngine writes a CPU profile of the engine's
// part (empty: none).
var enginePprof string

// engineParts is the source's partition count in -engine runs: four
// tasks, each with a quarter of the cache.
const engineParts = 4

// runEngine is run's workload through the whole engine: the same keys,
// values and event times, as JSON records of a 4-partition Kafka topic
// (placed by murmur2, as a Java producer places them), read by a server
// (in this process; its broker in a child, so the CPU read here is the
// engine's) running the same query. What it measures, beside run's
// aggregation and state: fetching, decoding, the changelog of every
// commit, the output. The figures: events per CPU-second from the CREATE
// STREAM to the FLUSH that has read and committed every event; peak RSS
// from then through the close (the producing before it is not the
// engine's); the server's data dir on disk with the window open; and the
// close, from the records that move every partition's watermark past the
// window to the last pane counted out.
func runEngine(keys, cacheMB, events int) (result, error) {
	if events == 0 {
		events = max(2*keys, 2_000_000)
	}
	res := result{Keys: keys, Events: events, CacheMB: cacheMB}
	ctx := context.Background()
	broker, stop, err := harness.StartBroker()
	if err != nil {
		return res, err
	}
	defer stop()
	if err := produceEvents(ctx, broker, keys, events); err != nil {
		return res, fmt.Errorf("produce: %w", err)
	}
	dir, err := os.MkdirTemp("", "bench-state-engine-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	runtime.GC()
	debug.FreeOSMemory()
	if err := resetPeakRSS(); err != nil {
		return res, err
	}
	cache := cacheMB
	if cache == 0 {
		cache = -1 // the server's unlimited
	}
	srv, err := server.Start(ctx, server.Config{DataDir: dir, PGAddr: "127.0.0.1:0", HTTPAddr: "", Brokers: []string{broker},
		AppID: "bench", StateCacheMB: cache, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return res, err
	}
	defer srv.Close()
	conn, err := pgx.Connect(ctx, "postgres://bench@"+srv.PGAddr()+"/bench?sslmode=disable")
	if err != nil {
		return res, err
	}
	defer conn.Close(ctx)
	if enginePprof != "" {
		f, err := os.Create(enginePprof)
		if err != nil {
			return res, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0 := harness.CPUSeconds()
	for _, q := range []string{
		`CREATE SOURCE ev (k BIGINT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
			WITH (topic = 'ev', partitions = ` + strconv.Itoa(engineParts) + `, partition_key = 'k')`,
		strings.Replace(query, "CREATE STREAM s AS", "CREATE STREAM s WITH (topic = 's') AS", 1),
		"FLUSH",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return res, err
		}
	}
	in, _, _, err := harness.StreamCounts(ctx, conn)
	if err != nil {
		return res, err
	}
	if in != int64(events) {
		return res, fmt.Errorf("stream read %d events, want %d", in, events)
	}
	res.EventsPerCPUSec = float64(events) / (harness.CPUSeconds() - cpu0)
	if res.PebbleMB, err = dirMB(dir); err != nil {
		return res, err
	}
	start := time.Now()
	if err := produceClose(ctx, broker); err != nil {
		return res, fmt.Errorf("produce the close: %w", err)
	}
	for {
		if _, err := conn.Exec(ctx, "FLUSH"); err != nil {
			return res, err
		}
		_, out, _, err := harness.StreamCounts(ctx, conn)
		if err != nil {
			return res, err
		}
		if res.Panes = int(out); out >= int64(keys) || time.Since(start) > 10*time.Minute {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	res.CloseSec = time.Since(start).Seconds()
	if res.Panes != keys {
		return res, fmt.Errorf("closed %d panes, want %d", res.Panes, keys)
	}
	res.PeakRSSMB, err = peakRSSMB()
	return res, err
}

// produceEvents writes run's events (event: the same keys, values and
// times) as JSON to topic ev.
func produceEvents(ctx context.Context, broker string, keys, events int) error {
	rng := rand.New(rand.NewPCG(1, 2))
	return harness.ProduceKeyed(ctx, broker, "ev", engineParts, events, func(e int) (key, value []byte) {
		k, v, ts := event(rng, e, keys)
		key = strconv.AppendInt(nil, k, 10)
		return key, fmt.Appendf(nil, `{"k":%s,"v":%d,"ts":%d}`, key, v, ts)
	})
}

// produceClose writes a record 3 hours on to every partition: each
// partition's watermark passes the window, which closes.
func produceClose(ctx context.Context, broker string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for p, k := int32(0), int64(-1); p < engineParts; k-- {
		key := []byte(strconv.FormatInt(k, 10))
		if state.PartitionFor(key, engineParts) != p {
			continue
		}
		recs = append(recs, &kgo.Record{Topic: "ev", Key: key, Partition: p,
			Value: fmt.Appendf(nil, `{"k":%s,"v":0,"ts":%d}`, key, base+3*hour)})
		p++
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}

// resetPeakRSS starts the kernel's peak RSS of this process (VmHWM) over
// from its current RSS, so that the producing before the engine runs is
// not counted.
func resetPeakRSS() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSSMB is VmHWM, in MB.
func peakRSSMB() (float64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/self/status")
}
