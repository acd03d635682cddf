// Command kafkaready waits until a Kafka broker answers and can create and
// delete a topic, for ci/kafka/run.sh. It gives up when the broker process
// (-pid) exits or the timeout passes, and exits non-zero saying why.
//
// With -add-scram-user it then creates that SCRAM-SHA-256 user (password
// from $KAFKAREADY_SCRAM_PASSWORD); with the -sasl-*/-tls-ca flags it
// connects as the engine would, through a SASL_SSL listener.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/kafkaio"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "broker address")
	pid := flag.Int("pid", 0, "broker process id: stop waiting if it exits")
	timeout := flag.Duration("timeout", 90*time.Second, "how long to wait")
	addUser := flag.String("add-scram-user", "", "once ready, create this SCRAM-SHA-256 user (password in $KAFKAREADY_SCRAM_PASSWORD)")
	conn := kafkaio.Conn{}
	flag.StringVar(&conn.SASLMechanism, "sasl-mechanism", "", "SASL mechanism to connect with")
	flag.StringVar(&conn.SASLUser, "sasl-username", "", "SASL user (password in $KAFKAREADY_SASL_PASSWORD)")
	flag.StringVar(&conn.TLSCA, "tls-ca", "", "CA of the broker's certificate (turns TLS on)")
	flag.Parse()
	conn.Brokers = []string{*brokers}
	conn.SASLPassword = os.Getenv("KAFKAREADY_SASL_PASSWORD")
	start := time.Now()
	if err := wait(&conn, *pid, *timeout, *addUser); err != nil {
		fmt.Fprintf(os.Stderr, "kafkaready: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("kafkaready: broker %s ready after %.1fs\n", *brokers, time.Since(start).Seconds())
}

func wait(conn *kafkaio.Conn, pid int, timeout time.Duration, addUser string) error {
	brokers := conn.Brokers[0]
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := conn.Validate(); err != nil {
		return err
	}
	cl, err := kgo.NewClient(conn.Opts(kgo.RetryTimeout(2 * time.Second))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last error
	for {
		if pid > 0 && syscall.Kill(pid, 0) != nil {
			return fmt.Errorf("broker process %d exited (last error: %v)", pid, last)
		}
		if last = probe(ctx, adm); last == nil {
			if addUser == "" {
				return nil
			}
			return addSCRAMUser(ctx, adm, addUser, os.Getenv("KAFKAREADY_SCRAM_PASSWORD"))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker %s not ready after %v: %v", brokers, timeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// probe creates and deletes a throwaway topic: that needs the controller
// and the broker to be up, not just the listener.
func probe(ctx context.Context, adm *kadm.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := adm.BrokerMetadata(ctx); err != nil {
		return err
	}
	const topic = "turbinesql-ci-ready-probe"
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		return err
	} else if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
		return r.Err
	}
	rs, err := adm.DeleteTopics(ctx, topic)
	if err != nil {
		return err
	}
	return rs.Error()
}

// addSCRAMUser creates (or updates) a SCRAM-SHA-256 credential: in KRaft
// the controller stores it, and the broker's SASL listeners accept it.
func addSCRAMUser(ctx context.Context, adm *kadm.Client, user, pass string) error {
	if pass == "" {
		return errors.New("-add-scram-user needs $KAFKAREADY_SCRAM_PASSWORD")
	}
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: kadm.ScramSha256, Iterations: 4096, Password: pass}})
	if err != nil {
		return fmt.Errorf("create SCRAM user %s: %w", user, err)
	}
	if err := res.Error(); err != nil {
		return fmt.Errorf("create SCRAM user %s: %w", user, err)
	}
	return nil
}
