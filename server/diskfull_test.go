package server

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// fullDisk is the state's file system with a disk that fills on cue: while
// full, it reports no free space and every write fails with ENOSPC
// (errorfs), as a real full disk would.
type fullDisk struct {
	*errorfs.FS
	full *atomic.Bool
}

func (d fullDisk) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	if d.full.Load() {
		return vfs.DiskUsage{AvailBytes: 1 << 20, TotalBytes: 10 << 30, UsedBytes: 10<<30 - 1<<20}, nil
	}
	return vfs.DiskUsage{AvailBytes: 5 << 30, TotalBytes: 10 << 30, UsedBytes: 5 << 30}, nil
}

// TestDiskFull: a full disk under the state stalls the streams that must
// commit ("stalled: disk full"); FLUSH says so with 53100; the server keeps
// serving; once there is room again they resume by themselves, with
// nothing lost or counted twice. While the disk is full, every write to it
// fails with ENOSPC, which Pebble cannot survive: the test also proves no
// commit reaches the disk then.
func TestDiskFull(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := &atomic.Bool{}
	enospc := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return syscall.ENOSPC
		}
		return nil
	})
	fs := fullDisk{FS: errorfs.Wrap(vfs.Default, enospc), full: full}
	cfg := Config{DataDir: t.TempDir(), PGAddr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0", AppID: "disk",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), stateFS: fs}
	srv, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	exec := func(q string) error {
		_, err := conn.Exec(ctx, q)
		return err
	}
	for _, q := range []string{
		`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partitions = 2, partition_key = 'k')`,
		`CREATE STREAM counts WITH (topic = 'counts') AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		`INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:01'), ('b', TIMESTAMP '2026-01-01 00:00:02')`,
		`FLUSH`,
	} {
		if err := exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	full.Store(true)
	time.Sleep(300 * time.Millisecond) // the space check looks every 250 ms
	if err := exec(`INSERT INTO ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:30'), ('b', TIMESTAMP '2026-01-01 00:01:30')`); err != nil {
		t.Fatal(err)
	}
	err = exec("FLUSH")
	if err == nil || !strings.Contains(err.Error(), "53100") || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("FLUSH on a full disk: %v, want 53100", err)
	}
	status, msg := streamStatus(ctx, t, conn, "counts")
	if status != "stalled: disk full" || !strings.Contains(msg, "MB free") {
		t.Fatalf("SHOW STREAMS: %q %q", status, msg)
	}
	// The server still answers, and reads Kafka.
	var n int64
	if err := conn.QueryRow(ctx, "SELECT COUNT(*) FROM ev").Scan(&n); err != nil || n != 4 {
		t.Fatalf("SELECT while the disk is full: %d, %v", n, err)
	}
	full.Store(false)
	waitFor(t, 10*time.Second, "the stream to resume", func() bool {
		status, _ := streamStatus(ctx, t, conn, "counts")
		return status == "running"
	})
	if err := exec("FLUSH"); err != nil {
		t.Fatalf("FLUSH after freeing space: %v", err)
	}
	if got := keyCounts(ctx, t, conn, "SELECT k, n FROM counts ORDER BY k"); got != "a=2 b=1" {
		t.Fatalf("panes after the disk had room again: %s, want a 2, b 1", got)
	}
}
