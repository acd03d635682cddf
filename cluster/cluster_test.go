package cluster

import (
	"context"
	"sync"
	"testing"
	"time"
)

// memLog is a control topic in memory: Follow replays what was put and
// then waits for more.
type memLog struct {
	mu   sync.Mutex
	recs []rec
	more chan struct{}
	now  func() time.Time
}

type rec struct {
	key string
	val []byte
	at  time.Time
}

func newMemLog(now func() time.Time) *memLog { return &memLog{more: make(chan struct{}), now: now} }

func (l *memLog) Put(_ context.Context, key string, value []byte) error {
	l.mu.Lock()
	l.recs = append(l.recs, rec{key, value, l.now()})
	close(l.more)
	l.more = make(chan struct{})
	l.mu.Unlock()
	return nil
}

func (l *memLog) Follow(ctx context.Context, fn func(string, []byte, time.Time)) error {
	for i := 0; ; {
		l.mu.Lock()
		recs, more := l.recs[i:], l.more
		l.mu.Unlock()
		for _, r := range recs {
			fn(r.key, r.val, r.at)
		}
		i += len(recs)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-more:
		}
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func nodes(ms []Member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Node+"/"+m.State)
	}
	return out
}

// TestMembership: two members see each other through their heartbeats; one
// that stops beating is gone once the session timeout passes, and one
// that leaves is gone at once. What a member says of itself (addresses,
// tasks, state) is what the others list.
func TestMembership(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	log := newMemLog(c.Now)
	mk := func(node string, tasks int) *Membership {
		m, err := New(log, func() Member {
			return Member{Node: node, PGAddr: node + ":5433", HTTPAddr: node + ":9464", TasksOwned: tasks, State: StateUp}
		}, Options{Timeout: 3 * time.Second, Now: c.Now})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := mk("a", 2), mk("b", 5)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.log.Follow(ctx, a.note)
	for _, m := range []*Membership{a, b} {
		if err := m.Beat(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitNodes(t, a, "a/up", "b/up")
	if got := a.Members()[1]; got.PGAddr != "b:5433" || got.HTTPAddr != "b:9464" || got.TasksOwned != 5 {
		t.Errorf("b as a sees it: %+v", got)
	}

	// b goes silent; a keeps beating.
	c.add(2 * time.Second)
	a.Beat(ctx)
	waitNodes(t, a, "a/up", "b/up")
	c.add(1500 * time.Millisecond) // b unseen for 3.5 s > 3 s
	a.Beat(ctx)
	waitNodes(t, a, "a/up")

	// b comes back, then leaves cleanly: gone without waiting.
	b.Beat(ctx)
	waitNodes(t, a, "a/up", "b/up")
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	waitNodes(t, a, "a/up")
	if _, err := New(log, nil, Options{}); err == nil {
		t.Error("a zero session timeout was accepted")
	}
}

func waitNodes(t *testing.T, m *Membership, want ...string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		got := nodes(m.Members())
		if len(got) == len(want) {
			same := true
			for i := range got {
				same = same && got[i] == want[i]
			}
			if same {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("members %v, want %v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMembershipNewerHeartbeat: during a rolling upgrade an older process
// reads the heartbeats of newer ones. A heartbeat of a version it does not
// know lists its node by id, as a newer release, instead of reading fields
// whose meaning may have changed (here a field of another type, which
// would not even parse, and a state it does not know); a leave record is
// of the newer version too, so the member stays until its session times out.
func TestMembershipNewerHeartbeat(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	log := newMemLog(c.Now)
	a, err := New(log, func() Member { return Member{Node: "a", PGAddr: "a:5433", State: StateUp} }, Options{Timeout: 3 * time.Second, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.log.Follow(ctx, a.note)
	if err := a.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	newer := `{"v":2,"node":"b","pg_addr":["b:5433","b:5434"],"tasks_owned":{"owned":4},"state":"draining"}`
	if err := log.Put(ctx, keyPrefix+"b", []byte(newer)); err != nil {
		t.Fatal(err)
	}
	waitNodes(t, a, "a/up", "b/newer release (heartbeat v2)")
	if got := a.Members()[1]; got.PGAddr != "" || got.TasksOwned != 0 || got.Version != 2 {
		t.Errorf("b's newer heartbeat was read: %+v", got)
	}
	// The same version as the reader is read as before.
	if err := log.Put(ctx, keyPrefix+"b", []byte(`{"v":1,"node":"b","pg_addr":"b:5433","tasks_owned":4,"state":"up"}`)); err != nil {
		t.Fatal(err)
	}
	waitNodes(t, a, "a/up", "b/up")
	if got := a.Members()[1]; got.PGAddr != "b:5433" || got.TasksOwned != 4 {
		t.Errorf("b's heartbeat: %+v", got)
	}
}
