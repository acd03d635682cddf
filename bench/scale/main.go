// Command scale measures the W2 query (COUNT(*) per key per 10 s tumbling
// window over 10^4 keys) run by 1, 2 and 3 members of one app sharing its
// partitions through the stages' consumer groups, against one kfake broker
// in a child process.
//
// For each member count N: the stream is declared while its topic is
// empty, the N servers start and split the partitions, and are stopped
// cleanly; then the backlog is written, and the N servers start again at
// once (static membership gives each its partitions back) and FLUSH on one
// of them waits until all of it is processed. It prints events per engine
// CPU-second (the CPU of every member together) and per wall second, from
// the restart to FLUSH's return (restart and group join included).
//
// The members run in this one process, each a server of its own (own data
// dir, node id, pgwire port, Kafka clients); on this 2-core machine they
// share the same two cores as separate processes would. So the figures
// show what splitting costs per event (more members, more groups, more
// commits), not the gain of adding machines.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/turbinesql/turbinesql/bench/harness"
	"github.com/turbinesql/turbinesql/server"
)

func main() {
	harness.MaybeRunBroker()
	events := flag.Int("events", 2_000_000, "events in the backlog")
	keys := flag.Int("keys", 10_000, "distinct keys")
	parts := flag.Int("partitions", 6, "source partitions (6: 1, 2 and 3 members get equal shares)")
	maxN := flag.Int("members", 3, "largest member count")
	flag.Parse()
	if err := run(*events, *keys, *parts, *maxN); err != nil {
		fmt.Fprintln(os.Stderr, "bench scale:", err)
		os.Exit(1)
	}
}

func run(events, keys, parts, maxN int) error {
	ctx := context.Background()
	broker, stop, err := harness.StartBroker()
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("W2 over %d events, %d keys, %d partitions, one kfake broker in a child process\n", events, keys, parts)
	var base float64
	for n := 1; n <= maxN; n++ {
		perCPU, perWall, err := measure(ctx, broker, n, events, keys, parts)
		if err != nil {
			return fmt.Errorf("%d members: %w", n, err)
		}
		if n == 1 {
			base = perWall
		}
		fmt.Printf("%d member(s): %9.0f events per engine CPU-second  %9.0f events/s wall  (wall x%.2f of 1 member)\n", n, perCPU, perWall, perWall/base)
	}
	fmt.Printf("peak RSS %.0f MB (the whole run, every member)\n", harness.PeakRSSMB())
	return nil
}

// measure runs W2 over a fresh backlog with n members.
func measure(ctx context.Context, broker string, n, events, keys, parts int) (perCPU, perWall float64, err error) {
	app := "scale" + strconv.Itoa(n)
	topic := "ev" + strconv.Itoa(n)
	root, err := os.MkdirTemp("", "turbinesql-bench-scale-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(root)
	start := func(i int) (*server.Server, error) {
		return server.Start(ctx, server.Config{DataDir: filepath.Join(root, strconv.Itoa(i)), PGAddr: "127.0.0.1:0",
			Brokers: []string{broker}, AppID: app, NodeID: "m" + strconv.Itoa(i), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	// Declare on an empty topic, and let the n members split it.
	if err := harness.ProduceBacklog(ctx, broker, topic, 0, keys, parts); err != nil {
		return 0, 0, err
	}
	first, err := start(0)
	if err != nil {
		return 0, 0, err
	}
	if err := exec(ctx, first, fmt.Sprintf(`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
		WITH (topic = '%s', partition_key = 'k')`, topic), `CREATE STREAM w2 WITH (topic = 'w2_`+app+`') AS
		SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS w, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`); err != nil {
		first.Close()
		return 0, 0, err
	}
	members := []*server.Server{first}
	for i := 1; i < n; i++ {
		m, err := start(i)
		if err != nil {
			closeAll(members)
			return 0, 0, err
		}
		members = append(members, m)
	}
	if err := exec(ctx, first, "FLUSH"); err != nil { // every member has joined and opened its tasks
		closeAll(members)
		return 0, 0, err
	}
	closeAll(members)

	if err := harness.ProduceBacklog(ctx, broker, topic, events, keys, parts); err != nil {
		return 0, 0, err
	}
	cpu0, w0 := harness.CPUSeconds(), time.Now()
	members = make([]*server.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range members {
		wg.Add(1)
		go func() { defer wg.Done(); members[i], errs[i] = start(i) }()
	}
	wg.Wait()
	defer func() {
		for _, m := range members {
			if m != nil {
				m.Close()
			}
		}
	}()
	for _, err := range errs {
		if err != nil {
			return 0, 0, err
		}
	}
	if err := exec(ctx, members[0], "FLUSH"); err != nil {
		return 0, 0, err
	}
	wall, cpu := time.Since(w0).Seconds(), harness.CPUSeconds()-cpu0
	in, err := recordsIn(ctx, members)
	if err != nil {
		return 0, 0, err
	}
	if in != int64(events) {
		return 0, 0, fmt.Errorf("the members read %d events together, want %d", in, events)
	}
	return float64(events) / cpu, float64(events) / wall, nil
}

func exec(ctx context.Context, srv *server.Server, stmts ...string) error {
	conn, err := pgx.Connect(ctx, "postgres://bench@"+srv.PGAddr()+"/bench?sslmode=disable")
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// recordsIn adds up what the members' SHOW STREAMS say w2 read since
// they started.
func recordsIn(ctx context.Context, members []*server.Server) (int64, error) {
	var total int64
	for _, m := range members {
		conn, err := pgx.Connect(ctx, "postgres://bench@"+m.PGAddr()+"/bench?sslmode=disable")
		if err != nil {
			return 0, err
		}
		rows, err := conn.Query(ctx, "SHOW STREAMS")
		if err != nil {
			conn.Close(ctx)
			return 0, err
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				rows.Close()
				conn.Close(ctx)
				return 0, err
			}
			total += vals[5].(int64)
		}
		rows.Close()
		conn.Close(ctx)
	}
	return total, nil
}

func closeAll(ms []*server.Server) {
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() { defer wg.Done(); m.Close() }()
	}
	wg.Wait()
}
