//go:build realkafka

// Package kafkaci holds the tests that need a real Apache Kafka broker and
// its Java client; ci/kafka/run.sh (`make test-kafka`) starts the broker,
// fetches the jars and runs them with -tags realkafka.
package kafkaci

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/server"
	"github.com/turbinesql/turbinesql/state"
)

// keyFor is Placement.key in Placement.java: the two must stay equal.
func keyFor(i int) string {
	switch i % 5 {
	case 0:
		return fmt.Sprintf("user-%d", i)
	case 1:
		return fmt.Sprintf("%d", int64(i)*7919-50000)
	case 2:
		return fmt.Sprintf("tenant-%d/ünïcødé-%d-日本", i%97, i)
	case 3:
		if i%15 == 3 {
			return ""
		}
		return fmt.Sprintf("k%d", i)
	default:
		return strings.Repeat("x", 1+i%40) + fmt.Sprint(i)
	}
}

func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run these tests with `make test-kafka` (ci/kafka/run.sh)", name)
	}
	return v
}

// java runs Placement (Placement.java, compiled by run.sh) with Kafka's
// client jars on the class path.
func java(t *testing.T, args ...string) string {
	t.Helper()
	cp := env(t, "KAFKA_CI_CLASSPATH")
	cmd := exec.Command("java", append([]string{"-Xmx256m", "-cp", cp, "Placement"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("java Placement %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func runID() string { return fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff) }

func admin(t *testing.T) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env(t, "TURBINE_TEST_BROKERS")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

func createTopic(ctx context.Context, t *testing.T, adm *kadm.Client, topic string, n int) {
	t.Helper()
	r, err := adm.CreateTopic(ctx, int32(n), 1, nil, topic)
	if err == nil {
		err = r.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
}

// readTopic returns every record of topic, from the start of each
// partition to its end now.
func readTopic(ctx context.Context, t *testing.T, adm *kadm.Client, topic string) []*kgo.Record {
	t.Helper()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	assign := map[int32]kgo.Offset{}
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset %s/%d: %v", topic, o.Partition, o.Err)
		}
		if o.Offset > 0 {
			assign[o.Partition] = kgo.NewOffset().AtStart()
			remaining[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(env(t, "TURBINE_TEST_BROKERS")),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %v (partitions left: %v)", topic, ctx.Err(), remaining)
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("read %s/%d: %v", fe.Topic, fe.Partition, fe.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if r.Offset+1 >= remaining[r.Partition] {
				delete(remaining, r.Partition)
			}
		})
	}
	return out
}

func startServer(ctx context.Context, t *testing.T) *pgx.Conn {
	t.Helper()
	srv, err := server.Start(ctx, server.Config{
		DataDir: t.TempDir(), PGAddr: "127.0.0.1:0",
		Brokers: []string{env(t, "TURBINE_TEST_BROKERS")}, AppID: "ci-placement-" + runID(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("start TurbineSQL on the real broker: %v", err)
	}
	t.Cleanup(srv.Close)
	conn, err := pgx.Connect(ctx, "postgres://turbine@"+srv.PGAddr()+"/turbine?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestKeyGroupsAgreeWithJava: a key's group is the partition the Java
// producer would pick among 960 partitions, and its owner among n
// partitions is what the producer picks among n.
func TestKeyGroupsAgreeWithJava(t *testing.T) {
	const count = 20000
	for _, n := range []int{960, 7} {
		out := java(t, "groups", "-", strconv.Itoa(count), strconv.Itoa(n))
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != count {
			t.Fatalf("java printed %d lines, want %d:\n%.2000s", len(lines), count, out)
		}
		bad := 0
		for _, line := range lines {
			is, ps, _ := strings.Cut(line, "\t")
			i, err1 := strconv.Atoi(is)
			javaP, err2 := strconv.Atoi(ps)
			if err1 != nil || err2 != nil {
				t.Fatalf("bad line from java: %q", line)
			}
			key := []byte(keyFor(i))
			got := state.PartitionFor(key, n)
			if n == 960 {
				got = int32(state.KeyGroup(key))
			}
			if got != int32(javaP) {
				if bad++; bad <= 10 {
					t.Errorf("key %q: the Java client picks %d of %d, TurbineSQL %d", key, javaP, n, got)
				}
			}
		}
		t.Logf("%d keys, %d partitions: %d disagreements", count, n, bad)
	}
}

// TestJavaProducerPlacement: records the Java producer places with its
// default partitioner (murmur2 of the key) lie where TurbineSQL's murmur2
// and key groups say, for divisors of 960 and not, and TurbineSQL reads them
// back whatever the batch compression.
func TestJavaProducerPlacement(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, adm := admin(t)
	const count = 2000
	cases := []struct {
		n     int
		codec string
	}{{1, "none"}, {2, "gzip"}, {4, "snappy"}, {6, "lz4"}, {7, "zstd"}, {12, "none"}, {120, "zstd"}}
	id := runID()
	topic := func(n int) string { return fmt.Sprintf("java-placed-%s-%d", id, n) }
	args := []string{"produce", env(t, "TURBINE_TEST_BROKERS"), fmt.Sprint(count)}
	for _, c := range cases {
		createTopic(ctx, t, adm, topic(c.n), c.n)
		args = append(args, topic(c.n)+"="+c.codec)
	}
	java(t, args...)

	for _, c := range cases {
		recs := readTopic(ctx, t, adm, topic(c.n))
		if len(recs) != count {
			t.Errorf("%s: read %d records, the Java producer wrote %d", topic(c.n), len(recs), count)
		}
		bad := 0
		seen := map[int32]int{}
		for _, r := range recs {
			seen[r.Partition]++
			want := state.PartitionFor(r.Key, c.n)
			owner := want
			if 960%c.n == 0 {
				owner = state.OwnerOf(state.KeyGroup(r.Key), c.n)
			}
			if r.Partition != want || r.Partition != owner {
				if bad++; bad <= 10 {
					t.Errorf("%s: key %q is on partition %d (Java client); TurbineSQL's murmur2 says %d, key-group owner %d",
						topic(c.n), r.Key, r.Partition, want, owner)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d records misplaced", topic(c.n), bad, len(recs))
		}
		t.Logf("%s (%d partitions, %s): %d records, %d partitions used, %d misplaced", topic(c.n), c.n, c.codec, len(recs), len(seen), bad)
	}

	// TurbineSQL reads what the Java client wrote, every codec.
	conn := startServer(ctx, t)
	wantSum := int64(count) * (count - 1) / 2
	for _, c := range cases {
		src := fmt.Sprintf("jp%d", c.n)
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE SOURCE %s (k TEXT, i BIGINT) WITH (topic = '%s', partition_key = 'k')", src, topic(c.n))); err != nil {
			t.Fatalf("create source over %s: %v", topic(c.n), err)
		}
		var n, sum int64
		if err := conn.QueryRow(ctx, "SELECT COUNT(*), SUM(i) FROM "+src).Scan(&n, &sum); err != nil {
			t.Fatalf("select from %s: %v", src, err)
		}
		if n != count || sum != wantSum {
			t.Errorf("%s (%s): TurbineSQL read COUNT %d SUM %d, want %d and %d", topic(c.n), c.codec, n, sum, count, wantSum)
		}
	}
}

// TestInsertPlacementAgreesWithJava: records TurbineSQL's INSERT writes
// to a source with a partition_key sit where Kafka's Java client
// (BuiltInPartitioner.partitionForKey) would put their keys, for TEXT and
// BIGINT keys.
//
// It also checks the keyed output of an upsert stream (GROUP BY without a
// window: one record per changed group, keyed by the group key). The other
// producers of keyed records named in the design (a stream's message_key,
// internal repartition topics) do not exist yet; add them here when they
// land.
func TestInsertPlacementAgreesWithJava(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, adm := admin(t)
	conn := startServer(ctx, t)
	id := runID()
	const count = 1500
	cases := []struct {
		name, keyType string
		n             int
		key           func(i int) string // SQL literal
	}{
		{"text", "TEXT", 12, func(i int) string { return "'" + keyFor(i) + "'" }},
		{"text7", "TEXT", 7, func(i int) string { return "'" + keyFor(i) + "'" }},
		{"bigint", "BIGINT", 60, func(i int) string { return fmt.Sprint(int64(i)*104729 - 1_000_000) }},
	}
	topics := []string{"verify", env(t, "TURBINE_TEST_BROKERS"), fmt.Sprint(count)}
	for _, c := range cases {
		topic := fmt.Sprintf("ci-insert-%s-%s", id, c.name)
		topics = append(topics, topic)
		t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
		src := "ins_" + c.name
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE SOURCE %s (k %s, v BIGINT) WITH (topic = '%s', partitions = %d, partition_key = 'k')",
			src, c.keyType, topic, c.n)); err != nil {
			t.Fatalf("create source %s: %v", src, err)
		}
		for lo := 0; lo < count; lo += 500 {
			var b strings.Builder
			fmt.Fprintf(&b, "INSERT INTO %s VALUES ", src)
			for i := lo; i < lo+500 && i < count; i++ {
				if i > lo {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "(%s, %d)", c.key(i), i)
			}
			if _, err := conn.Exec(ctx, b.String()); err != nil {
				t.Fatalf("insert into %s: %v", src, err)
			}
		}
	}
	// Unique BIGINT keys, one row each: the upsert stream writes each group
	// once, keyed by its decimal text, on 24 partitions.
	up := fmt.Sprintf("ci-upsert-%s", id)
	topics = append(topics, up)
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), up) })
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE STREAM up_bigint WITH (topic = '%s', partitions = 24) AS SELECT k, COUNT(*) AS n FROM ins_bigint GROUP BY k", up)); err != nil {
		t.Fatalf("create upsert stream: %v", err)
	}
	if _, err := conn.Exec(ctx, "FLUSH"); err != nil {
		t.Fatalf("flush: %v", err)
	}
	t.Log(strings.TrimSpace(java(t, topics...)))
}
