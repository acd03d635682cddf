package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/server"
)

// TestAppIDRequiredWithBrokers: against an outside cluster, serve refuses
// to start without an app id (exit 2, before anything touches the
// cluster), saying what to set, why, and which id an existing deployment
// had. A flag, TURBINE_APP_ID and the config file's key (TOML app-id,
// YAML app_id) each count as explicit, and the server then runs under
// that id; the embedded broker keeps its default; an id Kafka cannot take
// in a topic name is refused.
func TestAppIDRequiredWithBrokers(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ",")
	base := func() []string {
		return []string{"serve", "--brokers", brokers, "--data-dir", t.TempDir(), "--pg-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}
	}

	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"no id", nil, nil, []string{"an app id is required with --brokers", "--app-id", "TURBINE_APP_ID", "app-id in the --config file",
			"share their catalog, hop and changelog topics and fence each other's exactly-once transactions", "start it with --app-id turbinesql"}},
		{"empty flag", []string{"--app-id", ""}, nil, []string{"an app id is required with --brokers"}},
		{"empty env", nil, map[string]string{"TURBINE_APP_ID": ""}, []string{"an app id is required with --brokers"}},
		{"not a topic name", []string{"--app-id", "orders prod"}, nil, []string{`app id "orders prod" cannot name the app's Kafka topics`, `character ' '`}},
	} {
		var out, errOut bytes.Buffer
		env := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		if code := serveRefused(append(base(), tc.args...), &out, &errOut, env); code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", tc.name, code, errOut.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut.String(), w) {
				t.Errorf("%s: stderr %q does not say %q", tc.name, errOut.String(), w)
			}
		}
	}
	// Refused before the start: nothing was created on the cluster.
	if ts := clusterTopics(t, cluster); len(ts) != 0 {
		t.Fatalf("a refused start left topics on the cluster: %v", ts)
	}

	dir := t.TempDir()
	toml := filepath.Join(dir, "serve.toml")
	yaml := filepath.Join(dir, "serve.yaml")
	if err := os.WriteFile(toml, []byte("app-id = \"from-toml\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(yaml, []byte("app_id: from-yaml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, id string
		args     []string
		env      map[string]string
	}{
		{"flag", "from-flag", []string{"--app-id", "from-flag"}, nil},
		{"environment", "from-env", nil, map[string]string{"TURBINE_APP_ID": "from-env"}},
		{"toml config file", "from-toml", []string{"--config", toml}, nil},
		{"yaml config file", "from-yaml", nil, map[string]string{"TURBINE_CONFIG": yaml}},
	} {
		serveBriefly(t, append(base(), tc.args...), tc.env)
		if ts := clusterTopics(t, cluster); !ts["turbine-"+tc.id+"-catalog"] {
			t.Errorf("%s: the server did not run as app %s: topics %v", tc.name, tc.id, ts)
		}
	}

	// The embedded broker keeps the default.
	var f = newServeFlags()
	cfg, err := f.load([]string{"--data-dir", t.TempDir()}, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := server.AppIDOf(cfg); err != nil || id != server.DefaultAppID {
		t.Errorf("embedded: app id %q (%v), want %s", id, err, server.DefaultAppID)
	}
}

// TestAppIDUpgrade: a deployment that ran on an outside cluster with the
// id it used to default to keeps its catalog once the id is required: a
// restart without one is refused, telling to add --app-id turbinesql, and
// with it the stream created before is back.
func TestAppIDUpgrade(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "ev"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	dataDir := t.TempDir()
	args := []string{"serve", "--brokers", strings.Join(cluster.ListenAddrs(), ","), "--data-dir", dataDir,
		"--pg-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}
	withID := append(append([]string{}, args...), "--app-id", server.DefaultAppID)

	serveBriefly(t, withID, nil, func(ctx context.Context, conn *pgx.Conn) {
		for _, q := range []string{
			`CREATE SOURCE ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partition_key = 'k')`,
			`CREATE STREAM counts AS SELECT k, COUNT(*) AS n FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
		} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	})
	var out, errOut bytes.Buffer
	if code := serveRefused(args, &out, &errOut, noEnv); code != 2 || !strings.Contains(errOut.String(), "start it with --app-id turbinesql") {
		t.Fatalf("restart without an app id: exit %d, stderr %q", code, errOut.String())
	}
	serveBriefly(t, withID, nil, func(ctx context.Context, conn *pgx.Conn) {
		var names []string
		rows, err := conn.Query(ctx, "SHOW STREAMS")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, vals[0].(string))
		}
		if rows.Err() != nil || strings.Join(names, ",") != "counts" {
			t.Errorf("after the restart with --app-id turbinesql: streams %v (%v), want [counts]", names, rows.Err())
		}
	})
}

// serveRefused runs the command line args (serve ...), which should be
// refused at once; one that starts instead is stopped after 20 s, so the
// test fails rather than hangs.
func serveRefused(args []string, stdout, stderr *bytes.Buffer, getenv func(string) (string, bool)) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return serve(ctx, args[1:], stdout, stderr, getenv)
}

// serveBriefly runs serve with args until it has started (printed its
// pgwire address), runs each fn on a client of it, and stops it.
func serveBriefly(t *testing.T, args []string, env map[string]string, fns ...func(context.Context, *pgx.Conn)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, logs syncBuf
	done := make(chan int, 1)
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	go func() { done <- serve(ctx, args[1:], &out, &logs, getenv) }()
	addrRe := regexp.MustCompile(`pgwire:\s+(\S+)`)
	deadline := time.Now().Add(60 * time.Second)
	var addr string
	for addr == "" {
		select {
		case code := <-done:
			t.Fatalf("serve %v exited %d at start: %s", args, code, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if m := addrRe.FindStringSubmatch(out.String()); m != nil {
			addr = m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve %v did not start: %s", args, logs.String())
		}
	}
	if len(fns) > 0 {
		qctx, qcancel := context.WithTimeout(ctx, time.Minute)
		defer qcancel()
		conn, err := pgx.Connect(qctx, "postgres://turbine@"+addr+"/turbine?sslmode=disable")
		if err != nil {
			t.Fatal(err)
		}
		for _, fn := range fns {
			fn(qctx, conn)
		}
		conn.Close(qctx)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve %v: exit %d: %s", args, code, logs.String())
	}
}

// clusterTopics lists the topics of cluster.
func clusterTopics(t *testing.T, cluster *kfake.Cluster) map[string]bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, name := range td.Names() {
		out[name] = true
	}
	return out
}
