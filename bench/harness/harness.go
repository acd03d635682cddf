// Package harness holds what the end-to-end benchmarks and the chaos audit
// share: a Kafka broker in a child process (so the CPU time a benchmark
// reads is the engine's own, and the broker outlives a server that is
// killed), and the process's CPU time and peak RSS.
package harness

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/turbinesql/turbinesql/state"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const childFlag = "-broker-child"

// MaybeRunBroker is the first call of a benchmark's main: started as the
// broker child (childFlag, then optionally a listen address and a data
// directory), it runs the broker until its stdin closes, and exits.
func MaybeRunBroker() {
	if len(os.Args) < 2 || os.Args[1] != childFlag {
		return
	}
	addr := "127.0.0.1:0"
	if len(os.Args) > 2 {
		addr = os.Args[2]
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.ListenFn(func(network, _ string) (net.Listener, error) {
		return net.Listen(network, addr)
	})}
	if len(os.Args) > 3 {
		opts = append(opts, kfake.DataDir(os.Args[3]))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "broker:", err)
		os.Exit(1)
	}
	fmt.Println(c.ListenAddrs()[0])
	_, _ = io.Copy(io.Discard, os.Stdin) // the parent exiting closes it
	c.Close()                            // with a data dir: persists the topics
	os.Exit(0)
}

// StartBroker starts a kfake broker in a child process (this binary, run
// with the child flag) and returns its address and a stop function.
func StartBroker() (addr string, stop func(), err error) {
	return StartBrokerAt("", "")
}

// StartBrokerAt is StartBroker listening on listen (empty: a free loopback
// port) and, when dataDir is set, persisting its topics there: stopping it
// and starting it again on the same address and directory is a broker
// restart that keeps every record.
func StartBrokerAt(listen, dataDir string) (addr string, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	args := []string{childFlag}
	if listen != "" || dataDir != "" {
		args = append(args, cmp.Or(listen, "127.0.0.1:0"))
	}
	if dataDir != "" {
		args = append(args, dataDir)
	}
	cmd := exec.Command(self, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start broker process: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		return "", nil, fmt.Errorf("broker process gave no address: %w", err)
	}
	return strings.TrimSpace(line), func() { stdin.Close(); _ = cmd.Wait() }, nil
}

// CPUSeconds is the CPU time of this process so far (user + system).
func CPUSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// PeakRSSMB is this process's peak resident set size.
func PeakRSSMB() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) / 1024 // Linux reports KiB
}

// ProduceBacklog writes the W2 workload's events to topic (created with
// parts partitions): keys user-0 .. user-{keys-1} drawn at random (seeded),
// each placed by murmur2, event time spread evenly over 100 s, JSON
// {"k":..., "ts": epoch ms}.
func ProduceBacklog(ctx context.Context, broker, topic string, events, keys, parts int) error {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	span := int64(100_000) // 100 s of event time
	return ProduceKeyed(ctx, broker, topic, parts, events, func(i int) (key, value []byte) {
		k := "user-" + strconv.Itoa(rng.IntN(keys))
		ts := base + int64(i)*span/int64(events)
		return []byte(k), []byte(`{"k":"` + k + `","ts":` + strconv.FormatInt(ts, 10) + `}`)
	})
}

// ProduceKeyed writes n records made by rec (called in order, i from 0)
// to topic, created with parts partitions if it is not there, each placed
// by murmur2 of its key as a Java producer and TurbineSQL place them. It
// returns the first failure.
func ProduceKeyed(ctx context.Context, broker, topic string, parts, n int, rec func(i int) (key, value []byte)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(200_000))
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := createTopic(ctx, cl, topic, parts); err != nil {
		return err
	}
	var mu sync.Mutex
	var failed error
	for i := 0; i < n; i++ {
		k, v := rec(i)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: k, Value: v, Partition: state.PartitionFor(k, parts)}, func(_ *kgo.Record, err error) {
			mu.Lock() // on franz-go's goroutine
			defer mu.Unlock()
			if err != nil && failed == nil {
				failed = err
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return failed
}

func createTopic(ctx context.Context, cl *kgo.Client, topic string, parts int) error {
	// A produce that creates the topic would pick the broker's default count.
	_, err := kadm.NewClient(cl).CreateTopic(ctx, int32(parts), 1, nil, topic)
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return nil // written to again (bench/scale declares on it empty first)
	}
	return err
}

// StreamCounts is what SHOW STREAMS says the (last) stream read, wrote
// and counted late.
func StreamCounts(ctx context.Context, conn *pgx.Conn) (in, out, late int64, err error) {
	rows, err := conn.Query(ctx, "SHOW STREAMS")
	if err != nil {
		return 0, 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return 0, 0, 0, err
		}
		in, out, late = vals[5].(int64), vals[6].(int64), vals[7].(int64)
	}
	return in, out, late, rows.Err()
}
