package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestRescaleCommand: the command's flags, and a refusal's exit (1, the
// reason on stderr). The rescale itself is tested in package rescale.
func TestRescaleCommand(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ",")
	getenv := func(string) (string, bool) { return "", false }
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"rescale"}, 2, "usage: turbinesql rescale --brokers B --app-id A"},
		{[]string{"rescale", "--brokers", brokers}, 2, "usage:"},
		// No default app id: it could name another deployment's app.
		{[]string{"rescale", "--brokers", brokers, "--to", "8"}, 2, "usage: turbinesql rescale --brokers B --app-id A"},
		{[]string{"rescale", "--brokers", brokers, "--app-id", "a", "--to", "7"}, 1, "turbinesql rescale: rescale refused: --to 7 does not divide 960"},
		{[]string{"rescale", "--brokers", brokers, "--app-id", "none", "--to", "8"}, 1,
			"rescale refused: app none has no catalog topic turbine-none-catalog: is the app id right?"},
		{[]string{"rescale", "--brokers", brokers, "--app-id", "turbinesql", "--to", "8", "--data-dir", t.TempDir(), "--data-dir", t.TempDir()}, 1, "has no catalog topic turbine-turbinesql-catalog"},
		{[]string{"rescale", "--brokers", brokers, "--app-id", "a", "--to", "8", "--kafka-sasl-mechanism", "GSSAPI"}, 2, "GSSAPI"},
		{[]string{"rescale", "--brokers", brokers, "--app-id", "a", "--to", "8", "--kafka-tls-ca", "/nonexistent/ca.pem"}, 2, "/nonexistent/ca.pem"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb, getenv)
		if code != c.code || !strings.Contains(errb.String(), c.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errb.String(), c.code, c.stderr)
		}
	}
}
