// Package kafkaio is the only package of the engine that talks to Kafka:
// the embedded broker, the shared admin client and producer, consumers of
// a stage's partitions, offset commits to consumer groups, and bounded
// reads of a topic. Everything else sees records (Record) and the small
// interfaces it defines itself.
package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record is a Kafka record as the engine reads and writes it.
type Record = kgo.Record

// Header is one header of a Record.
type Header = kgo.RecordHeader

// Embedded is the in-process broker of the embedded default.
type Embedded = kfake.Cluster

// StartEmbedded runs kfake in process, listening on addr, persisting its
// topics under dir so they survive a restart.
func StartEmbedded(addr, dir string) (*Embedded, error) {
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.DataDir(dir),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, addr) }),
		kfake.BrokerConfigs(map[string]string{"group.initial.rebalance.delay.ms": "0"}),
	)
	if err != nil {
		return nil, fmt.Errorf("start embedded Kafka broker on %s: %w (is the port taken? pass --kafka-addr)", addr, err)
	}
	return c, nil
}

// Client wraps the clients the engine shares: an admin client and a
// producer that places every record itself (ManualPartitioner), so keyed
// records land where Kafka's Java client would put them.
type Client struct {
	aloneMu sync.Mutex // one record at a time (produceAlone)
	brokers []string
	conn    *Conn // brokers, SASL and TLS: every client is built from it
	cl      *kgo.Client
	adm     *kadm.Client
}

// New connects to the cluster conn describes (lazily: Ping checks it
// answers).
func New(conn *Conn) (*Client, error) {
	brokers := conn.Brokers
	cl, err := kgo.NewClient(conn.Opts(
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		// The broker's max.message.bytes of each topic decides what fits;
		// the client's own 1 MB default would refuse large records first.
		kgo.ProducerBatchMaxBytes(MaxRecordBytes),
		kgo.MetadataMinAge(250*time.Millisecond),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %v: %w", brokers, err)
	}
	return &Client{brokers: brokers, conn: conn, cl: cl, adm: kadm.NewClient(cl)}, nil
}

// Close closes the shared clients.
func (k *Client) Close() { k.cl.Close() }

// Brokers are the seed brokers.
func (k *Client) Brokers() []string { return k.brokers }

// Ping checks the cluster answers, so a wrong --brokers fails at start.
func (k *Client) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	// A metadata request for no topics, sent to a broker: kadm's
	// BrokerMetadata would answer from the client's cache, and keep
	// answering while every broker is gone.
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	if _, err := k.cl.Request(ctx, req); err != nil {
		return fmt.Errorf("cannot reach Kafka at %v: %w", k.brokers, err)
	}
	return nil
}

// Partitions returns the partition count of topic, 0 if it does not exist.
func (k *Client) Partitions(ctx context.Context, topic string) (int, error) {
	td, err := k.adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	t, ok := td[topic]
	if !ok || errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
		return 0, nil
	}
	if t.Err != nil {
		return 0, fmt.Errorf("describe topic %s: %w", topic, t.Err)
	}
	return len(t.Partitions), nil
}

// TopicNames lists the cluster's topics (internal ones left out), sorted.
func (k *Client) TopicNames(ctx context.Context) ([]string, error) {
	td, err := k.adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	// A topic this client asked about that does not exist can come back
	// in the answer with UNKNOWN_TOPIC_OR_PARTITION (the client merges
	// what it knows): it is no topic of the cluster.
	var names []string
	for _, t := range td.Sorted() {
		if t.Err == nil {
			names = append(names, t.Topic)
		}
	}
	return names, nil
}

// MaxRecordBytes is the largest record batch the engine's producer sends.
const MaxRecordBytes = 64 << 20

// MaxMessageBytes is topic's max.message.bytes (the broker's default when
// the topic sets none).
func (k *Client) MaxMessageBytes(ctx context.Context, topic string) (int, error) {
	rcs, err := k.adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("describe configs of %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		return 0, fmt.Errorf("describe configs of %s: %w", topic, err)
	}
	if rc.Err != nil {
		return 0, fmt.Errorf("describe configs of %s: %w", topic, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" && c.Value != nil {
			n, err := strconv.Atoi(*c.Value)
			if err != nil {
				return 0, fmt.Errorf("max.message.bytes of %s: %w", topic, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("max.message.bytes of %s: not reported", topic)
}

// IsTooLarge reports whether a produce failed because the record is larger
// than its topic (or the producer) accepts.
func IsTooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// IsUnknownTopic reports whether Kafka refused a request because its topic
// does not exist: deleted, or not yet known to the broker asked.
func IsUnknownTopic(err error) bool {
	return errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID)
}

// WriteError is a record Kafka did not take: the topic it was for, and
// why. Callers that must tell a deleted topic from other failures look at
// Topic (with IsUnknownTopic on the error).
type WriteError struct {
	Topic string
	Err   error
}

func (e *WriteError) Error() string { return "write to " + e.Topic + ": " + e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// EnsureTopic creates topic with n partitions if missing and returns its
// actual count. configs are topic configs (nil: broker defaults); the
// replication factor and min.insync.replicas are the Conn's.
func (k *Client) EnsureTopic(ctx context.Context, topic string, n int, configs map[string]*string) (int, error) {
	have, err := k.Partitions(ctx, topic)
	if err != nil || have > 0 {
		return have, err
	}
	rf := int16(-1) // the broker's default.replication.factor
	if k.conn.ReplicationFactor > 0 {
		rf = int16(k.conn.ReplicationFactor)
	}
	if isr := k.conn.MinInsyncReplicas; isr > 0 && configs["min.insync.replicas"] == nil {
		configs = maps.Clone(configs)
		if configs == nil {
			configs = map[string]*string{}
		}
		v := strconv.Itoa(isr)
		configs["min.insync.replicas"] = &v
	}
	resp, err := k.adm.CreateTopic(ctx, int32(n), rf, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		if errors.Is(err, kerr.InvalidReplicationFactor) {
			return 0, fmt.Errorf("create topic %s: %w (replication factor %s: the cluster has fewer brokers; set --replication-factor)", topic, err, rfText(rf))
		}
		return 0, fmt.Errorf("create topic %s: %w", topic, err)
	}
	have, err = k.awaitLed(ctx, topic, 1, 30*time.Second)
	if err != nil {
		return 0, fmt.Errorf("create topic %s: %w", topic, err)
	}
	return have, nil
}

func rfText(rf int16) string {
	if rf < 0 {
		return "the broker's default"
	}
	return strconv.Itoa(int(rf))
}

// allLed reports whether every partition of t has a leader.
func allLed(t kadm.TopicDetail) bool {
	for _, p := range t.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

// EndOffsets returns the end of each partition of topic as a
// read_committed reader sees it: its last stable offset (before the first
// record of a transaction still open; the log end when none is).
func (k *Client) EndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	lo, err := k.adm.ListCommittedOffsets(ctx, topic)
	return listedOffsets(lo, err, topic, "end offset")
}

// LogEnds returns the log end offset (high watermark) of each partition of
// topic: past the records of transactions still open, and past commit
// markers not yet written (Kafka writes a transaction's markers after its
// commit returns).
func (k *Client) LogEnds(ctx context.Context, topic string) (map[int32]int64, error) {
	lo, err := k.adm.ListEndOffsets(ctx, topic)
	return listedOffsets(lo, err, topic, "log end offset")
}

// listedOffsets turns a ListOffsets answer into each partition's offset,
// or the first error (what names the offset listed, for the message).
func listedOffsets(lo kadm.ListedOffsets, err error, topic, what string) (map[int32]int64, error) {
	if err != nil {
		return nil, fmt.Errorf("list %ss of %s: %w", what, topic, err)
	}
	out := map[int32]int64{}
	var ferr error
	lo.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = fmt.Errorf("%s of %s/%d: %w", what, topic, o.Partition, o.Err)
			return
		}
		out[o.Partition] = o.Offset
	})
	return out, ferr
}

// ProduceSync writes records and waits for every acknowledgement. A record
// placed on a partition the client's metadata does not know yet (the topic
// just grew) is sent again once metadata is refreshed.
func (k *Client) ProduceSync(ctx context.Context, recs []*kgo.Record) error {
	for attempt := 0; len(recs) > 0; attempt++ {
		var retry []*kgo.Record
		for _, r := range k.cl.ProduceSync(ctx, recs...) {
			if r.Err == nil {
				continue
			}
			if attempt < 20 && strings.Contains(r.Err.Error(), "invalid record partitioning choice") {
				retry = append(retry, r.Record)
				continue
			}
			return r.Err
		}
		if len(retry) > 0 {
			k.cl.ForceMetadataRefresh()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		recs = retry
	}
	return nil
}

// ProduceOne writes rec and waits for its acknowledgement or for ctx to
// end, whichever comes first (ProduceSync waits out a broker outage even
// after its ctx ends, once the record is buffered). A record given up on
// may still be written later. On success rec.Offset is where it landed.
func (k *Client) ProduceOne(ctx context.Context, rec *kgo.Record) error {
	done := make(chan error, 1)
	k.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ReadAll reads topic from the start of every partition to its end at the
// time of the call and hands each record to fn, in partition then offset
// order.
func (k *Client) ReadAll(ctx context.Context, topic string, fn func(*kgo.Record) error) error {
	return k.ReadFrom(ctx, topic, nil, fn)
}

// ReadFrom is ReadAll from offset from[p] of each partition p (the log's
// start where that is later, or from holds no offset of p).
func (k *Client) ReadFrom(ctx context.Context, topic string, from map[int32]int64, fn func(*kgo.Record) error) error {
	_, err := k.readTail(ctx, topic, from, -1, fn)
	return err
}

// ReadAllEnds is ReadAll that also returns where it stopped on each
// partition, for a reader that follows the topic from there (NewTailAt)
// without seeing a record twice or missing one.
func (k *Client) ReadAllEnds(ctx context.Context, topic string, fn func(*kgo.Record) error) (map[int32]int64, error) {
	return k.readTail(ctx, topic, nil, -1, fn)
}

// ReadTail is ReadFrom limited to the last `last` records of each
// partition (last < 0: all of them), as they are now.
func (k *Client) ReadTail(ctx context.Context, topic string, from map[int32]int64, last int64, fn func(*kgo.Record) error) error {
	_, err := k.readTail(ctx, topic, from, last, fn)
	return err
}

func (k *Client) readTail(ctx context.Context, topic string, from map[int32]int64, last int64, fn func(*kgo.Record) error) (map[int32]int64, error) {
	ends, err := k.EndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	starts, err := k.adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	assign := map[int32]kgo.Offset{}
	remaining := map[int32]int64{}
	for p, end := range ends {
		start := int64(0)
		if so, ok := starts.Lookup(topic, p); ok {
			start = so.Offset
		}
		start = max(start, from[p])
		if last >= 0 && end-last > start {
			start = end - last
		}
		if end > start {
			assign[p] = kgo.NewOffset().At(start)
			remaining[p] = end
		}
	}
	if len(assign) == 0 {
		return ends, nil
	}
	cl, err := kgo.NewClient(k.conn.Opts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: assign}),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // the end may be a transaction's marker
	)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	byPart := map[int32][]*kgo.Record{}
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for _, fe := range fs.Errors() {
			return nil, fmt.Errorf("read %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				byPart[r.Partition] = append(byPart[r.Partition], r)
			}
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	parts := make([]int32, 0, len(byPart))
	for p := range byPart {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	for _, p := range parts {
		for _, r := range byPart[p] {
			if err := fn(r); err != nil {
				return nil, err
			}
		}
	}
	return ends, nil
}

// CreatePartitions grows topic to total partitions and waits until
// metadata shows them led. Several processes may grow the same topic at
// once (every server of an app grows a stage's changelog when its input
// grows): Kafka refuses all but the first with INVALID_PARTITIONS ("topic
// already has N partitions"), so a refusal is success when the topic now
// has total. Kafka's controller may answer before the broker's metadata
// shows the new count, hence the wait.
func (k *Client) CreatePartitions(ctx context.Context, topic string, total int) error {
	resp, err := k.adm.UpdatePartitions(ctx, total, topic)
	if r := resp[topic]; err == nil && r.Err != nil {
		err = r.Err
		if r.ErrMessage != "" {
			err = fmt.Errorf("%w (%s)", r.Err, r.ErrMessage)
		}
	}
	if err != nil && !errors.Is(err, kerr.InvalidPartitions) {
		return fmt.Errorf("grow %s to %d partitions: %w", topic, total, err)
	}
	have, werr := k.awaitLed(ctx, topic, total, 30*time.Second)
	switch {
	case werr == nil && (err == nil || have == total):
		return nil
	case err != nil:
		return fmt.Errorf("grow %s to %d partitions (it has %d): %w", topic, total, have, err)
	default:
		return fmt.Errorf("grow %s to %d partitions: %w", topic, total, werr)
	}
}

// awaitLed waits until metadata shows topic with at least n partitions, each
// with a leader, and returns the count it shows. kfake answers at once; a
// real broker publishes new metadata asynchronously (seconds when it is
// busy, e.g. deleting other topics), and until a partition has a leader
// produces and offset lookups on it fail.
func (k *Client) awaitLed(ctx context.Context, topic string, n int, wait time.Duration) (int, error) {
	deadline := time.Now().Add(wait)
	have := 0
	for {
		td, err := k.adm.ListTopics(ctx, topic)
		if err == nil {
			if t, ok := td[topic]; ok && t.Err == nil {
				have = len(t.Partitions)
				if have >= n && allLed(t) {
					return have, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return have, fmt.Errorf("topic %s shows %d partitions with leaders in metadata after %s, want %d", topic, have, wait, n)
		}
		select {
		case <-ctx.Done():
			return have, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Dial reports whether any seed broker accepts a TCP connection: a broker
// that does and still fails Ping refuses this client (credentials, TLS),
// which no waiting will fix; one that does not is out of reach.
func (k *Client) Dial(ctx context.Context) error {
	var d net.Dialer
	var last error
	for _, addr := range k.brokers {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := d.DialContext(dctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		last = err
	}
	return fmt.Errorf("no broker of %v accepts connections: %w", k.brokers, last)
}

// DeleteTopics deletes topics (one that does not exist is no error) and
// waits, as long as ctx allows, until metadata no longer shows them, so a
// topic of the same name created next starts empty.
func (k *Client) DeleteTopics(ctx context.Context, topics ...string) error {
	resp, err := k.adm.DeleteTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("delete topics %v: %w", topics, err)
	}
	for _, r := range resp {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("delete topic %s: %w", r.Topic, r.Err)
		}
	}
	for _, t := range topics {
		for {
			n, err := k.Partitions(ctx, t)
			if err == nil && n == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("topic %s still listed after its deletion: %w", t, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	// The client keeps what it knew of them (a produced-to topic's id):
	// a topic created again under the name is a new one to it.
	k.Forget(topics...)
	return nil
}

// Forget drops what the shared client knows of topics (their ids and
// partitions, for producing and consuming), so that a topic deleted and
// created again under the same name, by this process or another, is looked
// up afresh instead of failing with UNKNOWN_TOPIC_ID. Nothing may be
// producing to them through this client: buffered records are failed.
func (k *Client) Forget(topics ...string) { k.cl.PurgeTopicsFromClient(topics...) }

// EnsureCompacted creates compacted topic with n partitions, or grows it
// to n (a changelog follows its input's partition count).
func (k *Client) EnsureCompacted(ctx context.Context, topic string, n int) error {
	compact := "compact"
	have, err := k.EnsureTopic(ctx, topic, n, map[string]*string{"cleanup.policy": &compact})
	if err != nil {
		return err
	}
	if have < n {
		return k.CreatePartitions(ctx, topic, n)
	}
	return nil
}
