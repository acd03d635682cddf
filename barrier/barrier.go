// Package barrier is the record format and the bookkeeping of a FLUSH
// that spans every process of an app.
//
// The process that runs FLUSH cuts it into steps: for each level of the
// app's stages (those that read the sources, then those that read the
// internal hop topics), a reach step (read every partition up to the
// offsets its topic had when the step began) and a close step (close what
// that closes, and commit). A step goes out as a record on the app's flush
// topic; every process runs it over the tasks it owns and answers with an
// acknowledgement naming the partitions it covered. The step is done once
// the acknowledgements cover every partition of every stage the step
// names. Kafka carries both directions: no process talks to another.
package barrier

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Step asks every process to run one step of a FLUSH over its tasks.
type Step struct {
	Flush  string `json:"flush"`  // the FLUSH's id: its origin node and a sequence
	Origin string `json:"origin"` // the node that runs the FLUSH
	Index  int    `json:"index"`  // the step's place in its FLUSH
	// Attempt counts sends of the same step: a step is sent again when its
	// acknowledgements do not cover it in time (a task moved meanwhile).
	Attempt int  `json:"attempt"`
	Close   bool `json:"close"`
	// Targets: per topic read, per partition, the offset to reach.
	Targets map[string]map[int32]int64 `json:"targets"`
}

// Ack is one process's answer to a step.
type Ack struct {
	Flush string `json:"flush"`
	Index int    `json:"index"`
	Node  string `json:"node"`
	// Covered: per consumer group (one per stage), the partitions whose
	// tasks ran the step on that process.
	Covered map[string][]int32 `json:"covered,omitempty"`
	// Failed: per stream, why it could not run the step there.
	Failed map[string]string `json:"failed,omitempty"`
	// Recovers: the failed streams that restart by themselves (an
	// exactly-once commit Kafka did not take, or a task fenced because
	// the group moved its partition). The wire name is the one of the
	// first release, which had only the commit Kafka did not take: an
	// older coordinator waits for both alike, as it should.
	Recovers []string `json:"aborted,omitempty"`
	// Restoring: per consumer group, partitions assigned to that process
	// whose tasks still restore their state (they run the step once
	// restored).
	Restoring map[string][]int32 `json:"restoring,omitempty"`
}

// version is the record format written; a reader refuses a newer one, so
// during a rolling upgrade an old process ignores what it cannot read
// (and the FLUSH that sent it waits for the processes that can).
const version = 1

type record struct {
	V    int   `json:"v"`
	Step *Step `json:"step,omitempty"`
	Ack  *Ack  `json:"ack,omitempty"`
}

// ErrVersion is a record written by a newer release.
var ErrVersion = errors.New("barrier: record of a newer version")

// EncodeStep is the flush topic's record value for s.
func EncodeStep(s Step) []byte { return encode(record{V: version, Step: &s}) }

// EncodeAck is the flush topic's record value for a.
func EncodeAck(a Ack) []byte { return encode(record{V: version, Ack: &a}) }

func encode(r record) []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // plain structs of strings and numbers always encode
	}
	return b
}

// Decode reads a flush topic record: a step or an acknowledgement.
func Decode(b []byte) (*Step, *Ack, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, nil, fmt.Errorf("barrier: %w", err)
	}
	switch {
	case r.V > version:
		return nil, nil, fmt.Errorf("%w (%d)", ErrVersion, r.V)
	case r.Step != nil:
		return r.Step, nil, nil
	case r.Ack != nil:
		return nil, r.Ack, nil
	}
	return nil, nil, errors.New("barrier: record is neither a step nor an acknowledgement")
}

// Stage is what a step must cover of one stage: every partition of its
// input, unless every stream it serves failed.
type Stage struct {
	Partitions int
	Streams    []string
}

// Coverage tracks the acknowledgements of one step.
type Coverage struct {
	want      map[string]Stage // per consumer group
	got       map[string]map[int32]bool
	failed    map[string]Failure
	restoring map[string]map[int32]bool
}

// Failure is why a stream could not run a step on some process.
type Failure struct {
	Msg string
	// Recovers: every process that reported the stream failed said it
	// restarts by itself.
	Recovers bool
}

// NewCoverage expects the stages in want (keyed by consumer group).
func NewCoverage(want map[string]Stage) *Coverage {
	return &Coverage{want: want, got: map[string]map[int32]bool{}, failed: map[string]Failure{}, restoring: map[string]map[int32]bool{}}
}

// Add counts one acknowledgement.
func (c *Coverage) Add(a Ack) {
	for g, ps := range a.Covered {
		if c.got[g] == nil {
			c.got[g] = map[int32]bool{}
		}
		for _, p := range ps {
			c.got[g][p] = true
		}
	}
	for g, ps := range a.Restoring {
		if c.restoring[g] == nil {
			c.restoring[g] = map[int32]bool{}
		}
		for _, p := range ps {
			c.restoring[g][p] = true
		}
	}
	for name, why := range a.Failed {
		recovers := slices.Contains(a.Recovers, name)
		f, seen := c.failed[name]
		if !seen {
			f = Failure{Msg: why, Recovers: recovers}
		}
		f.Recovers = f.Recovers && recovers
		c.failed[name] = f
	}
}

// Missing lists the partitions no acknowledgement covered yet, as
// "group/partition", sorted.
func (c *Coverage) Missing() []string {
	var out []string
	for g, st := range c.want {
		for p := 0; p < st.Partitions; p++ {
			if !c.got[g][int32(p)] {
				out = append(out, g+"/"+strconv.Itoa(p))
			}
		}
	}
	sort.Strings(out)
	return out
}

// Settled reports whether the step needs no more acknowledgements: every
// partition is covered, or the stages with uncovered partitions serve only
// streams some process reported failed (nothing runs them to wait for).
func (c *Coverage) Settled() bool {
	for g, st := range c.want {
		if c.complete(g, st) {
			continue
		}
		if len(st.Streams) == 0 {
			return false
		}
		for _, name := range st.Streams {
			if _, ok := c.failed[name]; !ok {
				return false
			}
		}
	}
	return true
}

// Restoring reports whether some process said it restores every partition
// still missing: the step waits for restores, however long they take,
// rather than for a process that may never answer.
func (c *Coverage) Restoring() bool {
	some := false
	for g, st := range c.want {
		for p := 0; p < st.Partitions; p++ {
			if c.got[g][int32(p)] {
				continue
			}
			if !c.restoring[g][int32(p)] {
				return false
			}
			some = true
		}
	}
	return some
}

// Retry forgets which partitions were restoring: a step sent again learns
// it afresh.
func (c *Coverage) Retry() { c.restoring = map[string]map[int32]bool{} }

func (c *Coverage) complete(g string, st Stage) bool {
	for p := 0; p < st.Partitions; p++ {
		if !c.got[g][int32(p)] {
			return false
		}
	}
	return true
}

// Failed is, per stream, why some process could not run the step, for
// the streams that have a partition no process covered. A stream that
// failed on one process while others ran all its partitions did not fail
// the step: that process left the stream's groups (a failed stage does),
// and the others run it.
func (c *Coverage) Failed() map[string]Failure {
	out := map[string]Failure{}
	for g, st := range c.want {
		if c.complete(g, st) {
			continue
		}
		for _, name := range st.Streams {
			if f, ok := c.failed[name]; ok {
				out[name] = f
			}
		}
	}
	for name, f := range c.failed {
		if !c.serves(name) {
			out[name] = f // no stage of it in the step: it could not start
		}
	}
	return out
}

func (c *Coverage) serves(name string) bool {
	for _, st := range c.want {
		if slices.Contains(st.Streams, name) {
			return true
		}
	}
	return false
}

// Summary names what is missing, briefly, for an error message.
func Summary(missing []string) string {
	const most = 5
	if len(missing) <= most {
		return strings.Join(missing, ", ")
	}
	return strings.Join(missing[:most], ", ") + fmt.Sprintf(" and %d more", len(missing)-most)
}

// Board hands the acknowledgements a process reads to the FLUSHes it
// coordinates. Safe for concurrent use.
type Board struct {
	mu   sync.Mutex
	subs map[string]*inbox
}

type inbox struct {
	acks   []Ack
	notify chan struct{}
}

// Subscribe starts collecting the acknowledgements of FLUSH flush; the
// returned function stops it.
func (b *Board) Subscribe(flush string) (*Inbox, func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.subs == nil {
		b.subs = map[string]*inbox{}
	}
	in := &inbox{notify: make(chan struct{}, 1)}
	b.subs[flush] = in
	return &Inbox{b: b, in: in}, func() {
		b.mu.Lock()
		delete(b.subs, flush)
		b.mu.Unlock()
	}
}

// Deliver hands a to the FLUSH it answers, if this process coordinates it.
func (b *Board) Deliver(a Ack) {
	b.mu.Lock()
	defer b.mu.Unlock()
	in := b.subs[a.Flush]
	if in == nil {
		return
	}
	in.acks = append(in.acks, a)
	select {
	case in.notify <- struct{}{}:
	default:
	}
}

// Inbox is one FLUSH's acknowledgements.
type Inbox struct {
	b  *Board
	in *inbox
}

// Ready is signalled when acknowledgements arrived since the last Take.
func (i *Inbox) Ready() <-chan struct{} { return i.in.notify }

// Take returns the acknowledgements of step index that arrived, and
// forgets them (acknowledgements of other steps stay).
func (i *Inbox) Take(index int) []Ack {
	i.b.mu.Lock()
	defer i.b.mu.Unlock()
	var out []Ack
	i.in.acks = slices.DeleteFunc(i.in.acks, func(a Ack) bool {
		if a.Index == index {
			out = append(out, a)
			return true
		}
		return a.Index < index // a late answer to a finished step
	})
	return out
}
