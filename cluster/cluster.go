// Package cluster keeps the membership of an app's processes: who is up,
// where to reach its SQL and HTTP ports, how many tasks it runs. Each
// process writes a heartbeat record, keyed by its node id, to a compacted
// control topic (turbine-{app}-control) about every second, and follows
// that topic; a member whose last heartbeat is older than the session
// timeout is gone, and a clean stop writes a leaving record and then a
// tombstone. There is no consensus and no node-to-node traffic: the topic
// is the only channel, as the consumer groups are for tasks.
package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// States a member reports.
const (
	StateStarting = "starting" // replaying the catalog, restoring streams
	StateUp       = "up"
	StateLeaving  = "leaving" // stopping cleanly
)

// recordVersion is the version of the heartbeat's JSON. A reader skips
// fields it does not know and fills missing ones with zero values, so a
// rolling upgrade can add fields under the same version; a change of
// meaning bumps it, and a reader lists a member whose heartbeat is of a
// newer version by its node id only, in state "newer release (heartbeat
// vN)", rather than read fields whose meaning it does not know.
const recordVersion = 1

// stateNewer is the state of a member whose heartbeat is of a newer
// version than this reader knows: what it says of itself is not read.
func stateNewer(v int) string { return fmt.Sprintf("newer release (heartbeat v%d)", v) }

// Member is one process of the app as its last heartbeat describes it.
type Member struct {
	Version      int    `json:"v"`
	Node         string `json:"node"`
	PGAddr       string `json:"pg_addr"`
	HTTPAddr     string `json:"http_addr,omitempty"`
	TasksOwned   int    `json:"tasks_owned"`
	TasksStandby int    `json:"tasks_standby"`
	State        string `json:"state"`
	// HopSeals: this process's binary knows repartition hop generations
	// (catalog records keyed hop/..., op seal). Hop topics are sealed for
	// purging only while every member says so: a binary of the previous
	// release would not know which generation a stream reads.
	HopSeals bool `json:"hop_seals,omitempty"`
	// StreamStops: this process's binary follows ALTER STREAM ... STOP
	// (catalog records keyed run/...). A STOP is refused while a member
	// does not: it would go on running the stream.
	StreamStops bool `json:"stream_stops,omitempty"`
	// Seen is when the heartbeat was written (not serialised: the log's
	// record time).
	Seen time.Time `json:"-"`
}

// Log is the control topic as membership uses it.
type Log interface {
	// Put writes value under key; nil value is a tombstone.
	Put(ctx context.Context, key string, value []byte) error
	// Follow reads the topic from its start and hands every record to fn
	// until ctx ends or reading fails. at is when the record was written.
	Follow(ctx context.Context, fn func(key string, value []byte, at time.Time)) error
}

const keyPrefix = "member/"

// Membership publishes this process's heartbeat and tracks the others'.
type Membership struct {
	log     Log
	self    func() Member
	every   time.Duration
	timeout time.Duration
	now     func() time.Time
	onError func(error)

	mu      sync.Mutex
	members map[string]Member
}

// Options tunes a Membership.
type Options struct {
	// Timeout: a member unseen this long is gone.
	Timeout time.Duration
	// Every is the heartbeat period (0: a second, or a third of Timeout
	// when that is shorter, so that a lost heartbeat or two is no exit).
	Every time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// OnError hears failures to write or read (nil: ignored; both retry).
	OnError func(error)
}

// New returns the membership of the process self describes.
func New(log Log, self func() Member, o Options) (*Membership, error) {
	if o.Timeout <= 0 {
		return nil, fmt.Errorf("cluster: session timeout must be positive, not %v", o.Timeout)
	}
	if o.Every <= 0 {
		o.Every = min(time.Second, o.Timeout/3)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnError == nil {
		o.OnError = func(error) {}
	}
	return &Membership{log: log, self: self, every: o.Every, timeout: o.Timeout, now: o.Now, onError: o.OnError, members: map[string]Member{}}, nil
}

// Run heartbeats and follows the others until ctx ends.
func (m *Membership) Run(ctx context.Context) {
	go func() {
		for ctx.Err() == nil {
			err := m.log.Follow(ctx, m.note)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				m.onError(fmt.Errorf("follow the control topic: %w", err))
			}
			sleep(ctx, m.every)
		}
	}()
	for ctx.Err() == nil {
		// A heartbeat the broker does not take in time is late anyway.
		bctx, cancel := context.WithTimeout(ctx, m.timeout)
		if err := m.Beat(bctx); err != nil && ctx.Err() == nil {
			m.onError(err)
		}
		cancel()
		sleep(ctx, m.every)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Beat writes this process's heartbeat now.
func (m *Membership) Beat(ctx context.Context) error {
	me := m.self()
	me.Version = recordVersion
	b, err := json.Marshal(me)
	if err != nil {
		return err
	}
	if err := m.log.Put(ctx, keyPrefix+me.Node, b); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// Leave says this process is stopping: a leaving heartbeat (a reader that
// missed the tombstone still sees it go) and then the tombstone, so the
// others drop it at once instead of after the session timeout.
func (m *Membership) Leave(ctx context.Context) error {
	me := m.self()
	me.Version, me.State = recordVersion, StateLeaving
	b, err := json.Marshal(me)
	if err != nil {
		return err
	}
	if err := m.log.Put(ctx, keyPrefix+me.Node, b); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	return m.log.Put(ctx, keyPrefix+me.Node, nil)
}

// note applies one record of the control topic.
func (m *Membership) note(key string, value []byte, at time.Time) {
	node, ok := strings.CutPrefix(key, keyPrefix)
	if !ok {
		return // another kind of control record
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if value == nil {
		delete(m.members, node)
		return
	}
	var mem Member
	var v struct {
		V int `json:"v"`
	}
	switch err := json.Unmarshal(value, &v); {
	case err != nil:
		return
	case v.V > recordVersion:
		// Written by a newer release: its fields may mean something else
		// (or not parse), so only its liveness is taken.
		mem = Member{Version: v.V, Node: node, State: stateNewer(v.V)}
	default:
		if err := json.Unmarshal(value, &mem); err != nil || mem.Node != node {
			return
		}
	}
	if mem.State == StateLeaving {
		delete(m.members, node)
		return
	}
	mem.Seen = at
	if old, ok := m.members[node]; ok && old.Seen.After(at) {
		return
	}
	m.members[node] = mem
}

// Members lists the live members by node id: heard from within the
// session timeout, and not leaving.
func (m *Membership) Members() []Member {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(m.members))
	for _, mem := range m.members {
		if now.Sub(mem.Seen) <= m.timeout {
			out = append(out, mem)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
