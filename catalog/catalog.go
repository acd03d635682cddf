// Package catalog holds the sources and streams the user declared, with
// their schemas and typed options. It is in memory; durability comes from a
// Log the server supplies (a compacted Kafka topic), to which every change is
// appended as the statement that made it, so replaying the log rebuilds the
// catalog.
package catalog

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/turbinesql/turbinesql/streamplan"
	"github.com/turbinesql/turbinesql/types"
)

// Kind tells sources from streams.
type Kind string

const (
	KindSource Kind = "source"
	KindStream Kind = "stream"
	KindUser   Kind = "user"
	// KindHop keys a repartition hop's generation records (OpSeal): they
	// describe no object and are never replayed as a statement.
	KindHop Kind = "hop"
	// KindRun keys a stream's run state, the last ALTER STREAM ... STOP
	// (value RunStopped) or START (RunStarted). Like a seal, it is never
	// replayed as a statement. The START is a record, not a tombstone: its
	// offset tells a node that was down meanwhile that the stream's state
	// may have been rescaled since its local copy was written.
	KindRun Kind = "run"
)

// Values of KindRun records.
const (
	RunStopped = "stopped"
	RunStarted = "started"
)

// Source is a Kafka topic declared as a relation.
type Source struct {
	Name          string
	Schema        types.Schema
	Topic         string
	Format        string
	Partitions    int // declared count; 0 when not given
	PartitionKey  string
	PartitionHash string
	OnError       streamplan.OnError
	DLQTopic      string
	Watermark     *Watermark
	// IdleTimeoutMs: a partition with nothing new to read for this long
	// stops holding the watermark back.
	IdleTimeoutMs int64
	// KafkaTimestamp: the watermark column is each record's Kafka (broker
	// or producer) timestamp, not a JSON field (timestamp = 'kafka').
	KafkaTimestamp bool
	SQL            string
}

// NotNullTime is the index of the column INSERT must not leave NULL: the
// event-time column its WATERMARK names, which a windowed stream cannot
// place a row without (-1: none; with timestamp = 'kafka' the record's
// timestamp is the event time, and the column is not read).
func (s *Source) NotNullTime() int {
	if s.Watermark == nil || s.KafkaTimestamp {
		return -1
	}
	return s.Schema.Index(s.Watermark.Column)
}

// DefaultIdleTimeoutMs is a source's idle_timeout when it sets none.
const DefaultIdleTimeoutMs = 5000

// Watermark says which column is event time and how far behind the maximum
// seen the watermark trails.
type Watermark struct {
	Column  string
	DelayMs int64
}

// Stream is a continuous query and its output topic.
type Stream struct {
	Name       string
	Topic      string
	Partitions int
	Input      string // the relation it reads
	Schema     types.Schema
	Options    StreamOptions
	// KeyColumn is the output column its records are keyed by and placed
	// with murmur2 (as INSERT keys a source by its partition_key): the
	// message_key, or else the group key of an aggregation (an upsert
	// stream's or a windowed one's) grouped by one key that the select list
	// outputs unchanged under its own name. Empty: the output is not keyed
	// by a column. A stream reading this one sees it as its partition key.
	KeyColumn string
	// Watermark is the event time of the output, for streams reading it: a
	// stateless stream that outputs its input's watermark column unchanged
	// keeps that watermark (under the output name). nil otherwise; a
	// window over any TIMESTAMP column of the output then uses that column
	// with no delay.
	Watermark *Watermark
	// Upsert: GROUP BY keys without a window, so the output topic is a
	// changelog (the latest record of a key is its current row) and a
	// bounded read shows the current table.
	Upsert bool
	// Windowed: the query groups by a window (TUMBLE, HOP, SESSION), so
	// each output record is a pane; SUBSCRIBE marks them with is_final.
	Windowed bool
	// PrimaryKey names the output columns holding the group keys of an
	// upsert stream, when the select list outputs every key unchanged;
	// DESCRIBE, \d and the pg_catalog show it as the primary key.
	PrimaryKey []string
	// Planned is the strategy the cost rule chose at CREATE
	// (StrategyAuto: the strategy option decides). The catalog record
	// carries it (its SQL spelling, Strategy.Recorded), so that every node
	// plans the stream the same way.
	Planned streamplan.Strategy `json:",omitempty"`
	// Hop is the repartition topic (the hop's generation) the stream
	// reads, as its catalog record says (empty: not a repartition stream,
	// or one created before hops had generations, which reads the first).
	Hop string `json:",omitempty"`
	// Start is where the stream's output begins in its topic: the topic's
	// log end offsets at CREATE, before the stream wrote anything. Every
	// reader of the stream (SELECT, SUBSCRIBE, a stream reading it) starts
	// there, so a topic that held records already (an earlier stream's of
	// the same name, an outside producer's) shows only this stream's
	// output. nil (a fresh topic, or a record written before Start was
	// recorded): the whole topic.
	Start Offsets `json:",omitempty"`
	// KeyedPanes: a windowed stream whose panes were keyed by their group
	// key from its creation on, so its group key column can be its
	// KeyColumn. One created by an earlier release (its catalog record
	// says nothing of it) wrote unkeyed panes before, not placed by the
	// key, so it keeps none (its panes are keyed from now on all the
	// same).
	KeyedPanes bool `json:",omitempty"`
	SQL        string
}

// StreamOptions are the typed WITH options of a stream.
type StreamOptions struct {
	Strategy   streamplan.Strategy // what the strategy option asks for
	Guarantee  streamplan.Guarantee
	MessageKey string
	// AllowedLatenessMs keeps a window open this long past the watermark.
	AllowedLatenessMs int64
	// LateDataTopic receives rows later than that; empty: they are dropped
	// (and counted).
	LateDataTopic string
	// EmitEveryMs: early fires of open windows this often (processing
	// time); 0: only final panes.
	EmitEveryMs int64
	// StateTTLMs: an upsert stream forgets a group not updated for this
	// long (processing time), writing a tombstone for its key; 0: never.
	StateTTLMs int64 `json:",omitempty"`
	// RepartitionPartitions and CombinePartitions are the declared
	// partition counts of the stream's internal topic (0: as many as its
	// input topic has).
	RepartitionPartitions int `json:",omitempty"`
	CombinePartitions     int `json:",omitempty"`
}

// Relation is what a query can read: a source or a stream's output.
type Relation struct {
	Name         string
	Kind         Kind
	Schema       types.Schema
	Topic        string
	PartitionKey string
	Watermark    *Watermark
	Source       *Source // nil for streams
	Stream       *Stream // nil for sources
	// From is the first offset of each partition of Topic that belongs to
	// the relation (a stream's Start); nil: the whole topic. Every reader
	// of the relation starts there.
	From Offsets
	// Misplaced, when set, says how it is known that Topic's records do
	// not sit where murmur2 on PartitionKey puts them (a stream's
	// placement check saw -1): a plan that relies on that placement would
	// keep one key on several partitions. The server sets it when it plans
	// a new statement; the catalog never does.
	Misplaced string
}

// Log persists catalog changes, each as one record of the object's key.
type Log interface {
	Write(Change) error
}

// Op says what a change does, so that every node can judge a record the
// same way in the log's order (Ledger).
type Op string

const (
	OpCreate Op = "create" // a new object: its name must be free
	OpAlter  Op = "alter"  // a new definition of an object that exists
	OpDrop   Op = "drop"   // the object goes (SQL is empty)
	OpPut    Op = "put"    // a user, created or altered: the last one stands
	// OpRepair restates the object's state after a record that lost a
	// race, so that the last record of the key (what compaction keeps)
	// is the truth. Empty SQL: the object does not exist.
	OpRepair Op = "repair"
	// OpSeal closes a repartition hop's generation (a KindHop record
	// named by its topic) to new streams: a CREATE after it in the log
	// that names the generation loses, so the generation's readers are
	// fixed and its consumed records can be purged (server/purge.go).
	OpSeal Op = "seal"
	// OpStop and OpStart are a stream's KindRun records: stopped on every
	// node, and running again.
	OpStop  Op = "stop"
	OpStart Op = "start"
)

// Change is one catalog record: the statement that makes the object (empty
// for a drop), with what the log's readers need to judge it.
type Change struct {
	Kind Kind
	Name string
	SQL  string
	Op   Op
	// Reads is the relation a stream reads (empty otherwise): a drop of
	// that relation loses to the stream's create.
	Reads string
	// Planned is the hop strategy the cost rule chose when the stream was
	// created, so every node runs the same plan (StrategyAuto: its options
	// decide). The record carries its SQL spelling.
	Planned streamplan.Strategy
	// Hop is the repartition topic generation a stream reads (empty: not
	// a repartition stream).
	Hop string
	// Start is a stream's output start (Stream.Start; nil: its whole
	// topic).
	Start Offsets
	// KeyedPanes: a windowed stream created by a release that keys its
	// panes by their group key (Stream.KeyedPanes).
	KeyedPanes bool
	// DeleteTopic, on a stream's drop (DROP STREAM ... DELETE TOPIC): its
	// writer deletes the stream's topics once every node has stopped it;
	// the others forget what their clients knew of them, so a topic
	// created again under the name is not taken for the old one.
	DeleteTopic bool
}

// Catalog is the set of declared objects. Safe for concurrent use.
type Catalog struct {
	mu      sync.RWMutex
	sources map[string]*Source
	streams map[string]*Stream
	users   map[string]*User
	log     Log
}

// New returns an empty catalog writing changes to log (nil: not persisted).
func New(log Log) *Catalog {
	return &Catalog{sources: map[string]*Source{}, streams: map[string]*Stream{}, users: map[string]*User{}, log: log}
}

// ErrExists is returned when a name is taken.
type ErrExists struct{ Name string }

func (e *ErrExists) Error() string { return fmt.Sprintf("relation %q already exists", e.Name) }

// ErrNotFound is returned for an unknown name.
type ErrNotFound struct{ Name string }

func (e *ErrNotFound) Error() string { return fmt.Sprintf("relation %q does not exist", e.Name) }

// ErrHopSealed is a CREATE STREAM's record that names a repartition hop
// generation closed to new streams before it in the log.
type ErrHopSealed struct {
	Stream, Topic string
}

func (e *ErrHopSealed) Error() string {
	return fmt.Sprintf("stream %q would read repartition topic %q, which was sealed for purging meanwhile; run CREATE STREAM again and it reads the next generation", e.Stream, e.Topic)
}

// ErrInUse is returned when dropping a source that streams read.
type ErrInUse struct {
	Name    string
	Readers []string
}

func (e *ErrInUse) Error() string {
	return fmt.Sprintf("cannot drop %q: stream(s) %s read it", e.Name, strings.Join(e.Readers, ", "))
}

// Readers lists the streams that read name, directly or through other
// streams, each after every stream that reads it: the order in which
// DROP ... CASCADE drops them.
func (c *Catalog) Readers(name string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(n string) {
		var direct []string
		for _, st := range c.streams {
			if st.Input == n && !seen[st.Name] {
				direct = append(direct, st.Name)
			}
		}
		sort.Strings(direct)
		for _, r := range direct {
			if seen[r] {
				continue
			}
			seen[r] = true
			visit(r)
			out = append(out, r)
		}
	}
	visit(name)
	return out
}

func (c *Catalog) taken(name string) bool {
	_, a := c.sources[name]
	_, b := c.streams[name]
	return a || b
}

// AddSource registers s; persist says whether to append it to the log
// (false while replaying the log itself).
func (c *Catalog) AddSource(s *Source, persist bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.taken(s.Name) {
		return &ErrExists{Name: s.Name}
	}
	if persist && c.log != nil {
		if err := c.log.Write(Change{Kind: KindSource, Name: s.Name, SQL: s.SQL, Op: OpCreate}); err != nil {
			return fmt.Errorf("persist source %s: %w", s.Name, err)
		}
	}
	c.sources[s.Name] = s
	return nil
}

// ReplaceSource swaps the definition of an existing source (ALTER
// SOURCE), persisting its new statement when persist is set (not when
// another node's change is applied).
func (c *Catalog) ReplaceSource(s *Source, persist bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sources[s.Name]; !ok {
		return &ErrNotFound{Name: s.Name}
	}
	if persist && c.log != nil {
		if err := c.log.Write(Change{Kind: KindSource, Name: s.Name, SQL: s.SQL, Op: OpAlter}); err != nil {
			return fmt.Errorf("persist source %s: %w", s.Name, err)
		}
	}
	c.sources[s.Name] = s
	return nil
}

// AddStream registers s.
func (c *Catalog) AddStream(s *Stream, persist bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.taken(s.Name) {
		return &ErrExists{Name: s.Name}
	}
	if persist && c.log != nil {
		if err := c.log.Write(Change{Kind: KindStream, Name: s.Name, SQL: s.SQL, Op: OpCreate, Reads: s.Input, Planned: s.Planned, Hop: s.Hop, Start: s.Start, KeyedPanes: s.KeyedPanes}); err != nil {
			return fmt.Errorf("persist stream %s: %w", s.Name, err)
		}
	}
	c.streams[s.Name] = s
	return nil
}

// ReplaceStream swaps the definition of an existing stream (ALTER STREAM
// ... SET: a new plan, and the output start it writes from), persisting
// its new statement when persist is set.
func (c *Catalog) ReplaceStream(s *Stream, persist bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.streams[s.Name]; !ok {
		return &ErrNotFound{Name: s.Name}
	}
	if persist && c.log != nil {
		if err := c.log.Write(Change{Kind: KindStream, Name: s.Name, SQL: s.SQL, Op: OpAlter, Reads: s.Input, Planned: s.Planned, Hop: s.Hop, Start: s.Start}); err != nil {
			return fmt.Errorf("persist stream %s: %w", s.Name, err)
		}
	}
	c.streams[s.Name] = s
	return nil
}

// Drop removes a source or stream. A source or stream that streams read
// cannot be dropped.
func (c *Catalog) Drop(kind Kind, name string) error {
	return c.drop(Change{Kind: kind, Name: name, Op: OpDrop})
}

// DropStreamDeletingTopic is Drop of stream name whose record says its
// topics are deleted with it (Change.DeleteTopic).
func (c *Catalog) DropStreamDeletingTopic(name string) error {
	return c.drop(Change{Kind: KindStream, Name: name, Op: OpDrop, DeleteTopic: true})
}

func (c *Catalog) drop(ch Change) error {
	kind, name := ch.Kind, ch.Name
	c.mu.Lock()
	defer c.mu.Unlock()
	switch kind {
	case KindSource:
		if _, ok := c.sources[name]; !ok {
			return &ErrNotFound{Name: name}
		}
	case KindStream:
		if _, ok := c.streams[name]; !ok {
			return &ErrNotFound{Name: name}
		}
	}
	var readers []string
	for _, st := range c.streams {
		if st.Input == name {
			readers = append(readers, st.Name)
		}
	}
	if len(readers) > 0 {
		sort.Strings(readers)
		return &ErrInUse{Name: name, Readers: readers}
	}
	if c.log != nil {
		if err := c.log.Write(ch); err != nil {
			return fmt.Errorf("persist drop of %s: %w", name, err)
		}
	}
	delete(c.sources, name)
	delete(c.streams, name)
	return nil
}

// Forget removes an object without writing to the log and without
// checking its readers: the log already says it is gone (another node
// dropped it, or this node's create lost a race).
func (c *Catalog) Forget(kind Kind, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch kind {
	case KindSource:
		delete(c.sources, name)
	case KindStream:
		delete(c.streams, name)
	case KindUser:
		delete(c.users, name)
	}
}

// Source looks up a source.
func (c *Catalog) Source(name string) (*Source, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, ok := c.sources[name]
	return s, ok
}

// Stream looks up a stream.
func (c *Catalog) Stream(name string) (*Stream, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, ok := c.streams[name]
	return s, ok
}

// Relation looks up a readable relation by name.
func (c *Catalog) Relation(name string) (*Relation, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if s, ok := c.sources[name]; ok {
		return &Relation{Name: s.Name, Kind: KindSource, Schema: s.Schema, Topic: s.Topic,
			PartitionKey: s.PartitionKey, Watermark: s.Watermark, Source: s}, true
	}
	if s, ok := c.streams[name]; ok {
		return &Relation{Name: s.Name, Kind: KindStream, Schema: s.Schema, Topic: s.Topic,
			PartitionKey: s.KeyColumn, Watermark: s.Watermark, Stream: s, From: s.Start}, true
	}
	return nil, false
}

// Sources lists sources by name.
func (c *Catalog) Sources() []*Source {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*Source, 0, len(c.sources))
	for _, s := range c.sources {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Streams lists streams by name.
func (c *Catalog) Streams() []*Stream {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*Stream, 0, len(c.streams))
	for _, s := range c.streams {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
