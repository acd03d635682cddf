package catalog

import (
	"fmt"
	"sort"

	"github.com/turbinesql/turbinesql/streamplan"
)

// Every node of an app writes DDL to one catalog log and follows it. Two
// nodes can each check a statement against the catalog they know and then
// write records that contradict each other (a CREATE of a name the other
// just created, a DROP of a source the other's new stream reads). The
// Ledger settles such races the same way on every node: it judges the
// records in the log's order, and a record that does not stand against
// the records before it loses. Its writer reports the error and writes a
// repair record (OpRepair) that restates the key's state, because
// compaction keeps only the last record of a key and must not keep the
// loser's.

// Record is one catalog record as the Ledger judges it.
type Record struct {
	Change
	// Node and Stmt name the writer and its statement (empty in records
	// written before they were recorded: such a record always stands).
	Node, Stmt string
	// Undoes, on a drop, is the statement id of the record it takes
	// back (a CREATE STREAM whose stream could not start): it stands only
	// while that record is the object's, so it never drops the winner of
	// a race that record lost.
	Undoes string
	Offset int64
}

// Entry is a live object as the log says it is.
type Entry struct {
	Kind       Kind
	Name, SQL  string
	Reads      string
	Planned    streamplan.Strategy
	Hop        string
	Start      Offsets // a stream's output start
	KeyedPanes bool    // Change.KeyedPanes
	Node, Stmt string
	Offset     int64
}

// ErrLostRace is the error of a statement whose record another node's
// record beat in the catalog log. It wraps what the statement would have
// been told had it run after the winner (ErrExists, ErrNotFound, ErrInUse).
type ErrLostRace struct {
	Winner string // node id of the record that decided, "" when unknown
	Err    error
}

func (e *ErrLostRace) Error() string {
	by := "another node"
	if e.Winner != "" {
		by = "node " + e.Winner
	}
	return fmt.Sprintf("%v (a concurrent statement on %s came first in the catalog log; this one was not applied)", e.Err, by)
}

func (e *ErrLostRace) Unwrap() error { return e.Err }

// Ledger is the catalog's state as its log says, judged in log order. It
// is not safe for concurrent use: one follower owns it.
type Ledger struct {
	live      map[string]Entry
	droppedBy map[string]string // key -> node of the record that dropped it
	// sealed holds the repartition topics (hop generations) closed to new
	// streams, with the offset of the first seal of each.
	sealed map[string]int64
	// runs holds each stream's last run record (ALTER STREAM ... STOP or
	// START); see Run.
	runs map[string]runRecord
}

// runRecord is a stream's last ALTER STREAM ... STOP or START.
type runRecord struct {
	stopped bool
	offset  int64
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{live: map[string]Entry{}, droppedBy: map[string]string{}, sealed: map[string]int64{}, runs: map[string]runRecord{}}
}

func key(kind Kind, name string) string { return string(kind) + "/" + name }

// Seed sets an object as the log's start replay found it: the last record
// of its key, which (repairs included) is its state. A hop record seeds a
// seal.
func (l *Ledger) Seed(e Entry) {
	switch e.Kind {
	case KindHop:
		l.seal(e.Name, e.Offset)
		return
	case KindRun:
		l.runs[e.Name] = runRecord{stopped: e.SQL == RunStopped, offset: e.Offset}
		return
	}
	l.live[key(e.Kind, e.Name)] = e
}

// Run says whether stream name is held stopped, and the offset of its
// last STOP or START (0: none since the stream was created). A run record
// counts only when it is later in the log than the stream's own record: a
// STOP left behind by a dropped stream (a DROP racing the STOP on another
// node) never stops a new stream of the same name, and every node sees it
// alike.
func (l *Ledger) Run(name string) (stopped bool, epoch int64) {
	r, ok := l.runs[name]
	if !ok {
		return false, 0
	}
	e, live := l.live[key(KindStream, name)]
	if !live || r.offset < e.Offset {
		return false, 0
	}
	return r.stopped, r.offset
}

func (l *Ledger) seal(topic string, offset int64) {
	if _, ok := l.sealed[topic]; !ok {
		l.sealed[topic] = offset
	}
}

// Sealed says whether the repartition topic (a hop generation) is closed
// to new streams, and by the record at which offset.
func (l *Ledger) Sealed(topic string) (int64, bool) {
	o, ok := l.sealed[topic]
	return o, ok
}

// SealedTopics lists the sealed hop generations by topic.
func (l *Ledger) SealedTopics() []string {
	out := make([]string, 0, len(l.sealed))
	for t := range l.sealed {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Streams lists the live streams by name.
func (l *Ledger) Streams() []Entry {
	var out []Entry
	for _, e := range l.live {
		if e.Kind == KindStream {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get returns the live entry of kind/name.
func (l *Ledger) Get(kind Kind, name string) (Entry, bool) {
	e, ok := l.live[key(kind, name)]
	return e, ok
}

// Entries lists the live entries by key.
func (l *Ledger) Entries() []Entry {
	out := make([]Entry, 0, len(l.live))
	for _, e := range l.live {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return key(out[i].Kind, out[i].Name) < key(out[j].Kind, out[j].Name) })
	return out
}

// Readers lists the live streams that read relation name.
func (l *Ledger) Readers(name string) []Entry {
	var out []Entry
	for _, e := range l.live {
		if e.Kind == KindStream && e.Reads == name {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// relation finds a source or stream of that name (they share names).
func (l *Ledger) relation(name string) (Entry, bool) {
	if e, ok := l.live[key(KindSource, name)]; ok {
		return e, true
	}
	e, ok := l.live[key(KindStream, name)]
	return e, ok
}

// Apply judges r against the records before it. When r stands it is
// applied and Apply returns nil. When it loses, the state is unchanged;
// Apply returns why (an *ErrLostRace) and the repair record its writer
// must append so that the key's last record is its state again (nil when
// r already says what the state is).
func (l *Ledger) Apply(r Record) (repair *Change, err error) {
	switch r.Kind {
	case KindHop:
		// A seal always stands: the first of a topic closes it, and a
		// second (two nodes sealing at once) changes nothing.
		if r.Op == OpSeal {
			l.seal(r.Name, r.Offset)
		}
		return nil, nil
	case KindRun:
		// The last STOP or START stands, as the last ALTER USER does:
		// both are states, and either order of two leaves a state every
		// node agrees on.
		if r.SQL == "" {
			delete(l.runs, r.Name) // a DROP's tombstone
		} else {
			l.runs[r.Name] = runRecord{stopped: r.SQL == RunStopped, offset: r.Offset}
		}
		return nil, nil
	}
	if err := l.judge(r); err != nil {
		return l.repairFor(r), err
	}
	k := key(r.Kind, r.Name)
	if r.SQL == "" {
		delete(l.live, k)
		l.droppedBy[k] = r.Node
		return nil, nil
	}
	l.live[k] = Entry{Kind: r.Kind, Name: r.Name, SQL: r.SQL, Reads: r.Reads, Planned: r.Planned, Hop: r.Hop, Start: r.Start, KeyedPanes: r.KeyedPanes,
		Node: r.Node, Stmt: r.Stmt, Offset: r.Offset}
	return nil, nil
}

// judge says whether r stands. Users are last-writer-wins (they have no
// dependents and replacing one is what ALTER USER does); records without
// an op (older versions), repairs and ops this version does not know
// (written by a newer node, which judged them) always stand.
func (l *Ledger) judge(r Record) error {
	if r.Kind == KindUser {
		return nil
	}
	k := key(r.Kind, r.Name)
	_, exists := l.live[k]
	switch r.Op {
	case OpCreate:
		if other, taken := l.relation(r.Name); taken {
			return &ErrLostRace{Winner: other.Node, Err: &ErrExists{Name: r.Name}}
		}
		if r.Reads != "" {
			if _, ok := l.relation(r.Reads); !ok {
				return &ErrLostRace{Winner: l.droppedBy[key(KindSource, r.Reads)] + l.droppedBy[key(KindStream, r.Reads)], Err: &ErrNotFound{Name: r.Reads}}
			}
		}
		// The purger may already have deleted records of a sealed
		// generation that this stream would read from its start.
		if _, sealed := l.sealed[r.Hop]; r.Hop != "" && sealed {
			return &ErrLostRace{Err: &ErrHopSealed{Stream: r.Name, Topic: r.Hop}}
		}
	case OpAlter:
		if !exists {
			return &ErrLostRace{Winner: l.droppedBy[k], Err: &ErrNotFound{Name: r.Name}}
		}
	case OpDrop:
		if !exists {
			return &ErrLostRace{Winner: l.droppedBy[k], Err: &ErrNotFound{Name: r.Name}}
		}
		if cur := l.live[k]; r.Undoes != "" && cur.Stmt != r.Undoes {
			return &ErrLostRace{Winner: cur.Node, Err: &ErrExists{Name: r.Name}}
		}
		if rs := l.Readers(r.Name); len(rs) > 0 {
			names := make([]string, len(rs))
			for i, e := range rs {
				names[i] = e.Name
			}
			return &ErrLostRace{Winner: rs[0].Node, Err: &ErrInUse{Name: r.Name, Readers: names}}
		}
	}
	return nil
}

// repairFor is the record restating the state of r's key, nil when r
// itself says it (a lost drop of an object that is gone).
func (l *Ledger) repairFor(r Record) *Change {
	cur, exists := l.live[key(r.Kind, r.Name)]
	if !exists {
		if r.SQL == "" {
			return nil
		}
		return &Change{Kind: r.Kind, Name: r.Name, Op: OpRepair}
	}
	return &Change{Kind: cur.Kind, Name: cur.Name, SQL: cur.SQL, Op: OpRepair, Reads: cur.Reads, Planned: cur.Planned, Hop: cur.Hop, Start: cur.Start,
		KeyedPanes: cur.KeyedPanes}
}
