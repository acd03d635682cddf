package pgwire_test

import (
	"bytes"
	"context"
	"github.com/turbinesql/turbinesql/internal/testenv"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPsql runs the real psql client (libpq) against the server. psql is
// optional on developer machines; CI_REQUIRE_PSQL=1 makes its absence a
// failure.
func TestPsql(t *testing.T) {
	psql := testenv.Psql(t)
	_, addr := startServer(t, newFakeBackend())
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		base := []string{"-X", "-w", "-h", host, "-p", port, "-U", "u", "db"}
		cmd := exec.CommandContext(ctx, psql, append(base, args...)...)
		// A clean environment: no user's service file, password file or
		// connection defaults may leak in. sslmode stays at libpq's
		// default (prefer), so the SSLRequest refusal is exercised too.
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PGCONNECT_TIMEOUT=5", "LC_ALL=C"}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}

	t.Run("query", func(t *testing.T) {
		out, stderr, err := run("-A", "-t", "-F", ",", "-c", "select typed")
		if err != nil {
			t.Fatalf("psql: %v\n%s", err, stderr)
		}
		want := "1,2.5,alice,t,2026-01-01 00:00:01,2026-01-01 00:00:01+00\n" +
			"-7,1e+20,,f,1999-12-31 23:59:59.123456,1999-12-31 23:59:59.123456+00\n"
		if out != want {
			t.Errorf("output:\n%s\nwant:\n%s", out, want)
		}
	})

	t.Run("aligned with header and tag", func(t *testing.T) {
		out, stderr, err := run("-c", "select three", "-c", "create source s")
		if err != nil {
			t.Fatalf("psql: %v\n%s", err, stderr)
		}
		for _, want := range []string{" n \n---\n 1\n 2\n 3\n(3 rows)\n", "CREATE SOURCE\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("output %q lacks %q", out, want)
			}
		}
	})

	t.Run("error", func(t *testing.T) {
		_, stderr, err := run("-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-c", "select * from missing")
		if err == nil {
			t.Fatal("psql succeeded on a failing statement")
		}
		if !strings.Contains(stderr, `ERROR:  42P01: plan: relation "missing" does not exist`) ||
			!strings.Contains(stderr, "HINT:  check the name") {
			t.Errorf("stderr: %s", stderr)
		}
	})
}
