package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/turbinesql/turbinesql/kafkaio"
)

// freeAddr is a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// brokerAt starts a broker on addr, keeping its topics in dir across
// restarts.
func brokerAt(t *testing.T, addr, dir string) *kafkaio.Embedded {
	t.Helper()
	var b *kafkaio.Embedded
	var err error
	for i := 0; i < 50; i++ { // the port may linger a moment after a close
		if b, err = kafkaio.StartEmbedded(addr, dir); err == nil {
			return b
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal(err)
	return nil
}

func brokerUp(t *testing.T, srv *Server) float64 {
	t.Helper()
	var m dto.Metric
	if err := srv.brokerGauge.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestBrokerOutage: the server starts while Kafka is unreachable, says so
// (turbine_broker_up 0, statements fail fast with 08006 naming the
// broker), reads its catalog once Kafka answers; a later outage shows
// streams as waiting for the broker, and they resume by themselves with
// nothing lost.
func TestBrokerOutage(t *testing.T) {
	parallel(t)
	// It runs its own broker (stopped and started on cue), whatever
	// TURBINE_TEST_BROKERS says: a shared one cannot be stopped.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr, kdir, dir := freeAddr(t), t.TempDir(), t.TempDir()
	// First life: a broker, a stream, some input; then everything stops.
	b := brokerAt(t, addr, filepath.Join(kdir, "kafka"))
	cfg := Config{DataDir: dir, PGAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Brokers: []string{addr}, AppID: "outage",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(ctx, t, srv)
	execAll(ctx, t, conn,
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`,
		`CREATE STREAM counts WITH (topic = 'counts') AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:01'), ('b', TIMESTAMP '2026-01-01 00:00:02')`,
		`FLUSH`,
	)
	conn.Close(ctx)
	srv.Close()
	b.Close()

	// The server starts with the broker down.
	start := time.Now()
	srv, err = Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start without a broker: %v", err)
	}
	defer func() { srv.Close() }()
	if brokerUp(t, srv) != 0 {
		t.Fatal("turbine_broker_up is not 0 with the broker down")
	}
	conn = connect(ctx, t, srv)
	defer conn.Close(ctx)
	for _, q := range []string{"FLUSH", "SELECT * FROM counts", "INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:03')"} {
		qs := time.Now()
		_, err := conn.Exec(ctx, q)
		if err == nil || !strings.Contains(err.Error(), "08006") || !strings.Contains(err.Error(), addr) {
			t.Fatalf("%s with the broker down: %v, want 08006 naming %s", q, err, addr)
		}
		if d := time.Since(qs); d > 2*time.Second {
			t.Fatalf("%s took %v to fail", q, d)
		}
	}
	t.Logf("started without a broker in %v", time.Since(start))

	// The broker comes back: the catalog is read, the stream resumes.
	b = brokerAt(t, addr, filepath.Join(kdir, "kafka"))
	waitFor(t, 30*time.Second, "the catalog read once the broker is back", func() bool {
		_, err := conn.Exec(ctx, "FLUSH")
		return err == nil
	})
	if brokerUp(t, srv) != 1 {
		t.Fatal("turbine_broker_up is not 1 with the broker back")
	}
	if _, err := conn.Exec(ctx, `INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:30')`); err != nil {
		t.Fatal(err)
	}

	// An outage while the stream runs: it waits for the broker.
	b.Close()
	waitFor(t, 10*time.Second, "SHOW STREAMS to say waiting for broker", func() bool {
		status, _ := streamStatus(ctx, t, conn, "counts")
		return status == "waiting for broker"
	})
	if _, err := conn.Exec(ctx, "FLUSH"); err == nil || !strings.Contains(err.Error(), "08006") {
		t.Fatalf("FLUSH during the outage: %v", err)
	}
	b = brokerAt(t, addr, filepath.Join(kdir, "kafka"))
	defer b.Close()
	waitFor(t, 30*time.Second, "the stream to resume", func() bool {
		status, _ := streamStatus(ctx, t, conn, "counts")
		return status == "running"
	})
	for _, q := range []string{`INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:01:30'), ('b', TIMESTAMP '2026-01-01 00:01:31')`, "FLUSH"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s after the outage: %v", q, err)
		}
	}
	if got := keyCounts(ctx, t, conn, "SELECT k, n FROM counts ORDER BY k"); got != "a=2 b=1" {
		t.Fatalf("panes after the outages: %s, want a=2 b=1", got)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
