package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/streamplan"
)

// catalogLog keeps the catalog in a compacted Kafka topic: one record per
// object keyed "kind/name" holding the statement that created it, a
// tombstone when it is dropped. Every node of an app replays the same log
// at start and then follows it (catalog_follow.go).
//
// Record format, version 2: the value is still the statement (a version-1
// reader replays it unchanged); headers say who wrote it and what it does,
// so every node judges races the same way (catalog.Ledger):
//
//	turbine.catalog.v  "2"
//	turbine.node       the writer's node id
//	turbine.stmt       the statement's id (random, unique)
//	turbine.op         create, alter, drop, put, repair
//	turbine.reads      a stream's input relation
//	turbine.planned    the strategy the cost rule chose for a stream
//	turbine.undoes     on a drop: the statement id of the record it takes back
//	turbine.hop        a repartition stream's hop generation (its topic)
//	turbine.start      a stream's output start: "partition:offset" pairs,
//	                   comma-separated, partitions at 0 left out
//	                   (catalog.Offsets); none: the whole topic
//	turbine.delete.topic  on a stream's drop: "true" when DELETE TOPIC
//	                   deletes its topics (the other nodes forget them)
//
// A record keyed "run/{stream}" with op "stop" or "start" (value
// "stopped" or "started") is a stream's last ALTER STREAM ... STOP or
// START (stopstart.go); a node of an earlier release ignores it like a
// seal, so STOP is refused while one is a member.
//
// A record keyed "hop/{repartition topic}" with op "seal" closes that hop
// generation to new streams (purge.go). A node of the previous release
// ignores it while following the log and, at its start, skips it with a
// warning; the purger writes none until every member of the app
// advertises that it knows them (cluster.Member.HopSeals).
//
// turbine.start keeps the version: a record without it (any written
// before it existed) reads the whole output topic, as those releases did,
// and a node of such a release ignores it and does the same.
//
// A version-1 record (no headers) stands whatever came before it. A
// record of a version newer than catalogVersion (a change of meaning: a
// new op or header that an older node may ignore keeps the version) is not
// applied: a node of this release cannot judge it, so it logs an error
// naming the version, and at start marks the object failed (SHOW STREAMS,
// /readyz) until the node is upgraded. Releases before this check (up to
// 640cbcc) ignore the version header: they apply what the other headers
// say, and skip keys whose kind they do not know.
type catalogLog struct {
	k     *kafkaio.Client
	topic string
	node  string

	mu      sync.Mutex
	written []writtenRecord // by this node's statements, in order
	// beforeWrite, when set, runs before each statement's record is
	// written (tests hold a node there to race another).
	beforeWrite func(catalog.Change)
}

// writtenRecord is where a statement's record landed.
type writtenRecord struct {
	key, stmt string
	offset    int64
}

// catalogVersion is the format version written in turbine.catalog.v.
const catalogVersion = 2

// Header keys of catalog records.
const (
	hdrCatalogV = "turbine.catalog.v"
	hdrNode     = "turbine.node"
	hdrStmt     = "turbine.stmt"
	hdrOp       = "turbine.op"
	hdrReads    = "turbine.reads"
	hdrPlanned  = "turbine.planned"
	hdrUndoes   = "turbine.undoes"
	hdrHop      = "turbine.hop"
	hdrStart    = "turbine.start"
	hdrDelete   = "turbine.delete.topic"
	hdrKeyed    = "turbine.keyed.panes"
)

type catalogEntry struct {
	kind, name, sql string
	offset          int64
	rec             catalog.Record
	// newer: the record is of a newer version than this node reads
	// (errCatalogNewer), so it is not applied.
	newer error
}

// errCatalogNewer is a catalog record of a version newer than this
// release reads.
var errCatalogNewer = errors.New("catalog record written by a newer release")

// ensure creates the catalog topic (compacted) if it does not exist.
func (l *catalogLog) ensure(ctx context.Context) error { return l.k.EnsureCompacted(ctx, l.topic, 1) }

// Write appends a statement's record and remembers where it landed, so the
// statement can wait for every node's verdict on it (catalog.Log).
func (l *catalogLog) Write(c catalog.Change) error {
	_, err := l.writeTracked(c)
	return err
}

// writeTracked is Write, returning the record's offset.
func (l *catalogLog) writeTracked(c catalog.Change) (int64, error) {
	if l.beforeWrite != nil {
		l.beforeWrite(c)
	}
	key := string(c.Kind) + "/" + c.Name
	undoes := ""
	if c.Op == catalog.OpDrop {
		// A drop of what this statement itself created (a stream that
		// could not start) takes back that record only.
		l.mu.Lock()
		for _, w := range l.written {
			if w.key == key {
				undoes = w.stmt
			}
		}
		l.mu.Unlock()
	}
	stmt := newStmtID()
	off, err := l.write(context.Background(), c, stmt, undoes)
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	l.written = append(l.written, writtenRecord{key: key, stmt: stmt, offset: off})
	l.mu.Unlock()
	return off, nil
}

// write produces c and returns its offset.
func (l *catalogLog) write(ctx context.Context, c catalog.Change, stmt, undoes string) (int64, error) {
	hs := []kafkaio.Header{{Key: hdrCatalogV, Value: []byte(strconv.Itoa(catalogVersion))}, {Key: hdrNode, Value: []byte(l.node)},
		{Key: hdrStmt, Value: []byte(stmt)}, {Key: hdrOp, Value: []byte(c.Op)}}
	if c.Reads != "" {
		hs = append(hs, kafkaio.Header{Key: hdrReads, Value: []byte(c.Reads)})
	}
	if c.Planned != streamplan.StrategyAuto {
		hs = append(hs, kafkaio.Header{Key: hdrPlanned, Value: []byte(c.Planned.Recorded())})
	}
	if c.Hop != "" {
		hs = append(hs, kafkaio.Header{Key: hdrHop, Value: []byte(c.Hop)})
	}
	if start := c.Start.String(); start != "" {
		hs = append(hs, kafkaio.Header{Key: hdrStart, Value: []byte(start)})
	}
	if c.DeleteTopic {
		hs = append(hs, kafkaio.Header{Key: hdrDelete, Value: []byte("true")})
	}
	if c.KeyedPanes {
		hs = append(hs, kafkaio.Header{Key: hdrKeyed, Value: []byte("true")})
	}
	if undoes != "" {
		hs = append(hs, kafkaio.Header{Key: hdrUndoes, Value: []byte(undoes)})
	}
	var val []byte
	if c.SQL != "" {
		val = []byte(c.SQL)
	}
	r := &kafkaio.Record{Topic: l.topic, Key: []byte(string(c.Kind) + "/" + c.Name), Value: val, Headers: hs}
	if err := l.k.ProduceOne(ctx, r); err != nil {
		return 0, err
	}
	return r.Offset, nil
}

// mark and since bracket one statement: the records written in between
// are its own (statements of one node are serialised by Server.ddlMu).
func (l *catalogLog) mark() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.written = nil
}

func (l *catalogLog) since() []writtenRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.written
	l.written = nil
	return out
}

func newStmtID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// decodeCatalog reads a record of the catalog topic. ok is false for a key
// that names no object. newer (errCatalogNewer) says the record's version
// is newer than this release reads: rec then holds its key and writer
// only. A header this release cannot parse (turbine.start) is such an
// error too: the record is not applied, and its object is marked failed.
func decodeCatalog(r *kafkaio.Record) (rec catalog.Record, ok bool, newer error) {
	kind, name, found := strings.Cut(string(r.Key), "/")
	if !found {
		return rec, false, nil
	}
	rec = catalog.Record{Change: catalog.Change{Kind: catalog.Kind(kind), Name: name, SQL: string(r.Value)}, Offset: r.Offset}
	version, start, planned := "", "", ""
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case hdrCatalogV:
			version = v
		case hdrNode:
			rec.Node = v
		case hdrStmt:
			rec.Stmt = v
		case hdrOp:
			rec.Op = catalog.Op(v)
		case hdrReads:
			rec.Reads = v
		case hdrPlanned:
			planned = v
		case hdrUndoes:
			rec.Undoes = v
		case hdrHop:
			rec.Hop = v
		case hdrStart:
			start = v
		case hdrDelete:
			rec.DeleteTopic = v == "true"
		case hdrKeyed:
			rec.KeyedPanes = v == "true"
		}
	}
	// Versions are integers; one this release cannot parse is no more
	// readable than a higher one. (None: version 1.)
	if v, err := strconv.Atoi(version); version != "" && (err != nil || v > catalogVersion) {
		key := catalog.Record{Change: catalog.Change{Kind: rec.Kind, Name: rec.Name}, Node: rec.Node, Offset: rec.Offset}
		return key, true, fmt.Errorf("%w (turbine.catalog.v %q, by node %q; this node reads up to %d): upgrade this node",
			errCatalogNewer, version, rec.Node, catalogVersion)
	}
	var err error
	if rec.Start, err = catalog.ParseOffsets(start); err != nil {
		// Read whole, the stream would show what is not its own: its
		// object is marked failed, as a record this node cannot judge is.
		return rec, true, fmt.Errorf("%s header: %w", hdrStart, err)
	}
	// The strategy's SQL spelling, as every release wrote it; one this
	// release does not know cannot be planned the same way here.
	if rec.Planned, err = streamplan.ParseRecorded(planned); err != nil {
		return rec, true, fmt.Errorf("%s header: %w", hdrPlanned, err)
	}
	return rec, true, nil
}

// load returns the live entries: users and sources first (a source's
// record moves to the end of the log when ALTER SOURCE rewrites it, and no
// source depends on another), then streams in the order they were created,
// so a stream comes after the relations it reads. The last record of each
// key is its state (a record that lost a race is followed by a repair),
// which is also all that compaction keeps. ends is where the read stopped,
// where following the log goes on.
func (l *catalogLog) load(ctx context.Context) (entries []catalogEntry, ends map[int32]int64, err error) {
	live := map[string]catalogEntry{}
	ends, err = l.k.ReadAllEnds(ctx, l.topic, func(r *kafkaio.Record) error {
		key := string(r.Key)
		if r.Value == nil {
			delete(live, key)
			return nil
		}
		kind, name, _ := strings.Cut(key, "/")
		rec, _, newer := decodeCatalog(r)
		live[key] = catalogEntry{kind: kind, name: name, sql: string(r.Value), offset: r.Offset, rec: rec, newer: newer}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	out := make([]catalogEntry, 0, len(live))
	for _, e := range live {
		out = append(out, e)
	}
	rank := func(e catalogEntry) int {
		if catalog.Kind(e.kind) == catalog.KindStream {
			return 1
		}
		return 0
	}
	sort.Slice(out, func(i, j int) bool {
		if ri, rj := rank(out[i]), rank(out[j]); ri != rj {
			return ri < rj
		}
		return out[i].offset < out[j].offset
	})
	return out, ends, nil
}
