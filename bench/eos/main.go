// Command eos measures what exactly-once costs: the W2 query (COUNT(*) per
// key per 10 s tumbling window, 1M events over 10^4 keys, 4 partitions)
// under at-least-once and under exactly-once at 100 ms and 1 s commit
// intervals, each on a server of its own against one kfake broker in a
// child process (so the CPU time read is the engine's).
//
// Two phases per configuration:
//
//   - throughput: the events are in the topic before the stream starts;
//     FLUSH waits until it has processed them all. Events per engine
//     CPU-second, and the ratio to at-least-once at the same interval.
//   - latency: events are written live at a steady rate, event time
//     following the wall clock, into a 1 s tumbling window stream. For
//     every pane: the time from the write of the record that closed its
//     window on its partition (the first with event time past the window's
//     end plus the watermark delay) to the pane being visible to a
//     reader (read_committed for exactly-once). p50 and p99 over all panes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/bench/harness"
	"github.com/turbinesql/turbinesql/server"
	"github.com/turbinesql/turbinesql/state"
)

type config struct {
	name      string
	guarantee string
	interval  time.Duration
}

func main() {
	harness.MaybeRunBroker()
	events := flag.Int("events", 1_000_000, "events of the throughput phase")
	keys := flag.Int("keys", 10_000, "distinct keys")
	parts := flag.Int("partitions", 4, "source partitions")
	rate := flag.Int("rate", 20_000, "events per second of the latency phase")
	live := flag.Duration("live", 15*time.Second, "how long the latency phase writes (0: no latency phase)")
	rounds := flag.Int("rounds", 3, "throughput runs per configuration, interleaved; the median is reported")
	flag.Parse()
	if err := run(*events, *keys, *parts, *rate, *live, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench eos:", err)
		os.Exit(1)
	}
}

func run(events, keys, parts, rate int, live time.Duration, rounds int) error {
	ctx := context.Background()
	broker, stop, err := harness.StartBroker()
	if err != nil {
		return err
	}
	defer stop()
	if err := harness.ProduceBacklog(ctx, broker, "ev", events, keys, parts); err != nil {
		return err
	}
	configs := []config{
		{"alo-1s", "at_least_once", time.Second},
		{"eos-1s", "exactly_once", time.Second},
		{"alo-100ms", "at_least_once", 100 * time.Millisecond},
		{"eos-100ms", "exactly_once", 100 * time.Millisecond},
	}
	type result struct {
		perCPU, wall float64
		p50, p99     time.Duration
		panes        int
	}
	res := map[string]result{}
	// Rounds interleave the configurations, so a noisy moment of the
	// machine spreads over all of them; each reports its median.
	perCPU, wall := map[string][]float64{}, map[string][]float64{}
	for round := 0; round < rounds; round++ {
		for _, c := range configs {
			pc, w, err := throughput(ctx, broker, c, round, events)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			perCPU[c.name], wall[c.name] = append(perCPU[c.name], pc), append(wall[c.name], w)
		}
	}
	for _, c := range configs {
		var lat []time.Duration
		if live > 0 {
			var err error
			if lat, err = latency(ctx, broker, c, keys, parts, rate, live); err != nil {
				return fmt.Errorf("%s latency: %w", c.name, err)
			}
		}
		r := result{perCPU: median(perCPU[c.name]), wall: median(wall[c.name]), panes: len(lat)}
		if len(lat) > 0 {
			slices.Sort(lat)
			r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
		}
		res[c.name] = r
		fmt.Printf("%-10s %-14s commit every %-6s  %9.0f events per engine CPU-second (runs %s)  %8.0f events/s wall  latency to visible p50 %s p99 %s (%d panes)\n",
			c.name, c.guarantee, c.interval, r.perCPU, runs(perCPU[c.name]), r.wall, r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.panes)
	}
	fmt.Printf("exactly-once / at-least-once, events per CPU-second: 1 s commits %.3f, 100 ms commits %.3f (eos-100ms / alo-1s %.3f)\n",
		res["eos-1s"].perCPU/res["alo-1s"].perCPU, res["eos-100ms"].perCPU/res["alo-100ms"].perCPU, res["eos-100ms"].perCPU/res["alo-1s"].perCPU)
	fmt.Printf("peak RSS %.0f MB (the whole run)\n", harness.PeakRSSMB())
	return nil
}

func runs(xs []float64) string {
	var b []byte
	for i, x := range xs {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendFloat(b, x/1000, 'f', 0, 64)
		b = append(b, 'k')
	}
	return string(b)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// startServer runs a server of configuration c with its own data dir and
// app id, and a connection to it.
func startServer(ctx context.Context, broker string, c config, app string) (*server.Server, *pgx.Conn, func(), error) {
	dir, err := os.MkdirTemp("", "turbinesql-bench-eos-")
	if err != nil {
		return nil, nil, nil, err
	}
	srv, err := server.Start(ctx, server.Config{DataDir: dir, PGAddr: "127.0.0.1:0", Brokers: []string{broker},
		AppID: app, CommitInterval: c.interval, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	conn, err := pgx.Connect(ctx, "postgres://bench@"+srv.PGAddr()+"/bench?sslmode=disable")
	if err != nil {
		srv.Close()
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	return srv, conn, func() { conn.Close(ctx); srv.Close(); os.RemoveAll(dir) }, nil
}

// throughput runs W2 over the backlog and returns events per engine
// CPU-second and per wall second.
func throughput(ctx context.Context, broker string, c config, round, events int) (perCPU, perWall float64, err error) {
	_, conn, done, err := startServer(ctx, broker, c, fmt.Sprintf("tp%d-%s", round, c.name))
	if err != nil {
		return 0, 0, err
	}
	defer done()
	if _, err := conn.Exec(ctx, `CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
		WITH (topic = 'ev', partition_key = 'k')`); err != nil {
		return 0, 0, err
	}
	cpu0, w0 := harness.CPUSeconds(), time.Now()
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE STREAM w2 WITH (topic = 'w2_%d_%s', processing_guarantee = '%s') AS
		SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS w, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`,
		round, c.name, c.guarantee)); err != nil {
		return 0, 0, err
	}
	if _, err := conn.Exec(ctx, "FLUSH"); err != nil {
		return 0, 0, err
	}
	wall, cpu := time.Since(w0).Seconds(), harness.CPUSeconds()-cpu0
	in, _, _, err := harness.StreamCounts(ctx, conn)
	if err != nil {
		return 0, 0, err
	}
	if in != int64(events) {
		return 0, 0, fmt.Errorf("stream read %d events, want %d", in, events)
	}
	return float64(events) / cpu, float64(events) / wall, nil
}

// latency writes events live for d and measures, for every pane of a 1 s
// tumbling window stream, the time from the write of the record that
// closed its window on its partition to the pane being visible to a
// read_committed reader.
func latency(ctx context.Context, broker string, c config, keys, parts, rate int, d time.Duration) ([]time.Duration, error) {
	_, conn, done, err := startServer(ctx, broker, c, "lat-"+c.name)
	if err != nil {
		return nil, err
	}
	defer done()
	src, out := "live_"+c.name, "lat_"+c.name
	const delayMs = 200
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE SOURCE live (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '%d' MILLISECOND)
		WITH (topic = '%s', partitions = %d, partition_key = 'k')`, delayMs, src, parts)); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE STREAM lat WITH (topic = '%s', processing_guarantee = '%s') AS
		SELECT k, TUMBLE_START(ts, INTERVAL '1' SECOND) AS w, COUNT(*) AS n FROM live GROUP BY k, TUMBLE(ts, INTERVAL '1' SECOND)`,
		out, c.guarantee)); err != nil {
		return nil, err
	}
	// The reader: read_committed, from the start; the arrival time of every
	// pane by (key, window start).
	type paneKey struct {
		k string
		w int64
	}
	var mu sync.Mutex
	seen := map[paneKey]time.Time{}
	rctx, stopReading := context.WithCancel(ctx)
	// read_committed for an exactly-once stream. An at-least-once
	// stream's output has no transactions, so either level reads the same
	// records; it is read read_uncommitted (the default of Kafka's
	// clients), because kfake wakes a waiting read_committed fetch late for
	// records written outside transactions, which would time the broker.
	iso := kgo.ReadCommitted()
	if c.guarantee != "exactly_once" {
		iso = kgo.ReadUncommitted()
	}
	reader, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics(out), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(iso), kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		stopReading()
		return nil, err
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for rctx.Err() == nil {
			fs := reader.PollFetches(rctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				var p struct {
					K string    `json:"k"`
					W time.Time `json:"w"`
				}
				if json.Unmarshal(r.Value, &p) == nil {
					mu.Lock()
					seen[paneKey{p.K, p.W.UnixMilli()}] = now
					mu.Unlock()
				}
			})
		}
	}()

	// The writer: event time is the wall clock; per partition, the ack time
	// of the first record past each window's end plus the delay.
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		stopReading()
		return nil, err
	}
	closer := map[int32]map[int64]time.Time{} // partition → window start → ack of its closing record
	nextClose := map[int32]int64{}
	keyPart := map[string]int32{}
	rng := rand.New(rand.NewPCG(3, 4))
	batch := max(rate/100, 1) // 100 writes a second
	tick := time.NewTicker(10 * time.Millisecond)
	end := time.Now().Add(d)
	for now := range tick.C {
		if now.After(end) {
			break
		}
		ts := now.UnixMilli()
		var recs []*kgo.Record
		for i := 0; i < batch; i++ {
			k := "user-" + strconv.Itoa(rng.IntN(keys))
			p := state.PartitionFor([]byte(k), parts)
			keyPart[k] = p
			recs = append(recs, &kgo.Record{Topic: src, Key: []byte(k), Partition: p,
				Value: []byte(`{"k":"` + k + `","ts":` + strconv.FormatInt(ts, 10) + `}`)})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			tick.Stop()
			stopReading()
			return nil, err
		}
		acked := time.Now()
		for _, r := range recs {
			// The windows this record's event time closes on its partition.
			closesBelow := (ts - delayMs) / 1000 * 1000 // window starts < this end at or before ts - delay
			if _, ok := nextClose[r.Partition]; !ok {
				nextClose[r.Partition] = closesBelow
				closer[r.Partition] = map[int64]time.Time{}
				continue
			}
			for w := nextClose[r.Partition]; w+1000 <= ts-delayMs; w += 1000 {
				closer[r.Partition][w] = acked
				nextClose[r.Partition] = w + 1000
			}
		}
	}
	tick.Stop()
	cl.Close()
	time.Sleep(3 * time.Second) // the last closes become visible
	stopReading()
	<-readDone
	reader.Close()
	mu.Lock()
	defer mu.Unlock()
	var lat []time.Duration
	for pk, at := range seen {
		ack, ok := closer[keyPart[pk.k]][pk.w]
		if !ok {
			continue // a window open at the start, or not closed by the end
		}
		lat = append(lat, at.Sub(ack))
	}
	return lat, nil
}
