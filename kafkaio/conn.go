// Package kafkaio is the one place that knows how to reach Kafka. Conn
// holds the connection settings (seed brokers, SASL, TLS) and turns them
// into the kgo options every client the engine makes must carry: a client
// built without them cannot talk to a cluster that requires SASL or TLS,
// which is every managed Kafka.
package kafkaio

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanisms Conn accepts, spelled as Kafka spells them.
const (
	MechPlain       = "PLAIN"
	MechSCRAMSHA256 = "SCRAM-SHA-256"
	MechSCRAMSHA512 = "SCRAM-SHA-512"
)

// Mechanisms lists the accepted SASL mechanisms, for error messages.
var Mechanisms = []string{MechPlain, MechSCRAMSHA256, MechSCRAMSHA512}

// Conn is how to connect to the cluster. The zero value but for Brokers is
// a plain-text, unauthenticated connection.
type Conn struct {
	Brokers []string

	// SASLMechanism is "" (no SASL) or one of Mechanisms.
	SASLMechanism string
	SASLUser      string
	SASLPassword  string

	// TLS turns on TLS to the brokers; setting any TLS* file implies it.
	TLS bool
	// TLSCA is a PEM file of the CA(s) that signed the brokers'
	// certificates; empty trusts the system's roots.
	TLSCA string
	// TLSCert and TLSKey are PEM files of a client certificate and its
	// key, for brokers that authenticate clients by certificate (mTLS).
	TLSCert, TLSKey string
	// TLSServerName overrides the name checked against the brokers'
	// certificates (default: the host of each broker address).
	TLSServerName string

	// ReplicationFactor is the replication factor of every topic the
	// server creates, internal or not (0: the broker's
	// default.replication.factor). A real cluster wants 3.
	ReplicationFactor int
	// MinInsyncReplicas, when set, is the min.insync.replicas of every
	// topic the server creates (0: the broker's default). With acks=all
	// (every producer here) it is how many replicas must hold a write.
	MinInsyncReplicas int

	// base is the validated option set, built by Validate.
	base []kgo.Opt
}

// Validate checks the settings and prepares the options, reading the
// certificate files once so a bad path or PEM fails at start, naming it.
func (c *Conn) Validate() error {
	if len(c.Brokers) == 0 {
		return fmt.Errorf("kafka: no brokers")
	}
	if c.ReplicationFactor < 0 || c.ReplicationFactor > math.MaxInt16 {
		return fmt.Errorf("kafka: replication factor %d: want 1 to %d, or 0 for the broker's default", c.ReplicationFactor, math.MaxInt16)
	}
	if c.MinInsyncReplicas < 0 || c.ReplicationFactor > 0 && c.MinInsyncReplicas > c.ReplicationFactor {
		return fmt.Errorf("kafka: min.insync.replicas %d: want 1 to the replication factor (%d), or 0 for the broker's default", c.MinInsyncReplicas, c.ReplicationFactor)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	mech, err := c.saslMechanism()
	if err != nil {
		return err
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	if c.TLS || c.TLSCA != "" || c.TLSCert != "" || c.TLSKey != "" {
		tc, err := c.tlsConfig()
		if err != nil {
			return err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	c.base = opts
	return nil
}

func (c *Conn) saslMechanism() (sasl.Mechanism, error) {
	mech := strings.ToUpper(strings.TrimSpace(c.SASLMechanism))
	if mech == "" {
		if c.SASLUser != "" {
			return nil, fmt.Errorf("kafka-sasl-username is set but kafka-sasl-mechanism is not: use one of %s", strings.Join(Mechanisms, ", "))
		}
		return nil, nil
	}
	if c.SASLUser == "" {
		return nil, fmt.Errorf("kafka-sasl-mechanism %s needs kafka-sasl-username", mech)
	}
	user, pass := c.SASLUser, c.SASLPassword
	switch mech {
	case MechPlain:
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case MechSCRAMSHA256:
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case MechSCRAMSHA512:
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("kafka-sasl-mechanism %q is not valid: use one of %s", c.SASLMechanism, strings.Join(Mechanisms, ", "))
}

func (c *Conn) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLSServerName}
	if c.TLSCA != "" {
		pem, err := os.ReadFile(c.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("kafka-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka-tls-ca: no PEM certificate in %s", c.TLSCA)
		}
		tc.RootCAs = pool
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, fmt.Errorf("kafka-tls-cert and kafka-tls-key go together: set both for mTLS, or neither")
	}
	if c.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("kafka-tls-cert/kafka-tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Opts returns the connection options followed by extra, ready for
// kgo.NewClient. Every client the engine makes is built from it. Validate
// must have succeeded; a Conn that was never validated still yields the
// seed brokers, so tests that build one by hand keep working.
func (c *Conn) Opts(extra ...kgo.Opt) []kgo.Opt {
	base := c.base
	if base == nil {
		base = []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	}
	out := make([]kgo.Opt, 0, len(base)+len(extra))
	out = append(out, base...)
	return append(out, extra...)
}

// Secured reports whether the connection authenticates or encrypts.
func (c *Conn) Secured() bool {
	return c.SASLMechanism != "" || c.TLS || c.TLSCA != "" || c.TLSCert != ""
}
