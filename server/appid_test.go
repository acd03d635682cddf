package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStartNeedsAppIDWithBrokers: Start against outside brokers without an
// app id is ErrAppIDRequired, and refused before it creates anything: no
// topic on the cluster, no data dir. An id Kafka cannot take in a topic
// name is refused the same way. The embedded broker runs under
// DefaultAppID.
func TestStartNeedsAppIDWithBrokers(t *testing.T) {
	parallel(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct{ id, want string }{
		{"", "an app id is required with --brokers"},
		{"a/b", `app id "a/b" cannot name the app's Kafka topics`},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		srv, err := Start(ctx, Config{DataDir: dir, PGAddr: "127.0.0.1:0", Brokers: cluster.ListenAddrs(), AppID: tc.id,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil {
			srv.Close()
			t.Fatalf("app id %q: started against an outside cluster", tc.id)
		}
		if !strings.Contains(err.Error(), tc.want) || (tc.id == "") != errors.Is(err, ErrAppIDRequired) {
			t.Errorf("app id %q: %v; want %q", tc.id, err, tc.want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("app id %q: a refused start made its data dir (%v)", tc.id, err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if names := topics.Names(); len(names) != 0 {
		t.Errorf("refused starts left topics on the cluster: %v", names)
	}

	if testBrokers() != "" {
		return // startTestServer runs on the shared cluster, not an embedded broker
	}
	srv := startTestServer(t, t.TempDir(), func(c *Config) { c.AppID = "" })
	defer srv.Close()
	if srv.cfg.AppID != DefaultAppID {
		t.Errorf("embedded broker: app id %q, want %q", srv.cfg.AppID, DefaultAppID)
	}
}
