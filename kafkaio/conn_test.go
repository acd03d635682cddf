package kafkaio

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turbinesql/turbinesql/internal/testcerts"
)

func TestValidateRefusesBadSettings(t *testing.T) {
	certs := testcerts.New(t)
	for name, c := range map[string]Conn{
		"no brokers":         {},
		"unknown mechanism":  {Brokers: []string{"b:9092"}, SASLMechanism: "GSSAPI", SASLUser: "u"},
		"user, no mechanism": {Brokers: []string{"b:9092"}, SASLUser: "u"},
		"mechanism, no user": {Brokers: []string{"b:9092"}, SASLMechanism: MechPlain},
		"cert without key":   {Brokers: []string{"b:9092"}, TLSCert: certs.Cert},
		"missing CA file":    {Brokers: []string{"b:9092"}, TLSCA: filepath.Join(t.TempDir(), "none.pem")},
		"CA file is not PEM": {Brokers: []string{"b:9092"}, TLSCA: writeFile(t, "not a certificate")},
		"key does not parse": {Brokers: []string{"b:9092"}, TLSCert: certs.Cert, TLSKey: certs.CA},
		"unknown SCRAM hash": {Brokers: []string{"b:9092"}, SASLMechanism: "scram-sha-999", SASLUser: "u"},
		"negative factor":    {Brokers: []string{"b:9092"}, ReplicationFactor: -1},
		"isr above factor":   {Brokers: []string{"b:9092"}, ReplicationFactor: 2, MinInsyncReplicas: 3},
	} {
		c := c
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	for name, c := range map[string]Conn{
		"plain":       {Brokers: []string{"b:9092"}},
		"scram-512":   {Brokers: []string{"b:9092"}, SASLMechanism: "scram-sha-512", SASLUser: "u", SASLPassword: "p"},
		"mTLS and CA": {Brokers: []string{"b:9092"}, TLSCA: certs.CA, TLSCert: certs.Cert, TLSKey: certs.Key},
	} {
		c := c
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		// seed brokers, plus SASL and/or TLS when configured
		want := 1
		if c.SASLMechanism != "" {
			want++
		}
		if c.TLSCA != "" {
			want++
		}
		if got := len(c.Opts()); got != want {
			t.Errorf("%s: %d options, want %d", name, got, want)
		}
	}
}

func writeFile(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "f.pem")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEveryClientUsesConn: a Kafka client of the engine built without the
// Conn's options silently ignores SASL and TLS, and only fails against a
// secured cluster. Every kgo.NewClient outside tests, benchmarks and CI
// tools must take its options from Conn.Opts. The audit (package audit)
// is such a tool: it starts its own broker, or is given a PLAINTEXT
// listener (README), and acts as an outside producer and reader.
func TestEveryClientUsesConn(t *testing.T) {
	checked := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "bench", "ci", "audit", ".git", "testdata", "clients":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		for i := strings.Index(src, "kgo.NewClient("); i >= 0; {
			checked++
			call := src[i+len("kgo.NewClient("):]
			if end := strings.IndexByte(call, '\n'); end >= 0 && !strings.Contains(call[:end], "Opts(") {
				t.Errorf("%s: kgo.NewClient without Conn.Opts: %s", path, strings.TrimSpace(call[:end]))
			}
			next := strings.Index(src[i+1:], "kgo.NewClient(")
			if next < 0 {
				break
			}
			i += 1 + next
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The shared client, consumers and bounded reads (kafkaio), and the
	// CI readiness probe: all the engine makes.
	if checked < 3 {
		t.Fatalf("only %d kgo.NewClient calls found: the scan is broken", checked)
	}
}
