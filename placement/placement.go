// Package placement is the producer-placement check of a keyed stateful
// stream (seed: kafka-and-partitioning, "Producer placement"): per input
// partition, whether the records sit where Kafka's murmur2 partitioner
// would have put them, the partition counts the partition's state ran
// under, and the transition window that follows a count change.
//
// It is pure logic: the caller gives it the rows' partition-key values and
// offsets, the clock, and two questions for the broker (the topic's
// current count, the partition's log end), and persists what Encode
// returns with the partition's state.
package placement

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/state"
)

// Verdicts, as the turbine_partition_key_placement gauge shows them.
const (
	Misplaced = -1 // a record sits where murmur2 would not have put it: durable
	Unknown   = 0  // nothing to say yet
	LooksOK   = 1  // enough distinct keys were seen where murmur2 puts them
)

// SampleRows is how many rows of a batch are checked at most.
const SampleRows = 64

// DefaultWindow is how long producers get to pick up a new partition count.
const DefaultWindow = 10 * time.Minute

// Threshold is how many distinct well-placed keys make the verdict 1 on a
// topic of n partitions: ceil(40 / log2 n), so 40 on 2, 20 on 4, 5 on 960;
// on 1 partition every row is well placed and the first key is enough.
func Threshold(n int) int {
	if n <= 1 {
		return 1
	}
	return int(math.Ceil(40/math.Log2(float64(n)) - 1e-9))
}

// State is what one partition remembers, persisted with its state.
type State struct {
	// Counts are the partition counts the state ran under, oldest first;
	// the last is the current one. The first is the baseline.
	Counts  []int
	Verdict int
	// Keys are the distinct well-placed keys seen under the current count
	// while no window was open, until the threshold is reached.
	Keys map[string]struct{}
	// Open: a transition window is open, since OpenedAt (unix ms). NotedEnd
	// is the log end noted when the window's time was up (-1: not yet):
	// records before it are still inside the window, which closes once
	// the partition has read up to it.
	Open     bool
	OpenedAt int64
	NotedEnd int64
	// ClosedAt is the noted end of the last window closed (-1: none).
	ClosedAt int64
	// CleanupDue: the count changed and the keys that moved have not been
	// dropped yet (the start-up cleanup runs once the window has closed).
	CleanupDue bool
}

// Current is the count the partition runs under (0: none yet).
func (s *State) Current() int {
	if len(s.Counts) == 0 {
		return 0
	}
	return s.Counts[len(s.Counts)-1]
}

// WellPlaced is how many distinct well-placed keys count toward 1 now
// (the threshold once reached).
func (s *State) WellPlaced() int {
	if s.Verdict == LooksOK {
		return Threshold(s.Current())
	}
	return len(s.Keys)
}

// Transition describes the window for SHOW PARTITIONS.
func (s *State) Transition() string {
	switch {
	case s.Open && s.NotedEnd < 0:
		return "open since " + time.UnixMilli(s.OpenedAt).UTC().Format(time.RFC3339)
	case s.Open:
		return "open until offset " + strconv.FormatInt(s.NotedEnd, 10)
	case s.ClosedAt >= 0:
		return "closed at offset " + strconv.FormatInt(s.ClosedAt, 10)
	}
	return "none"
}

// History is the counts as text: "4,8".
func (s *State) History() string {
	parts := make([]string, len(s.Counts))
	for i, n := range s.Counts {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// Broker is what the check asks Kafka, only when it needs to.
type Broker interface {
	// Count is the topic's partition count now.
	Count() (int, error)
	// End is the partition's log end offset now.
	End() (int64, error)
}

// Checker is one partition's check.
type Checker struct {
	State
	Partition int32
	// Window is how long producers get after a count change.
	Window time.Duration
	Now    func() time.Time
	Broker Broker
	// Dirty: the state changed since Encode was last called.
	Dirty bool
	// Changed, when set, hears of a count seen from the broker while
	// running (the window it opened).
	Changed func(from, to int)
	rot     int
}

// Start readies a partition's check at start-up: n is the count it starts
// under, pos the offset it resumes from. A first count is the baseline
// and opens no window; a count not seen last opens one (and holds the
// cleanup, which then waits for the window to close). It reports whether
// this start-up sees a new count.
func (c *Checker) Start(n int, pos int64) (newCount bool, err error) {
	if c.Keys == nil {
		c.Keys = map[string]struct{}{}
	}
	if len(c.Counts) == 0 {
		c.Counts, c.NotedEnd, c.ClosedAt = []int{n}, -1, -1
		c.Dirty = true
		return false, nil
	}
	if c.Current() != n {
		c.openWindow(n)
		return true, nil
	}
	// Never closed by the clock at start-up: the log end noted now lies
	// beyond any backlog, which is read inside the window.
	return false, c.advance(pos)
}

// openWindow makes n the current count and opens a transition window.
func (c *Checker) openWindow(n int) {
	c.Counts = append(c.Counts, n)
	c.Open, c.OpenedAt, c.NotedEnd = true, c.Now().UnixMilli(), -1
	c.CleanupDue = true
	if c.Verdict == LooksOK {
		c.Verdict = Unknown
	}
	clear(c.Keys)
	c.Dirty = true
}

// CleanupReady reports whether the start-up cleanup may run: it is due,
// the window has closed and the verdict is not -1. The caller decides on
// the declaration.
func (c *Checker) CleanupReady() bool {
	return c.CleanupDue && !c.Open && c.Verdict != Misplaced
}

// CleanedUp records that the keys that moved were dropped (or, for an
// undeclared source, deliberately kept).
func (c *Checker) CleanedUp() {
	c.CleanupDue = false
	c.Dirty = true
}

// Tick moves the window on: once its time is up it notes the log end, and
// it closes once the partition has read up to that end (pos is the next
// offset the partition reads).
func (c *Checker) Tick(pos int64) error { return c.advance(pos) }

func (c *Checker) advance(pos int64) error {
	if !c.Open {
		return nil
	}
	if c.NotedEnd < 0 {
		if c.Now().Sub(time.UnixMilli(c.OpenedAt)) < c.Window {
			return nil
		}
		end, err := c.Broker.End()
		if err != nil {
			return fmt.Errorf("log end for the transition window: %w", err)
		}
		c.NotedEnd = end
		c.Dirty = true
	}
	if pos >= c.NotedEnd {
		c.Open, c.ClosedAt = false, c.NotedEnd
		c.Dirty = true
	}
	return nil
}

// Row is one sampled row: its partition-key text (nil: NULL) and offset.
type Row struct {
	Key    []byte
	Null   bool
	Offset int64
}

// Sample picks up to SampleRows of n rows, spread over the batch and
// rotating from batch to batch so that every row is eventually looked at.
func (c *Checker) Sample(n int) []int {
	if n <= SampleRows {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, SampleRows)
	step := n / SampleRows
	start := c.rot % step
	c.rot++
	for i := range out {
		out[i] = start + i*step
	}
	return out
}

// Judge checks a batch's sampled rows. A row murmur2 would not place here
// under the current count, and no open window excuses, is a suspicion: the
// broker is asked for the count once; if it changed, a window opens and
// the rows are judged again under the new count, otherwise the verdict is
// -1.
func (c *Checker) Judge(rows []Row) error {
	if c.Verdict == Misplaced || len(c.Counts) == 0 {
		return nil
	}
	if !c.judge(rows) {
		return nil
	}
	n, err := c.Broker.Count()
	if err != nil {
		return fmt.Errorf("partition count after a misplaced-looking record: %w", err)
	}
	if n > 0 && n != c.Current() {
		from := c.Current()
		c.openWindow(n)
		if c.Changed != nil {
			c.Changed(from, n)
		}
		if !c.judge(rows) {
			return nil
		}
	}
	c.Verdict = Misplaced
	clear(c.Keys)
	c.Dirty = true
	return nil
}

// judge reports whether a row is suspect; it counts the well-placed keys.
func (c *Checker) judge(rows []Row) (suspect bool) {
	n := c.Current()
	for _, r := range rows {
		if r.Null {
			continue // a null key goes to a random partition: no evidence
		}
		inWindow := c.Open && (c.NotedEnd < 0 || r.Offset < c.NotedEnd)
		if state.PartitionFor(r.Key, n) == c.Partition {
			if !inWindow && c.Verdict == Unknown {
				if _, seen := c.Keys[string(r.Key)]; !seen {
					c.Keys[string(r.Key)] = struct{}{}
					c.Dirty = true
					if len(c.Keys) >= Threshold(n) {
						c.Verdict = LooksOK
						clear(c.Keys)
					}
				}
			}
			continue
		}
		if inWindow && c.earlierPlaces(r.Key) {
			continue // placed under an earlier count, inside the window
		}
		return true
	}
	return false
}

// earlierPlaces reports whether an earlier count of the history places key
// in this partition.
func (c *Checker) earlierPlaces(key []byte) bool {
	for _, n := range c.Counts[:len(c.Counts)-1] {
		if state.PartitionFor(key, n) == c.Partition {
			return true
		}
	}
	return false
}

// Encode is the state as stored.
func (s *State) Encode() []byte {
	v := []byte{1} // version
	v = binary.AppendUvarint(v, uint64(len(s.Counts)))
	for _, n := range s.Counts {
		v = binary.AppendUvarint(v, uint64(n))
	}
	v = binary.AppendVarint(v, int64(s.Verdict))
	flags := byte(0)
	if s.Open {
		flags |= 1
	}
	if s.CleanupDue {
		flags |= 2
	}
	v = append(v, flags)
	v = binary.AppendVarint(v, s.OpenedAt)
	v = binary.AppendVarint(v, s.NotedEnd)
	v = binary.AppendVarint(v, s.ClosedAt)
	v = binary.AppendUvarint(v, uint64(len(s.Keys)))
	for k := range s.Keys {
		v = binary.AppendUvarint(v, uint64(len(k)))
		v = append(v, k...)
	}
	return v
}

var errCorrupt = errors.New("placement: corrupt state")

// Decode reads Encode's bytes (nil: a partition never checked).
func Decode(v []byte) (State, error) {
	s := State{NotedEnd: -1, ClosedAt: -1, Keys: map[string]struct{}{}}
	if len(v) == 0 {
		return s, nil
	}
	if v[0] != 1 {
		return s, fmt.Errorf("%w: version %d", errCorrupt, v[0])
	}
	r := reader{b: v[1:]}
	nc := r.uvarint()
	for i := uint64(0); i < nc && r.err == nil; i++ {
		s.Counts = append(s.Counts, int(r.uvarint()))
	}
	s.Verdict = int(r.varint())
	flags := r.byte()
	s.Open, s.CleanupDue = flags&1 != 0, flags&2 != 0
	s.OpenedAt, s.NotedEnd, s.ClosedAt = r.varint(), r.varint(), r.varint()
	nk := r.uvarint()
	for i := uint64(0); i < nk && r.err == nil; i++ {
		s.Keys[string(r.bytes(r.uvarint()))] = struct{}{}
	}
	if r.err != nil || len(r.b) != 0 {
		return s, errCorrupt
	}
	return s, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	x, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *reader) varint() int64 {
	x, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errCorrupt
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.err = errCorrupt
		return 0
	}
	x := r.b[0]
	r.b = r.b[1:]
	return x
}

func (r *reader) bytes(n uint64) []byte {
	if uint64(len(r.b)) < n {
		r.err = errCorrupt
		return nil
	}
	x := r.b[:n]
	r.b = r.b[n:]
	return x
}
