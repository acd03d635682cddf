package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/rescale"
)

// repeated is a flag given any number of times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// rescaleCmd runs `turbinesql rescale`: the offline move of a stopped
// app's keyed state to a new partition count (package rescale).
func rescaleCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) (string, bool)) int {
	fs := flag.NewFlagSet("rescale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", "", "comma-separated Kafka bootstrap brokers of the app [required]")
	// No default: the servers of an app on an outside cluster run with an
	// explicit id (serve refuses to start without one), and a default here
	// could name another deployment's app.
	app := fs.String("app-id", "", "the app id its servers run with (serve --app-id) [required]")
	to := fs.Int("to", 0, "the partition count to rescale to; must divide 960 [required]")
	// The same Kafka connection flags as serve's.
	var conn kafkaio.Conn
	fs.StringVar(&conn.SASLMechanism, "kafka-sasl-mechanism", "", "Kafka SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
	fs.StringVar(&conn.SASLUser, "kafka-sasl-username", "", "Kafka SASL user name")
	passFile := fs.String("kafka-sasl-password-file", "", "file holding the Kafka SASL password (or set TURBINE_KAFKA_SASL_PASSWORD)")
	fs.BoolVar(&conn.TLS, "kafka-tls", false, "connect to the brokers over TLS (implied by the other --kafka-tls-* flags)")
	fs.StringVar(&conn.TLSCA, "kafka-tls-ca", "", "PEM file of the CA that signed the brokers' certificates (default: system roots)")
	fs.StringVar(&conn.TLSCert, "kafka-tls-cert", "", "PEM client certificate for mTLS to the brokers")
	fs.StringVar(&conn.TLSKey, "kafka-tls-key", "", "PEM private key of --kafka-tls-cert")
	fs.StringVar(&conn.TLSServerName, "kafka-tls-server-name", "", "name to verify the brokers' certificates against (default: each broker's host)")
	var dirs, streams repeated
	fs.Var(&dirs, "data-dir", "a node's data dir (serve --data-dir); repeat for each node")
	fs.Var(&streams, "stream", "rescale only this stream; repeatable (default: every keyed stateful stream)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: turbinesql rescale --brokers B --app-id A --to M [--data-dir D ...] [--stream S ...] [--kafka-* ...]

Moves the keyed state of a stopped app's streams from their partition count
to M, whole key groups at a time (key by key from a count that does not
divide 960), in each stream's changelog; the input topic
grows to M if it has fewer partitions. Stop every server of the app first.`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *brokers == "" || *app == "" || *to == 0 || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			conn.Brokers = append(conn.Brokers, b)
		}
	}
	if *passFile != "" {
		b, err := os.ReadFile(*passFile)
		if err != nil {
			fmt.Fprintf(stderr, "turbinesql rescale: kafka-sasl-password-file: %v\n", err)
			return 2
		}
		conn.SASLPassword = strings.TrimRight(string(b), "\r\n")
	} else if v, ok := getenv("TURBINE_KAFKA_SASL_PASSWORD"); ok {
		conn.SASLPassword = v
	}
	if err := conn.Validate(); err != nil {
		fmt.Fprintf(stderr, "turbinesql rescale: %v\n", err)
		return 2
	}
	k, err := kafkaio.New(&conn)
	if err != nil {
		fmt.Fprintf(stderr, "turbinesql rescale: %v\n", err)
		return 1
	}
	defer k.Close()
	if err := k.Ping(ctx); err != nil {
		fmt.Fprintf(stderr, "turbinesql rescale: %v\n", err)
		return 1
	}
	if _, err := rescale.Run(ctx, k, rescale.Options{AppID: *app, To: *to, DataDirs: dirs, Streams: streams, Out: stdout}); err != nil {
		fmt.Fprintf(stderr, "turbinesql rescale: %v\n", err)
		return 1
	}
	return 0
}
