package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/turbinesql/turbinesql/internal/slt"
	"github.com/turbinesql/turbinesql/internal/testcerts"
	"github.com/turbinesql/turbinesql/kafkaio"
)

// TestSecuredBroker runs the engine end to end against a broker that
// requires SASL/SCRAM-SHA-256 over TLS (kfake does both): without the
// credentials it cannot start; with them every client it makes (admin,
// producer, stream consumers, the repartition and combine hops, SELECT's
// reader) gets through, and the slt files covering local, repartition and
// combine plans give their usual results, across a restart too.
func TestSecuredBroker(t *testing.T) {
	parallel(t)
	certs := testcerts.New(t)
	cluster := secureCluster(t, certs)
	good := kafkaio.Conn{SASLMechanism: kafkaio.MechSCRAMSHA256, SASLUser: "engine", SASLPassword: "k4fka-secret", TLSCA: certs.CA}

	for name, conn := range map[string]kafkaio.Conn{
		"no SASL":        {TLSCA: certs.CA},
		"wrong password": {SASLMechanism: kafkaio.MechSCRAMSHA256, SASLUser: "engine", SASLPassword: "guess", TLSCA: certs.CA},
		"no TLS":         {SASLMechanism: kafkaio.MechSCRAMSHA256, SASLUser: "engine", SASLPassword: "k4fka-secret"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		_, err := Start(ctx, Config{DataDir: t.TempDir(), PGAddr: "127.0.0.1:0", Brokers: cluster.ListenAddrs(), Kafka: conn, AppID: "sec",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		cancel()
		if err == nil {
			t.Fatalf("%s: started against a SASL/TLS broker", name)
		}
		if errors.Is(err, ErrAppIDRequired) {
			t.Fatalf("%s: refused for its app id, not its credentials: %v", name, err)
		}
		t.Logf("%s: refused: %v", name, err)
	}

	for _, file := range []string{"combine.slt", "tumble_local.slt", "restart.go.slt"} {
		t.Run(file, func(t *testing.T) {
			// A broker per file: the files use the same topic names.
			cluster := secureCluster(t, certs)
			dir := t.TempDir()
			start := func() *Server {
				return startConfigured(t, dir, func(c *Config) { c.Brokers, c.Kafka = cluster.ListenAddrs(), good })
			}
			srv := start()
			defer func() { srv.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			conn := connect(ctx, t, srv)
			defer conn.Close(ctx)
			err := slt.RunFile(ctx, conn, "../testdata/sqllogic/"+file, slt.Options{
				Engine: "turbinesql", Timeout: 60 * time.Second,
				Restart: func(ctx context.Context) (*pgx.Conn, error) {
					srv.Close()
					srv = start()
					return pgx.Connect(ctx, "postgres://turbine@"+srv.PGAddr()+"/turbine?sslmode=disable")
				},
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// secureCluster is a kfake broker requiring SASL/SCRAM-SHA-256 (user
// engine) over TLS with certs' server certificate.
func secureCluster(t *testing.T, certs testcerts.Files) *kfake.Cluster {
	t.Helper()
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "engine", "k4fka-secret"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{certs.Pair}, MinVersion: tls.VersionTLS12}),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }),
		kfake.BrokerConfigs(map[string]string{"group.initial.rebalance.delay.ms": "0"}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	return cluster
}
