// Command hops compares the two hops that move records to their group: N
// events over K users, Zipf-skewed with exponent s in {0, 1.0, 1.5}, on a
// source keyed by tenant, aggregated by user (not the partition key) in
// 1-minute tumbling windows with COUNT and SUM, at about N/K events per
// user per window. For each skew it runs the stream once with strategy
// 'repartition' and once with 'combine', and prints the bytes each wrote to
// its internal topic (keys, values and headers, read back), end-to-end
// events/s and events per engine CPU-second (broker in a child process),
// their ratios, and which strategy the planner picks with strategy auto.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/bench/harness"
	"github.com/turbinesql/turbinesql/server"
	"github.com/turbinesql/turbinesql/state"
)

func main() {
	harness.MaybeRunBroker()
	events := flag.Int("events", 1_000_000, "events")
	users := flag.Int("users", 10_000, "distinct users")
	parts := flag.Int("partitions", 2, "source partitions")
	flag.Parse()
	fmt.Printf("hops: %d events, %d users, %d source partitions, 1-minute TUMBLE COUNT/SUM by user (source keyed by tenant)\n", *events, *users, *parts)
	fmt.Printf("%-5s %-12s %14s %10s %14s %14s\n", "skew", "strategy", "hop bytes", "records", "events/s", "events/CPU-s")
	for _, s := range []float64{0, 1.0, 1.5} {
		if err := run(*events, *users, *parts, s); err != nil {
			fmt.Fprintln(os.Stderr, "hops:", err)
			os.Exit(1)
		}
	}
	fmt.Printf("peak RSS %.0f MB\n", harness.PeakRSSMB())
}

// zipf draws ranks in [0, n) with P(i) proportional to 1/(i+1)^s (s = 0:
// uniform), by inverting the cumulative weights.
type zipf struct{ cdf []float64 }

func newZipf(n int, s float64) *zipf {
	z := &zipf{cdf: make([]float64, n)}
	total := 0.0
	for i := range z.cdf {
		total += 1 / math.Pow(float64(i+1), s)
		z.cdf[i] = total
	}
	for i := range z.cdf {
		z.cdf[i] /= total
	}
	return z
}

func (z *zipf) draw(rng *rand.Rand) int {
	return sort.SearchFloat64s(z.cdf, rng.Float64())
}

type result struct {
	bytes, records int64
	wall, cpu      float64
}

func run(events, users, parts int, skew float64) error {
	ctx := context.Background()
	addr, stop, err := harness.StartBroker()
	if err != nil {
		return err
	}
	defer stop()
	dir, err := os.MkdirTemp("", "turbinesql-hops-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := server.Start(ctx, server.Config{DataDir: dir, PGAddr: "127.0.0.1:0", Brokers: []string{addr}, AppID: "hops",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer srv.Close()
	conn, err := pgx.Connect(ctx, "postgres://bench@"+srv.PGAddr()+"/bench?sslmode=disable")
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE SOURCE ev (tenant TEXT, user_id TEXT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
		WITH (topic = 'ev', partitions = %d, partition_key = 'tenant')`, parts)); err != nil {
		return err
	}
	if err := produce(ctx, addr, events, users, parts, skew); err != nil {
		return err
	}
	choice, err := autoChoice(ctx, conn)
	if err != nil {
		return err
	}
	res := map[string]result{}
	for _, strategy := range []string{"repartition", "combine"} {
		r, err := measure(ctx, conn, addr, strategy, events)
		if err != nil {
			return err
		}
		res[strategy] = r
		fmt.Printf("%-5.1f %-12s %14d %10d %14.0f %14.0f\n", skew, strategy, r.bytes, r.records, float64(events)/r.wall, float64(events)/r.cpu)
	}
	rep, cmb := res["repartition"], res["combine"]
	cheaper := "combine"
	if rep.bytes < cmb.bytes {
		cheaper = "repartition"
	}
	fmt.Printf("      combine/repartition: bytes %.4f (1/%.0f), events/CPU-s %.2fx; planner (auto) picks %s; fewer bytes: %s\n",
		float64(cmb.bytes)/float64(rep.bytes), float64(rep.bytes)/float64(max(cmb.bytes, 1)), (float64(events)/cmb.cpu)/(float64(events)/rep.cpu), choice, cheaper)
	return nil
}

// produce writes the events with murmur2 placement on tenant; event time
// spans one minute, so each user has about events/users rows per window.
func produce(ctx context.Context, addr string, events, users, parts int, skew float64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(200_000))
	if err != nil {
		return err
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(7, uint64(skew*10)))
	z := newZipf(users, skew)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for i := 0; i < events; i++ {
		tenant := "tenant-" + strconv.Itoa(rng.IntN(64))
		ts := base + int64(i)*60_000/int64(events)
		v := []byte(`{"tenant":"` + tenant + `","user_id":"user-` + strconv.Itoa(z.draw(rng)) + `","v":` + strconv.Itoa(rng.IntN(1000)) + `,"ts":` + strconv.FormatInt(ts, 10) + `}`)
		cl.Produce(ctx, &kgo.Record{Topic: "ev", Key: []byte(tenant), Value: v, Partition: state.PartitionFor([]byte(tenant), parts)}, func(_ *kgo.Record, err error) {
			if err != nil {
				panic(err)
			}
		})
	}
	// A last event a minute later closes the window.
	cl.Produce(ctx, &kgo.Record{Topic: "ev", Value: []byte(`{"tenant":"t","user_id":"u","v":0,"ts":` + strconv.FormatInt(base+120_000, 10) + `}`)}, nil)
	return cl.Flush(ctx)
}

func autoChoice(ctx context.Context, conn *pgx.Conn) (string, error) {
	rows, err := conn.Query(ctx, `EXPLAIN CREATE STREAM auto AS SELECT user_id, COUNT(*) AS n, SUM(v) AS s FROM ev GROUP BY user_id, TUMBLE(ts, INTERVAL '1' MINUTE)`)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", err
		}
		if strings.HasPrefix(line, "Strategy: ") {
			return strings.Fields(line)[1], nil
		}
	}
	return "", rows.Err()
}

func measure(ctx context.Context, conn *pgx.Conn, addr, strategy string, events int) (result, error) {
	cpu0, w0 := harness.CPUSeconds(), time.Now()
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE STREAM by_user_%s WITH (topic = 'out_%s', strategy = '%s') AS
		SELECT user_id, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n, SUM(v) AS s
		FROM ev GROUP BY user_id, TUMBLE(ts, INTERVAL '1' MINUTE)`, strategy, strategy, strategy)); err != nil {
		return result{}, err
	}
	if _, err := conn.Exec(ctx, "FLUSH"); err != nil {
		return result{}, err
	}
	r := result{wall: time.Since(w0).Seconds(), cpu: harness.CPUSeconds() - cpu0}
	topic := "turbine-hops-rep-ev-by-user_id"
	if strategy == "combine" {
		topic = "turbine-hops-cmb-ev-by_user_combine"
	}
	var err error
	r.bytes, r.records, err = topicBytes(ctx, addr, topic)
	if _, derr := conn.Exec(ctx, "DROP STREAM by_user_"+strategy); derr != nil && err == nil {
		err = derr
	}
	return r, err
}

// topicBytes reads a topic to its end and sums its records' key, value and
// header bytes.
func topicBytes(ctx context.Context, addr, topic string) (bytes, records int64, err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	idle := 0
	for idle < 3 {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			records++
			bytes += int64(len(r.Key) + len(r.Value))
			for _, h := range r.Headers {
				bytes += int64(len(h.Key) + len(h.Value))
			}
		})
		if n == 0 {
			idle++
		}
	}
	return bytes, records, nil
}
