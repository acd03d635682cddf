package kafkaio

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// owners tracks, from the group hooks of every member, who runs each
// partition, and records any moment two members run one at once.
type owners struct {
	mu      sync.Mutex
	of      map[int32]string
	overlap []string
}

func (o *owners) hooks(member string) GroupHooks {
	return GroupHooks{
		Assigned: func(parts []int32) (map[int32]int64, []int32) {
			o.mu.Lock()
			defer o.mu.Unlock()
			at := map[int32]int64{}
			for _, p := range parts {
				if prev := o.of[p]; prev != "" && prev != member {
					o.overlap = append(o.overlap, fmt.Sprintf("partition %d given to %s while %s still runs it", p, member, prev))
				}
				o.of[p] = member
				at[p] = 0
			}
			return at, nil
		},
		Revoked: func(parts []int32) { o.release(member, parts) },
		Lost:    func(parts []int32) { o.release(member, parts) },
	}
}

func (o *owners) release(member string, parts []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range parts {
		if o.of[p] == member {
			delete(o.of, p)
		}
	}
}

func (o *owners) count(member string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, m := range o.of {
		if m == member {
			n++
		}
	}
	return n
}

// groupTest is a kfake cluster whose topic t has 4 partitions, a client
// of it, and the members a test joins to group g; its cleanup stops the
// members' loops and closes them.
type groupTest struct {
	c       *kfake.Cluster
	k       *Client
	o       *owners
	ctx     context.Context
	wg      sync.WaitGroup
	members []*Consumer
}

func newGroupTest(t *testing.T) *groupTest {
	t.Helper()
	// A 1 s minimum session, under Kafka's 6 s, keeps the tests short.
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "t"),
		kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": "1000"}))
	if err != nil {
		t.Fatal(err)
	}
	k, err := New(&Conn{Brokers: c.ListenAddrs()})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &groupTest{c: c, k: k, o: &owners{of: map[int32]string{}}, ctx: ctx}
	t.Cleanup(func() {
		cancel()
		g.wg.Wait()
		for _, m := range g.members {
			m.Close()
		}
		k.Close()
		c.Close()
	})
	return g
}

// wait waits until cond holds, failing the test after within.
func (g *groupTest) wait(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// overlaps is what the owners saw run on two members at once.
func (g *groupTest) overlaps() []string {
	g.o.mu.Lock()
	defer g.o.mu.Unlock()
	return slices.Clone(g.o.overlap)
}

// TestSyncNeverAnsweredLosesPartitionsBeforeSessionEnds: member b's
// SyncGroup gets no answer (as when the group's leader died after its
// join). A member sends no heartbeats while it waits, so its session ends
// and the coordinator gives its partitions to others. b must have given
// them up by then (its wait bounded by the rebalance timeout, shorter
// than the session): no partition may run on two members at once. With
// the client's default rebalance timeout (60 s) b kept running them while
// a took them over.
func TestSyncNeverAnsweredLosesPartitionsBeforeSessionEnds(t *testing.T) {
	g := newGroupTest(t)
	c, k, o, ctx := g.c, g.k, g.o, g.ctx
	const session = 2 * time.Second
	join := func(member string) *Consumer {
		cons, err := k.NewGroupConsumer("g", "t", 100, session, member, o.hooks(member))
		if err != nil {
			t.Fatal(err)
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			for ctx.Err() == nil {
				if _, err := cons.Poll(ctx); err != nil {
					time.Sleep(50 * time.Millisecond) // out of the group, say
				}
			}
		}()
		g.members = append(g.members, cons)
		return cons
	}
	wait := func(what string, cond func() bool) { t.Helper(); g.wait(t, what, 20*time.Second, cond) }
	join("a")
	wait("a to own every partition", func() bool { return o.count("a") == 4 })
	join("b")
	wait("a and b to share the partitions", func() bool { return o.count("a") > 0 && o.count("b") > 0 && o.count("a")+o.count("b") == 4 })

	// From now on b's SyncGroups are swallowed; a third member joining
	// makes a and b join and sync again.
	var swallowed sync.Once
	swallowedAt := make(chan struct{})
	c.ControlKey(int16(kmsg.SyncGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if r := req.(*kmsg.SyncGroupRequest); r.InstanceID != nil && *r.InstanceID == "b" {
			swallowed.Do(func() { close(swallowedAt) })
			return nil, nil, true
		}
		return nil, nil, false
	})
	join("c")
	select {
	case <-swallowedAt:
	case <-time.After(20 * time.Second):
		t.Fatal("b never synced")
	}
	// b's session ends 2 s after its join; watch 3 session timeouts.
	time.Sleep(3 * session)
	if overlap := g.overlaps(); len(overlap) > 0 {
		t.Errorf("a partition ran on two members at once: %v", overlap)
	}
}

// TestAddingFencesBeforeTheStableOffsetRead: the holder of partition 1
// died between committing its offset in a transaction and ending it, so
// the transaction stays open until the broker times it out (a minute
// here, as for tasks). The client reads a new member's committed offsets
// require_stable, which waits for that transaction; GroupHooks.Adding
// runs before that read, so fencing the partition's transactional id
// there (aborting the dead transaction) lets the member open its
// partitions at once. The 3-node audit on Apache Kafka saw a SIGKILLed
// node's tasks unopened for over 60 s while the fencing came only after
// the read.
func TestAddingFencesBeforeTheStableOffsetRead(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	k, err := New(&Conn{Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	txnID := func(p int32) string { return fmt.Sprintf("task-%d", p) }
	// The group exists (a dead holder had committed before).
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: "t", Partition: 0, At: 3, LeaderEpoch: -1})
	if _, err := k.adm.CommitOffsets(ctx, "g", offs); err != nil {
		t.Fatal(err)
	}
	leaveTxnOffsetOpen(ctx, t, k, txnID(1), "g", "t", 1, 7)

	var mu sync.Mutex
	var fenced []*TxnProducer
	assigned := make(chan []int32, 1)
	hooks := GroupHooks{
		Adding: func(parts []int32) {
			for _, p := range parts {
				tx, err := k.NewTxnProducer(ctx, txnID(p), time.Minute)
				if err != nil {
					t.Errorf("fence partition %d: %v", p, err)
					continue
				}
				mu.Lock()
				fenced = append(fenced, tx)
				mu.Unlock()
			}
		},
		Assigned: func(parts []int32) (map[int32]int64, []int32) {
			assigned <- parts
			return map[int32]int64{}, nil
		},
		Revoked: func([]int32) {},
		Lost:    func([]int32) {},
	}
	cons, err := k.NewGroupConsumer("g", "t", 100, 6*time.Second, "a", hooks)
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pctx.Err() == nil {
			_, _ = cons.Poll(pctx)
		}
	}()
	defer func() {
		stop()
		<-done
		cons.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, tx := range fenced {
			tx.Close()
		}
	}()
	select {
	case parts := <-assigned:
		if len(parts) != 2 {
			t.Fatalf("assigned %v, want both partitions", parts)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no assignment within 15 s: the offset read waited for the dead holder's transaction")
	}
}

// leaveTxnOffsetOpen commits offset at of partition p in group inside a
// transaction of transactional id txnID that it leaves open, as a task
// killed between its TxnOffsetCommit and its EndTxn does.
func leaveTxnOffsetOpen(ctx context.Context, t *testing.T, k *Client, txnID, group, topic string, p int32, at int64) {
	t.Helper()
	tx, err := k.NewTxnProducer(ctx, txnID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close() // closing sends no EndTxn
	if err := tx.commitOffset(ctx, TxnCommit{Group: group, Topic: topic, Partition: p, Offset: at}); err != nil {
		t.Fatal(err)
	}
	// The open transaction shows to a stable read of the group.
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := k.StableOffsets(short, group, topic); err == nil {
		t.Fatal("the group's offsets read as stable with a transaction left open: the set-up does not reproduce a dead holder")
	}
}

// TestAllowRebalanceLetsABusyMemberHandOver: member a polled and is busy
// handing the fetch out (a task of its own is slow) when b joins. With
// AllowRebalance called first, a answers the rebalance meanwhile: it
// hands partitions over before b runs them, and b gets its share within
// a few seconds. Without it a rejoins only at its next poll, past the
// rebalance timeout, and the group goes on with a's stale ownership: b
// was given partitions a still ran (the 3-node audit on Kafka saw a live
// exactly-once task fenced that way).
func TestAllowRebalanceLetsABusyMemberHandOver(t *testing.T) {
	g := newGroupTest(t)
	k, o, ctx := g.k, g.o, g.ctx
	const session = 2 * time.Second
	// Records keep coming, so a poll returns soon.
	prod := k.NewPending()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			prod.Produce(ctx, &Record{Topic: "t", Partition: int32(i % 4), Value: []byte("x")})
			time.Sleep(10 * time.Millisecond)
		}
	}()
	busy := make(chan struct{}) // closed: a's next hand-off takes 4 sessions
	inBusy := make(chan struct{})
	join := func(member string, stall, allow bool) {
		cons, err := k.NewGroupConsumer("g", "t", 100, session, member, o.hooks(member))
		if err != nil {
			t.Fatal(err)
		}
		g.members = append(g.members, cons)
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			stalled := false
			for ctx.Err() == nil {
				parts, err := cons.Poll(ctx)
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				select {
				case <-busy:
				default:
					continue
				}
				if !stall || stalled || len(parts) == 0 {
					continue
				}
				stalled = true
				if allow {
					cons.AllowRebalance()
				}
				close(inBusy)
				select {
				case <-ctx.Done():
				case <-time.After(4 * session):
				}
			}
		}()
	}
	join("a", true, true)
	g.wait(t, "a to own every partition", 20*time.Second, func() bool { return o.count("a") == 4 })
	close(busy)
	<-inBusy
	join("b", false, false)
	start := time.Now()
	g.wait(t, "b to be given a share while a is busy", 3*session, func() bool { return o.count("b") > 0 })
	t.Logf("b got %d partitions %v after joining", o.count("b"), time.Since(start).Round(time.Millisecond))
	if overlap := g.overlaps(); len(overlap) > 0 {
		t.Errorf("a partition ran on two members at once: %v", overlap)
	}
}

// TestReleaseBeforeAssignedReturns: a member holds every partition it is
// given (their tasks restore in the background) and each restore ends,
// and Releases its partition, before the Assigned hook returns, as a short
// restore does while the hook still opens another partition's task
// inline. Every partition must then be read from where Release said, not
// from where the hook said (a stage returns a held partition's end there,
// "not fetched"). The hold used to be applied
// after Assigned returned, on top of those Releases: the partitions stayed
// paused for good (a rescale's restart under load saw 4 of 8 partitions
// never run, and every FLUSH wait for them).
func TestReleaseBeforeAssignedReturns(t *testing.T) {
	g := newGroupTest(t)
	k, ctx := g.k, g.ctx
	for p := range int32(4) {
		if err := k.ProduceSync(ctx, []*Record{{Topic: "t", Partition: p, Value: []byte("a")}, {Topic: "t", Partition: p, Value: []byte("b")}}); err != nil {
			t.Fatal(err)
		}
	}
	var cons atomic.Pointer[Consumer]
	hooks := GroupHooks{
		Assigned: func(parts []int32) (map[int32]int64, []int32) {
			at := map[int32]int64{}
			for _, p := range parts {
				at[p] = 2 // the end: a held partition is not fetched
			}
			// The restores end before this hook returns: Release runs
			// on another goroutine (the poll loop's, in a stage) and
			// the hook waits for it.
			released := make(chan struct{})
			go func() {
				defer close(released)
				for cons.Load() == nil {
					time.Sleep(time.Millisecond)
				}
				for _, p := range parts {
					cons.Load().Release(p, 0)
				}
			}()
			select {
			case <-released:
			case <-time.After(10 * time.Second):
				t.Error("Release blocked while the Assigned hook ran")
			}
			return at, parts
		},
		Revoked: func([]int32) {},
		Lost:    func([]int32) {},
	}
	c, err := k.NewGroupConsumer("g", "t", 100, 2*time.Second, "a", hooks)
	if err != nil {
		t.Fatal(err)
	}
	g.members = append(g.members, c)
	cons.Store(c)
	read := map[int32]string{}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	whole := func() bool {
		for p := range int32(4) {
			if len(read[p]) < 2 {
				return false
			}
		}
		return true
	}
	for !whole() && pctx.Err() == nil {
		parts, err := c.Poll(pctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, fp := range parts {
			for _, r := range fp.Records {
				read[fp.Partition] += string(r.Value)
			}
		}
	}
	if !whole() {
		t.Fatalf("read partitions %v of 4 in 15 s: a partition released before Assigned returned stayed held", slices.Sorted(maps.Keys(read)))
	}
	for p, got := range read {
		if got != "ab" {
			t.Errorf("partition %d: read %q, want \"ab\" (from offset 0, where Release said)", p, got)
		}
	}
}
