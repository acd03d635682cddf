package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/internal/testcerts"
)

func startConfigured(t *testing.T, dir string, mutate func(*Config)) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{DataDir: dir, PGAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0", AppID: "sec",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	mutate(&cfg)
	srv, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	return srv
}

// sqlState is the SQLSTATE of a pgx error, "" when there is none.
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestSCRAMOverTLS logs in with SCRAM-SHA-256 over TLS (verify-full
// against the test CA) and checks every refusal: no password, a wrong
// one, an unknown user, plain text under --tls-required; then that CREATE,
// ALTER and DROP USER take effect, that roles are enforced, that users
// survive a restart, and that no password reaches the catalog topic.
func TestSCRAMOverTLS(t *testing.T) {
	certs := testcerts.New(t)
	dir := t.TempDir()
	cfgFn := func(c *Config) {
		c.Auth, c.InitialPassword = AuthSCRAM, "Adm1n-pass"
		c.TLSCert, c.TLSKey, c.TLSRequired = certs.Cert, certs.Key, true
	}
	srv := startConfigured(t, dir, cfgFn)
	defer func() { srv.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	url := func(user, pass, mode string) string {
		u := "postgres://" + user
		if pass != "" {
			u += ":" + pass
		}
		u += "@" + srv.PGAddr() + "/turbine?sslmode=" + mode
		if mode == "verify-full" {
			u += "&sslrootcert=" + certs.CA
		}
		return u
	}
	login := func(user, pass string) (*pgx.Conn, error) {
		return pgx.Connect(ctx, url(user, pass, "verify-full"))
	}
	mustLogin := func(user, pass string) *pgx.Conn {
		t.Helper()
		c, err := login(user, pass)
		if err != nil {
			t.Fatalf("login %s: %v", user, err)
		}
		return c
	}
	refused := func(what, user, pass, mode, code string) {
		t.Helper()
		c, err := pgx.Connect(ctx, url(user, pass, mode))
		if err == nil {
			c.Close(ctx)
			t.Fatalf("%s: logged in", what)
		}
		if got := sqlState(err); got != code {
			t.Fatalf("%s: SQLSTATE %q, want %s (%v)", what, got, code, err)
		}
	}

	refused("no password", "turbine", "", "verify-full", "28P01")
	refused("wrong password", "turbine", "nope", "verify-full", "28P01")
	refused("unknown user", "mallory", "Adm1n-pass", "verify-full", "28P01")
	refused("plain text under tls-required", "turbine", "Adm1n-pass", "disable", "28000")

	adm := mustLogin("turbine", "Adm1n-pass")
	defer adm.Close(ctx)
	if _, ok := adm.PgConn().Conn().(*tls.Conn); !ok {
		t.Fatalf("connection is %T, not TLS", adm.PgConn().Conn())
	}
	exec := func(c *pgx.Conn, sql string) error {
		_, err := c.Exec(ctx, sql)
		return err
	}
	for _, s := range []string{
		"CREATE SOURCE ev (k TEXT, n BIGINT) WITH (topic = 'ev', partitions = 2, partition_key = 'k')",
		"INSERT INTO ev VALUES ('a', 1), ('b', 2)",
		"CREATE USER alice WITH PASSWORD 'al1ce-first'",
	} {
		if err := exec(adm, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := exec(adm, "CREATE USER alice WITH PASSWORD 'x'"); sqlState(err) != "42710" {
		t.Fatalf("duplicate user: %v", err)
	}

	alice := mustLogin("alice", "al1ce-first")
	var n int64
	if err := alice.QueryRow(ctx, "SELECT SUM(n) FROM ev").Scan(&n); err != nil || n != 3 {
		t.Fatalf("reader SELECT: %d, %v", n, err)
	}
	for _, s := range []string{
		"INSERT INTO ev VALUES ('c', 3)",
		"CREATE SOURCE ev2 (k TEXT) WITH (topic = 'ev2')",
		"CREATE STREAM s WITH (topic = 's') AS SELECT k FROM ev",
		"DROP SOURCE ev",
		"CREATE USER bob WITH PASSWORD 'b'",
		"ALTER USER alice ADMIN",
	} {
		if err := exec(alice, s); sqlState(err) != "42501" {
			t.Fatalf("reader ran %q: %v", s, err)
		}
	}
	// A reader may change its own password, as in PostgreSQL.
	if err := exec(alice, "ALTER USER alice WITH PASSWORD 'al1ce-second'"); err != nil {
		t.Fatalf("own password: %v", err)
	}
	alice.Close(ctx)
	refused("old password after ALTER", "alice", "al1ce-first", "verify-full", "28P01")
	alice = mustLogin("alice", "al1ce-second")
	alice.Close(ctx)

	if err := exec(adm, "ALTER USER alice ADMIN"); err != nil {
		t.Fatal(err)
	}
	alice = mustLogin("alice", "al1ce-second")
	if err := exec(alice, "INSERT INTO ev VALUES ('c', 3)"); err != nil {
		t.Fatalf("admin alice INSERT: %v", err)
	}
	if err := exec(alice, "DROP USER alice"); sqlState(err) != "55006" {
		t.Fatalf("dropping oneself: %v", err)
	}
	alice.Close(ctx)
	if err := exec(adm, "CREATE USER carol WITH PASSWORD 'car0l'"); err != nil {
		t.Fatal(err)
	}
	if err := exec(adm, "DROP USER carol"); err != nil {
		t.Fatal(err)
	}
	refused("dropped user", "carol", "car0l", "verify-full", "28P01")
	if err := exec(adm, "DROP USER carol"); sqlState(err) != "42704" {
		t.Fatalf("drop unknown user: %v", err)
	}
	if err := exec(adm, "DROP USER IF EXISTS carol"); err != nil {
		t.Fatal(err)
	}

	// The catalog topic holds verifiers only.
	var raw bytes.Buffer
	var users int
	if err := srv.kafka.ReadAll(ctx, "turbine-sec-catalog", func(r *kgo.Record) error {
		raw.Write(r.Key)
		raw.Write(r.Value)
		if strings.HasPrefix(string(r.Key), "user/") && r.Value != nil {
			users++
			if !strings.Contains(string(r.Value), "SCRAM-SHA-256$4096:") {
				t.Errorf("user record without a verifier: %s", r.Value)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if users < 4 {
		t.Fatalf("only %d user records in the catalog topic", users)
	}
	for _, pw := range []string{"Adm1n-pass", "al1ce-first", "al1ce-second", "car0l"} {
		if bytes.Contains(raw.Bytes(), []byte(pw)) {
			t.Errorf("password %q appears in the catalog topic", pw)
		}
	}

	// Users, their passwords and roles survive a restart.
	adm.Close(ctx)
	srv.Close()
	srv = startConfigured(t, dir, cfgFn)
	alice = mustLogin("alice", "al1ce-second")
	defer alice.Close(ctx)
	if err := exec(alice, "INSERT INTO ev VALUES ('d', 4)"); err != nil {
		t.Fatalf("admin alice after restart: %v", err)
	}
	refused("dropped user after restart", "carol", "car0l", "verify-full", "28P01")
	var role string
	if err := alice.QueryRow(ctx, "SHOW USERS").Scan(new(string), &role); err != nil || role != "admin" {
		t.Fatalf("SHOW USERS first row: %q, %v", role, err)
	}
}

// TestSCRAMNeedsAUser: scram with no password for turbine and no users is
// refused at start instead of running a server nobody can log in to.
func TestSCRAMNeedsAUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Start(ctx, Config{DataDir: t.TempDir(), PGAddr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0", Auth: AuthSCRAM,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "TURBINE_PASSWORD") {
		t.Fatalf("started without any user: %v", err)
	}
}

// TestTrustRolesAndTLSOptional: under trust an unknown name is the demo's
// admin, a known reader stays a reader, and sslmode=require works when
// the server has a certificate without requiring it.
func TestTrustRolesAndTLSOptional(t *testing.T) {
	certs := testcerts.New(t)
	srv := startConfigured(t, t.TempDir(), func(c *Config) { c.TLSCert, c.TLSKey = certs.Cert, certs.Key })
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, mode := range []string{"disable", "require"} {
		c, err := pgx.Connect(ctx, "postgres://anyone@"+srv.PGAddr()+"/turbine?sslmode="+mode)
		if err != nil {
			t.Fatalf("sslmode=%s: %v", mode, err)
		}
		if _, err := c.Exec(ctx, "CREATE USER reader WITH PASSWORD 'r' LOGIN"); err != nil && sqlState(err) != "42710" {
			t.Fatalf("sslmode=%s: %v", mode, err)
		}
		c.Close(ctx)
	}
	c, err := pgx.Connect(ctx, "postgres://reader@"+srv.PGAddr()+"/turbine?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE SOURCE x (k TEXT)"); sqlState(err) != "42501" {
		t.Fatalf("reader under trust ran DDL: %v", err)
	}
}
