// Command e2e measures end-to-end throughput: N JSON events over K keys are
// produced to a 4-partition source, then a `GROUP BY k, TUMBLE(ts,
// INTERVAL '10' SECOND)` stream with COUNT(*) is created and FLUSH waits
// until it has processed all of them. The broker (kfake, the embedded
// default's broker) runs in a child process, so the CPU time this process
// reports is the engine's own. It prints events/s of wall time, events per
// engine CPU-second, peak RSS, and, as a baseline run in the same process,
// the rate of merely reading the same topic back with a plain consumer.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/bench/harness"
	"github.com/turbinesql/turbinesql/server"
	"github.com/turbinesql/turbinesql/shuffle"
	"github.com/turbinesql/turbinesql/state"
)

func main() {
	harness.MaybeRunBroker()
	events := flag.Int("events", 1_000_000, "events to produce")
	keys := flag.Int("keys", 10_000, "distinct keys")
	parts := flag.Int("partitions", 4, "source partitions")
	span := flag.Duration("span", 100*time.Second, "event time the events span (evenly spaced)")
	flag.StringVar(&windowKind, "window", "tumble", "tumble: TUMBLE(ts, 10 s); hop: HOP(ts, 1 s, 10 s); keyless: TUMBLE(ts, 10 s) without a GROUP BY key")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the streaming phase to this file")
	flag.Parse()
	cpuProfile = *profile
	if err := run(*events, *keys, *parts, *span); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(events, keys, parts int, span time.Duration) error {
	dir, err := os.MkdirTemp("", "turbinesql-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	broker, stop, err := harness.StartBroker()
	if err != nil {
		return err
	}
	defer stop()
	srv, err := server.Start(ctx, server.Config{DataDir: dir, PGAddr: "127.0.0.1:0", HTTPAddr: "", Brokers: []string{broker},
		AppID: "bench", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer srv.Close()
	conn, err := pgx.Connect(ctx, "postgres://bench@"+srv.PGAddr()+"/bench?sslmode=disable")
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE SOURCE ev (k TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
		WITH (topic = 'ev', partitions = %d, partition_key = 'k')`, parts)); err != nil {
		return err
	}

	// Produce with murmur2 placement, as a Java producer would.
	cl, err := kgo.NewClient(kgo.SeedBrokers(srv.KafkaAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(200_000))
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	t0 := time.Now()
	var bytes int64
	for i := 0; i < events; i++ {
		k := "user-" + strconv.Itoa(rng.IntN(keys))
		ts := base + int64(i)*span.Milliseconds()/int64(events)
		v := []byte(`{"k":"` + k + `","v":` + strconv.Itoa(rng.IntN(1000)) + `,"ts":` + strconv.FormatInt(ts, 10) + `}`)
		bytes += int64(len(v))
		cl.Produce(ctx, &kgo.Record{Topic: "ev", Key: []byte(k), Value: v, Partition: state.PartitionFor([]byte(k), parts)}, func(_ *kgo.Record, err error) {
			if err != nil {
				panic(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	cl.Close()
	fmt.Printf("produced %d events (%.1f MB) over %d keys, %s of event time, in %.2fs\n", events, float64(bytes)/1e6, keys, span, time.Since(t0).Seconds())

	// Baseline: read the topic back with a plain consumer, no decoding.
	cpu0, w0 := harness.CPUSeconds(), time.Now()
	cons, err := kgo.NewClient(kgo.SeedBrokers(srv.KafkaAddrs()...), kgo.ConsumeTopics("ev"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	for n := 0; n < events; {
		fs := cons.PollFetches(ctx)
		n += fs.NumRecords()
	}
	cons.Close()
	readWall, readCPU := time.Since(w0).Seconds(), harness.CPUSeconds()-cpu0
	fmt.Printf("baseline read-only consumer: %.0f events/s, %.0f events per CPU-second\n", float64(events)/readWall, float64(events)/readCPU)

	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0, w0 = harness.CPUSeconds(), time.Now()
	query := `CREATE STREAM agg WITH (topic = 'agg') AS
		SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS w, COUNT(*) AS n
		FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`
	label := "TUMBLE(10s)"
	if windowKind == "hop" {
		query = `CREATE STREAM agg WITH (topic = 'agg') AS
		SELECT k, HOP_START(ts, INTERVAL '1' SECOND, INTERVAL '10' SECOND) AS w, COUNT(*) AS n
		FROM ev GROUP BY k, HOP(ts, INTERVAL '1' SECOND, INTERVAL '10' SECOND)`
		label = "HOP(1s, 10s)"
	}
	if windowKind == "keyless" {
		// No GROUP BY key: a combine, each partition ships one partial per
		// window to one merge partition.
		query = `CREATE STREAM agg WITH (topic = 'agg') AS
		SELECT TUMBLE_START(ts, INTERVAL '10' SECOND) AS w, COUNT(*) AS n
		FROM ev GROUP BY TUMBLE(ts, INTERVAL '10' SECOND)`
		label = "keyless TUMBLE(10s)"
	}
	if _, err := conn.Exec(ctx, query); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "FLUSH"); err != nil {
		return err
	}
	wall, cpu := time.Since(w0).Seconds(), harness.CPUSeconds()-cpu0
	in, out, late, err := harness.StreamCounts(ctx, conn)
	if err != nil {
		return err
	}
	if in != int64(events) {
		return fmt.Errorf("stream read %d events, want %d", in, events)
	}
	fmt.Printf("stream GROUP BY [k,] %s COUNT(*): %d events in, %d panes out, %d late\n", label, in, out, late)
	fmt.Printf("  %.0f events/s wall, %.0f events per engine CPU-second (broker in its own process), ratio to read-only baseline %.2f\n",
		float64(events)/wall, float64(events)/cpu, (float64(events)/cpu)/(float64(events)/readCPU))
	fmt.Printf("  peak RSS %.0f MB\n", harness.PeakRSSMB())
	if windowKind == "keyless" {
		partials, markers, err := countCombine(ctx, srv.KafkaAddrs(), "turbine-bench-cmb-ev-agg")
		if err != nil {
			return err
		}
		fmt.Printf("  combine topic: %d partials (%.1f per closed window) and %d watermark markers\n",
			partials, float64(partials)/float64(max(out, 1)), markers)
	}
	return nil
}

// countCombine reads a combine topic whole: the partials shipped, and the
// markers (records with shuffle.MarkerHeader).
func countCombine(ctx context.Context, brokers []string, topic string) (partials, markers int64, err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if fs.NumRecords() == 0 {
			return partials, markers, nil // read to the end: nothing more within 2 s
		}
		fs.EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == shuffle.MarkerHeader {
					markers++
					return
				}
			}
			partials++
		})
	}
}

var (
	cpuProfile string
	windowKind string
)
