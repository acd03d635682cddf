package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Consumer is a member of a stage's consumer group: it reads the
// partitions of one topic the group assigns to it.
type Consumer struct {
	cl    *kgo.Client
	topic string
	max   int
	// A group member's: the shared client (to leave) and its identity.
	k               *Client
	group, instance string
	holds           *holds
}

// holds orders the pause of the partitions an assignment holds against
// their Release. A held partition's task restores in the background, and
// a short restore can end, and Release its partition, before the Assigned
// hook that started it returns (the hook still opens other tasks inline):
// the pause then comes after the Release, and the partition would stay
// paused for good. So a Release during the hook is noted, and the pause
// after it leaves that partition alone; the mutex keeps a pause and a
// resume of one partition from crossing.
type holds struct {
	mu        sync.Mutex
	assigning bool
	released  map[int32]bool // during the Assigned hook under way
}

// begin marks the start of an Assigned hook.
func (h *holds) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.assigning, h.released = true, map[int32]bool{}
}

// hold pauses the partitions of held that were not released since begin,
// and ends the hook's mark.
func (h *holds) hold(cl *kgo.Client, topic string, held []int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var pause []int32
	for _, p := range held {
		if !h.released[p] {
			pause = append(pause, p)
		}
	}
	if len(pause) > 0 {
		// Paused before any fetch starts: nothing is read until Release
		// sets where.
		cl.PauseFetchPartitions(map[string][]int32{topic: pause})
	}
	h.assigning, h.released = false, nil
}

// release resumes partition p, noting it when an Assigned hook runs.
func (h *holds) release(cl *kgo.Client, topic string, p int32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.assigning {
		h.released[p] = true
	}
	cl.ResumeFetchPartitions(map[string][]int32{topic: {p}})
}

// FetchPart is what one poll brought of one partition.
type FetchPart struct {
	Partition int32
	// Records are the data records, in offset order: never a
	// transaction's control record (its commit or abort marker), nor a
	// record of an aborted transaction.
	Records []*Record
	// Next is the offset after the last record the fetch covered, control
	// records included (0: none): a partition whose last record is a
	// transaction marker is read to its end only past the marker.
	Next int64
	// HighWatermark is the partition's end as the fetch saw it: its last
	// stable offset, the end of what a read_committed reader can read.
	HighWatermark int64
}

// Poll waits for records and returns them by partition. A cancelled ctx
// returns nothing and no error. The group does not rebalance from one
// Poll's return to the next Poll, AllowRebalance or Close: the caller
// resolves which task owns each fetch before a partition can move, so a
// partition that moves (or comes back) is never given a fetch of its
// previous owner's.
func (c *Consumer) Poll(ctx context.Context) ([]FetchPart, error) {
	c.cl.AllowRebalance()
	fs := c.cl.PollRecords(ctx, c.max)
	if ctx.Err() != nil {
		return nil, nil
	}
	for _, fe := range fs.Errors() {
		if errors.Is(fe.Err, context.Canceled) {
			return nil, nil
		}
		return nil, fmt.Errorf("read %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
	}
	var out []FetchPart
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		out = append(out, splitControl(fp.FetchPartition))
	})
	return out, nil
}

// AllowRebalance lets the group rebalance before the next Poll. It is for
// a caller that has resolved where every fetch of the last Poll goes and
// may take a while handing them out (a busy task): a member that does not
// rejoin a rebalance within its timeout is left out of it, and the group
// goes on with the member's stale ownership, so it may move a partition
// the member still runs (the 3-node audit on Kafka saw a live exactly-once
// task fenced that way).
func (c *Consumer) AllowRebalance() { c.cl.AllowRebalance() }

// Release starts fetching partition p, held since its assignment, at
// offset at. A partition no longer assigned is left alone.
//
// It may come before the Assigned hook that held p has returned (a short
// restore): the offset wins over the one the hook returns (franz-go takes
// a SetOffsets during AdjustFetchOffsetsFn over its result), and the hold
// is not applied after it (holds).
func (c *Consumer) Release(p int32, at int64) {
	c.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{c.topic: {p: {Epoch: -1, Offset: at}}})
	c.holds.release(c.cl, c.topic, p)
}

// Close stops the consumer; a group member leaves its group.
func (c *Consumer) Close() {
	c.cl.AllowRebalance() // leaving waits for the last poll's block
	c.cl.Close()
	if c.instance != "" {
		c.leave()
	}
}

// GroupOffsets reads the committed offsets of group on topic.
func (k *Client) GroupOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	resp, err := k.adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out, nil
}

// splitControl takes the control records out of a fetched partition,
// keeping where they end.
func splitControl(fp kgo.FetchPartition) FetchPart {
	out := FetchPart{Partition: fp.Partition, Records: fp.Records, HighWatermark: fp.LastStableOffset}
	if out.HighWatermark < 0 {
		out.HighWatermark = fp.HighWatermark // a broker that sent no LSO
	}
	if n := len(fp.Records); n > 0 {
		out.Next = fp.Records[n-1].Offset + 1
	}
	for i, r := range fp.Records {
		if r.Attrs.IsControl() {
			data := make([]*Record, 0, len(fp.Records)-1)
			data = append(data, fp.Records[:i]...)
			for _, r := range fp.Records[i+1:] {
				if !r.Attrs.IsControl() {
					data = append(data, r)
				}
			}
			out.Records = data
			break
		}
	}
	return out
}

// DeleteGroups deletes consumer groups and their committed offsets; a
// group that does not exist is no error. A coordinator that is not there
// yet (a new cluster creating its offsets topic) is waited for, as long as
// ctx allows.
func (k *Client) DeleteGroups(ctx context.Context, groups ...string) error {
	for {
		err := k.deleteGroups(ctx, groups)
		if err == nil || !kerr.IsRetriable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// IsGroupNotEmpty reports a group that could not be deleted because it
// has members: a process consumes with it right now.
func IsGroupNotEmpty(err error) bool { return errors.Is(err, kerr.NonEmptyGroup) }

func (k *Client) deleteGroups(ctx context.Context, groups []string) error {
	resp, err := k.adm.DeleteGroups(ctx, groups...)
	if err != nil {
		return fmt.Errorf("delete consumer groups %v: %w", groups, err)
	}
	for _, g := range resp {
		if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
			return fmt.Errorf("delete consumer group %s: %w", g.Group, g.Err)
		}
	}
	return nil
}

// GroupHooks are what a member of a stage's consumer group does as
// partitions come and go. Each is called from the group's own goroutine,
// never two at once; the group waits for it.
type GroupHooks struct {
	// Adding, when set, is told of partitions newly given to this member
	// before the client reads their committed offsets. That read waits
	// while a transaction that commits one of them is open (the client
	// always asks for stable offsets), and a holder that died between
	// committing its offset in a transaction and ending it leaves that
	// transaction open for the whole transaction timeout: a task whose
	// offset stays unstable fences its partition's earlier holders here,
	// which aborts it at once. Assigned may follow later, or (the
	// partition taken away meanwhile) Revoked or Lost instead.
	Adding func(parts []int32)
	// Assigned opens the tasks of partitions given to this member and
	// returns the offset each reads from (its state's position, not the
	// group's: the state is the truth). A partition left out is not read.
	// A partition in held is not fetched until Consumer.Release starts it
	// (its task is still restoring its state).
	Assigned func(parts []int32) (at map[int32]int64, held []int32)
	// Revoked commits and closes the tasks of partitions taken away,
	// before any other member may open them.
	Revoked func(parts []int32)
	// Lost closes the tasks of partitions this member lost without a
	// handover (it fell out of the group): they must not commit.
	Lost func(parts []int32)
	// Joined is called after an assignment that gave this member nothing
	// new (Assigned is not called then).
	Joined func()
}

// fetchPartitionBytes and fetchMaxBytes bound a stage consumer's fetches
// (NewGroupConsumer).
const (
	fetchPartitionBytes = 1 << 20
	fetchMaxBytes       = 16 << 20
)

// NewGroupConsumer joins consumer group group as a member reading topic:
// the group assigns its partitions among the members (sticky and
// cooperative, so a rebalance moves only what must move), and hooks open
// and close the tasks. sessionTimeout is how long a silent member keeps
// its partitions.
//
// instance, when set, makes the member static (KIP-345): a process that
// restarts under the same instance id takes its place back at once, with
// its partitions, instead of waiting for the group to expire the old
// member; Close then leaves the group explicitly, so a clean stop hands
// the partitions over at once.
func (k *Client) NewGroupConsumer(group, topic string, maxPoll int, sessionTimeout time.Duration, instance string, hooks GroupHooks) (*Consumer, error) {
	topicParts := func(m map[string][]int32) []int32 { return m[topic] }
	// The hooks may run before NewClient has returned the client they
	// pause partitions on.
	var self atomic.Pointer[kgo.Client]
	h := &holds{}
	client := func() *kgo.Client {
		for self.Load() == nil {
			time.Sleep(time.Millisecond)
		}
		return self.Load()
	}
	opts := []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(250 * time.Millisecond),
		// What a stage holds fetched and not yet polled: franz-go keeps a
		// fetch response (and every record decoded from it) until the poll
		// takes it, so these bound a consumer's memory, not only a
		// request. 1 MB a partition (Kafka's default) and 16 MB a fetch
		// (Kafka's is 50): at 8 MB a partition, two streams over four
		// partitions held ~250 MB of fetched records (the raw responses
		// and franz-go's Record structs, about twice their bytes again),
		// and the server peaked at 1.4 GB with a 64 MB state cache; at
		// 1 MB, 660 MB, at the same events per CPU-second (bench/e2e).
		// A record batch larger than either still comes whole (Kafka
		// returns at least one).
		kgo.FetchMaxPartitionBytes(fetchPartitionBytes),
		kgo.FetchMaxBytes(fetchMaxBytes),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		// Offsets come from the tasks' state (AdjustFetchOffsetsFn), so
		// a partition with no committed offset must not be reset first.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AdjustFetchOffsetsFn(func(_ context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
			var parts []int32
			for p := range offs[topic] {
				parts = append(parts, p)
			}
			if len(parts) == 0 {
				return offs, nil
			}
			h.begin()
			at, held := hooks.Assigned(parts)
			h.hold(client(), topic, held)
			out := map[int32]kgo.Offset{}
			for p, o := range at {
				out[p] = kgo.NewOffset().At(o).WithEpoch(-1)
			}
			offs[topic] = out
			return offs, nil
		}),
		kgo.BlockRebalanceOnPoll(),
		// Called before the client fetches the committed offsets of the
		// partitions added (franz-go waits for this callback first).
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			switch ps := topicParts(m); {
			case len(ps) > 0 && hooks.Adding != nil:
				hooks.Adding(ps)
			case len(ps) == 0 && hooks.Joined != nil:
				hooks.Joined()
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			if ps := topicParts(m); len(ps) > 0 {
				hooks.Revoked(ps)
				// A pause outlives the assignment: one still held must
				// not hold the partition when it comes back.
				cl.ResumeFetchPartitions(map[string][]int32{topic: ps})
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			if ps := topicParts(m); len(ps) > 0 {
				hooks.Lost(ps)
				cl.ResumeFetchPartitions(map[string][]int32{topic: ps})
			}
		}),
	}
	if sessionTimeout > 0 {
		rebalance := rebalanceTimeout(sessionTimeout)
		opts = append(opts, kgo.SessionTimeout(sessionTimeout), kgo.HeartbeatInterval(max(sessionTimeout/10, 100*time.Millisecond)),
			kgo.RebalanceTimeout(rebalance), kgo.RetryTimeoutFn(func(key int16) time.Duration {
				switch key {
				case int16(kmsg.JoinGroup), int16(kmsg.SyncGroup):
					// Shorter than the rebalance timeout, which is how
					// long one attempt may wait: an attempt that timed
					// out is not tried again within the session.
					return rebalance / 2
				case int16(kmsg.Heartbeat):
					return sessionTimeout
				}
				return 30 * time.Second // the client's default
			}))
	}
	if instance != "" {
		opts = append(opts, kgo.InstanceID(instance))
	}
	cl, err := kgo.NewClient(k.conn.Opts(opts...)...)
	if err != nil {
		return nil, fmt.Errorf("member of group %s: %w", group, err)
	}
	self.Store(cl)
	return &Consumer{cl: cl, topic: topic, max: maxPoll, k: k, group: group, instance: instance, holds: h}, nil
}

// rebalanceTimeout is the group's rebalance timeout for a session
// timeout: well under it, so that a member never waits in one JoinGroup or
// SyncGroup for as long as its session lasts (the client reads a sync's
// answer for at most the rebalance timeout, and the RetryTimeoutFn in
// NewGroupConsumer keeps it from trying again).
//
// A member sends no heartbeat while it waits in a join or a sync, and it
// keeps running its tasks meanwhile (a cooperative rebalance moves only
// what it revokes). With the client's default (60 s against a 10 s
// session) the 3-node audit saw live tasks fenced, in this order (server
// logs and the broker's group log):
//
//  1. node2 restarts, joins a stage's group and crashes (an injected crash
//     after a commit) as that generation forms with node1 and node3.
//  2. node1 and node3 wait in their SyncGroup for an assignment that does
//     not come (node2 never syncs: kfake made it the leader), still
//     running their partitions.
//  3. Their sessions end 10 s after the join (no heartbeats while they
//     wait), and the coordinator drops them without answering the sync
//     (kfake does; Kafka keeps a member that awaits a sync, but drops one
//     that overruns the rebalance timeout).
//  4. node2 comes back, finds the group empty and is given every
//     partition: its tasks fence node1's and node3's, which fail.
//
// With each wait shorter than the session, node1 and node3 give up at
// step 2 while still members: the client calls Lost (their tasks close
// without a commit) and they join again, so no partition runs on two
// nodes. The cost: a member whose revoke (the last commit of its tasks)
// takes longer than this is dropped from the rebalance, its partitions
// lost rather than handed over.
func rebalanceTimeout(session time.Duration) time.Duration {
	return max(session*2/5, 500*time.Millisecond)
}

// leave removes the static member instance from group (a static member's
// Close does not leave).
func (c *Consumer) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = c.group
	m := kmsg.NewLeaveGroupRequestMember()
	id := c.instance
	m.InstanceID = &id
	req.Members = append(req.Members, m)
	// A failure leaves the member to expire after the session timeout:
	// slower, not wrong.
	_, _ = req.RequestWith(ctx, c.k.cl)
}

// ReadPartition reads partition p of topic from offset from to its end as
// it is now (what read_committed readers see: aborted transactions are
// skipped), handing each record to fn in order. It returns the offset
// after the last one read, control records included.
func (k *Client) ReadPartition(ctx context.Context, topic string, p int32, from int64, fn func(*Record) error) (int64, error) {
	ends, err := k.EndOffsets(ctx, topic)
	if err != nil {
		return from, err
	}
	end := ends[p]
	if end <= from {
		return from, nil
	}
	cl, err := kgo.NewClient(k.conn.Opts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.FetchMaxPartitionBytes(8<<20),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return from, err
	}
	defer cl.Close()
	next := from
	for next < end {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return next, err
		}
		for _, fe := range fs.Errors() {
			return next, fmt.Errorf("read %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			if ferr != nil || r.Offset < next || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				ferr = fn(r)
			}
			if ferr == nil {
				next = r.Offset + 1
			}
		})
		if ferr != nil {
			return next, ferr
		}
	}
	return next, nil
}

// Assignment is a consumer group's members and who holds each partition
// of one topic: a member's instance id (static members), else its client
// id. A partition no member holds (the group rebalancing, or empty) is
// absent.
type Assignment struct {
	Members []string // sorted
	Owners  map[int32]string
}

// GroupAssignment describes consumer group group: its members (instance
// ids of static members, else client ids) and who holds each partition of
// topic.
func (k *Client) GroupAssignment(ctx context.Context, group, topic string) (Assignment, error) {
	out := Assignment{Owners: map[int32]string{}}
	groups, err := k.adm.DescribeGroups(ctx, group)
	if err != nil {
		return out, fmt.Errorf("describe group %s: %w", group, err)
	}
	g, ok := groups[group]
	if !ok {
		return out, nil
	}
	if g.Err != nil {
		return out, fmt.Errorf("describe group %s: %w", group, g.Err)
	}
	for _, m := range g.Members {
		who := m.ClientID
		if m.InstanceID != nil && *m.InstanceID != "" {
			who = *m.InstanceID
		}
		out.Members = append(out.Members, who)
		ca, ok := m.Assigned.AsConsumer()
		if !ok {
			continue
		}
		for _, t := range ca.Topics {
			if t.Topic != topic {
				continue
			}
			for _, p := range t.Partitions {
				out.Owners[p] = who
			}
		}
	}
	slices.Sort(out.Members)
	return out, nil
}
