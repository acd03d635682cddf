package server

import (
	"context"
	"errors"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/streamplan"
)

// Every node follows the catalog topic from where its start-up replay
// ended. Each record is judged by the ledger in log order (every node
// judges the same records the same way, so they agree), and then this
// node's catalog and running streams are made to match the ledger for the
// record's key:
//
//   - a record of another node that stands is applied here (CREATE starts
//     the stream, joining its consumer groups; DROP stops it and drops its
//     local state; ALTER SOURCE restarts its readers);
//   - a record this node wrote is already applied here: it matches, and
//     nothing runs twice;
//   - a record this node wrote that lost a race does not match: it is
//     undone here, the statement that wrote it gets the error, and this
//     node writes the repair record that restates the key's state.
//
// A statement returns once the follower has judged its record, so its
// outcome is the log's: the record that lands first wins.

// catalogVerdictTimeout bounds how long a statement waits for its record
// to come back through the log.
const catalogVerdictTimeout = 10 * time.Second

// catalogFollow is the follower's position and the verdicts on this node's
// own records, waiting for their statements.
type catalogFollow struct {
	ledger  *catalog.Ledger // the follower's alone
	next    int64           // offset after the last record applied
	started bool
	advance chan struct{} // closed (and replaced) when next moves
	verdict map[string]error
}

// seedLedger sets the ledger to the entries the start-up replay read,
// before the replay starts the streams (which read their hop generations
// from it).
func (s *Server) seedLedger(entries []catalogEntry) {
	l := catalog.NewLedger()
	for _, e := range entries {
		if e.newer != nil {
			continue // not judged (replayCatalog marked its object failed)
		}
		r := e.rec
		l.Seed(catalog.Entry{Kind: r.Kind, Name: r.Name, SQL: r.SQL, Reads: r.Reads, Planned: r.Planned, Hop: r.Hop, Start: r.Start, KeyedPanes: r.KeyedPanes,
			Node: r.Node, Stmt: r.Stmt, Offset: r.Offset})
	}
	s.catMu.Lock()
	s.cf.ledger = l
	s.catMu.Unlock()
}

// startFollowingCatalog follows the log from ends until ctx ends, with
// the ledger seedLedger made.
func (s *Server) startFollowingCatalog(ctx context.Context, ends map[int32]int64) {
	s.catMu.Lock()
	l := s.cf.ledger
	if l == nil {
		l = catalog.NewLedger()
	}
	s.cf = catalogFollow{ledger: l, next: ends[0], started: true, advance: make(chan struct{}), verdict: map[string]error{}}
	s.catMu.Unlock()
	from := map[int32]int64{}
	for p, o := range ends {
		from[p] = o
	}
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		for ctx.Err() == nil {
			if err := s.followCatalogOnce(ctx, from); err != nil && ctx.Err() == nil {
				s.log.Warn("following the catalog topic; retrying", "topic", s.clog.topic, "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}
	}()
}

func (s *Server) followCatalogOnce(ctx context.Context, from map[int32]int64) error {
	tail, err := s.kafka.NewTailAt(s.clog.topic, from)
	if err != nil {
		return err
	}
	defer tail.Close()
	s.catMu.Lock()
	ledger := s.cf.ledger
	s.catMu.Unlock()
	for {
		recs, next, err := tail.Poll(ctx)
		if err != nil {
			return err
		}
		for _, r := range recs {
			s.applyCatalog(ctx, ledger, r)
			from[r.Partition] = r.Offset + 1
		}
		for p, n := range next {
			from[p] = max(from[p], n)
		}
		s.catMu.Lock()
		if from[0] > s.cf.next {
			s.cf.next = from[0]
			close(s.cf.advance)
			s.cf.advance = make(chan struct{})
		}
		s.catMu.Unlock()
	}
}

// applyCatalog judges one record and makes this node match the verdict.
func (s *Server) applyCatalog(ctx context.Context, ledger *catalog.Ledger, r *kafkaio.Record) {
	rec, ok, newer := decodeCatalog(r)
	if !ok {
		return
	}
	if newer != nil {
		// Not judged, so this node's ledger and objects stay as they were
		// for this key: it runs the object as before until it is upgraded.
		s.log.Error("catalog record not applied", "topic", s.clog.topic, "offset", r.Offset, "key", string(r.Key), "err", newer)
		return
	}
	switch rec.Kind {
	case catalog.KindSource, catalog.KindStream, catalog.KindUser:
	case catalog.KindHop:
		// A seal: no object changes here, the ledger notes it (the purger
		// and the next CREATE STREAM read it).
		s.catMu.Lock()
		_, _ = ledger.Apply(rec)
		s.catMu.Unlock()
		return
	case catalog.KindRun:
		// ALTER STREAM ... STOP or START: the last one stands, and this
		// node's stream is made to match (a no-op for the writer).
		s.catMu.Lock()
		_, _ = ledger.Apply(rec)
		s.catMu.Unlock()
		s.reconcileRun(ctx, rec.Name)
		return
	default:
		return
	}
	// Under catMu: the purger and DDL read the ledger from other
	// goroutines; this one is its only writer.
	s.catMu.Lock()
	repair, lost := ledger.Apply(rec)
	s.catMu.Unlock()
	own := rec.Node == s.nodeID
	if lost != nil {
		s.log.Info("catalog record lost a race and is not applied", "key", string(rec.Kind)+"/"+rec.Name, "offset", rec.Offset,
			"writer", rec.Node, "err", lost)
		// Its writer repairs the log: the record it wrote is now the
		// last of its key, which compaction would keep.
		if own && repair != nil {
			if _, err := s.clog.write(ctx, *repair, newStmtID(), ""); err != nil {
				s.log.Error("cannot write the repair of a catalog record that lost a race: a node starting before it is written may take the loser's definition",
					"key", string(rec.Kind)+"/"+rec.Name, "err", err)
			}
		}
	}
	// This node applied its own records when it wrote them, and may be
	// ahead of the log (a CREATE STREAM whose start failed wrote its drop
	// too): only a record of its own that lost is undone here.
	if !own || lost != nil {
		forget := s.topicsDeletedBy(rec, lost)
		s.reconcile(ctx, ledger, rec.Kind, rec.Name)
		// The stream is stopped here now: its writer deletes the topics
		// once every node has, and this node's client must not take a
		// topic created again under a name for the old one.
		s.kafka.Forget(forget...)
	}
	if own && rec.Stmt != "" && rec.Op != catalog.OpRepair {
		s.catMu.Lock()
		s.cf.verdict[rec.Stmt] = lost
		s.catMu.Unlock()
	}
}

// topicsDeletedBy are the topics of the stream that rec, another node's
// DROP STREAM ... DELETE TOPIC that stands, deletes (none otherwise).
func (s *Server) topicsDeletedBy(rec catalog.Record, lost error) []string {
	if lost != nil || rec.Kind != catalog.KindStream || rec.Op != catalog.OpDrop || !rec.DeleteTopic {
		return nil
	}
	def, ok := s.cat.Stream(rec.Name)
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var p *planner.Plan
	if r, ok := s.streams[rec.Name]; ok {
		p = r.plan
	}
	topics, _ := s.streamTopics(def, p)
	return topics
}

// localSQL is the statement of an object as this node runs it.
func (s *Server) localSQL(kind catalog.Kind, name string) (string, bool) {
	switch kind {
	case catalog.KindSource:
		if src, ok := s.cat.Source(name); ok {
			return src.SQL, true
		}
	case catalog.KindStream:
		if def, ok := s.cat.Stream(name); ok {
			return def.SQL, true
		}
	case catalog.KindUser:
		if u, ok := s.cat.User(name); ok {
			return u.Statement(), true
		}
	}
	return "", false
}

// reconcile makes this node's object kind/name what the ledger says.
func (s *Server) reconcile(ctx context.Context, ledger *catalog.Ledger, kind catalog.Kind, name string) {
	want, wok := ledger.Get(kind, name)
	have, hok := s.localSQL(kind, name)
	if !wok {
		// Gone from the log: so is its failure to start here.
		s.failedMu.Lock()
		delete(s.failed, string(kind)+"/"+name)
		s.failedMu.Unlock()
	}
	if wok == hok && (!wok || want.SQL == have) {
		return
	}
	if kind == catalog.KindSource && wok && hok {
		if err := s.replaceSourceFrom(ctx, want.SQL); err != nil {
			s.log.Error("cannot apply a source's new definition from the catalog", "source", name, "err", err)
		}
		return
	}
	if hok {
		s.forgetLocal(kind, name)
	}
	if !wok {
		s.log.Info("dropped by the catalog", "object", string(kind)+"/"+name)
		return
	}
	if kind == catalog.KindStream {
		s.freshStreamState(want)
	}
	if _, err := s.execDDL(ctx, want.SQL, false); err != nil {
		s.log.Error("catalog record cannot be applied; its object is marked failed", "object", string(kind)+"/"+name, "err", err)
		s.markFailed(failedObject{kind: string(kind), name: name, err: err.Error(), offset: want.Offset})
		return
	}
	s.failedMu.Lock()
	delete(s.failed, string(kind)+"/"+name)
	s.failedMu.Unlock()
	s.log.Info("created from the catalog", "object", string(kind)+"/"+name, "writer", want.Node)
	// A relation back after a drop that lost a race: streams that read it
	// may have failed to start here meanwhile.
	if kind != catalog.KindUser {
		for _, e := range ledger.Readers(name) {
			s.reconcile(ctx, ledger, e.Kind, e.Name)
		}
	}
}

// freshStreamState readies this node for a stream another node created:
// no state of an earlier stream of that name, and the strategy the
// creator's cost rule chose.
func (s *Server) freshStreamState(e catalog.Entry) {
	if err := s.store.DropStream(e.Name); err != nil {
		s.log.Warn("cannot drop old state of a stream created elsewhere", "stream", e.Name, "err", err)
	}
	if rel, ok := s.cat.Relation(e.Reads); ok {
		_ = s.store.DropStream("__cmb/" + combineTopic(s.cfg.AppID, rel.Topic, e.Name))
	}
	if e.Planned != streamplan.StrategyAuto {
		if err := s.store.PutPlan(e.Name, planStrategy, e.Planned.Recorded()); err != nil {
			s.log.Warn("cannot record a stream's strategy", "stream", e.Name, "err", err)
		}
	}
}

// forgetLocal removes an object from this node only: the log says it is
// gone. A stream stops and its local state goes; its consumer groups and
// changelogs are the cluster's, and the node that dropped it deletes them.
func (s *Server) forgetLocal(kind catalog.Kind, name string) {
	switch kind {
	case catalog.KindStream:
		s.mu.Lock()
		if r, ok := s.streams[name]; ok {
			r.stop(s)
			delete(s.streams, name)
			if err := s.dropStreamState(name, r.plan); err != nil {
				s.log.Warn("cannot drop the local state of a dropped stream", "stream", name, "err", err)
			}
			s.metrics.Forget(name)
		}
		s.cat.Forget(kind, name)
		s.mu.Unlock()
	case catalog.KindSource:
		s.cat.Forget(kind, name)
		s.statsMu.Lock()
		delete(s.sourceStats, name)
		s.statsMu.Unlock()
	default:
		s.cat.Forget(kind, name)
	}
}

// serialDDL runs a statement that writes the catalog: after this node has
// applied every record already in the log (so a statement run after
// another node's has returned sees it), and returning once every record it
// wrote has been judged in log order. DDL statements of one node run one
// at a time, so the records written in between are this statement's.
func (s *Server) serialDDL(ctx context.Context, run func() (*pgwire.Result, error)) (*pgwire.Result, error) {
	s.ddlMu.Lock()
	defer s.ddlMu.Unlock()
	if err := s.catalogCaughtUp(ctx); err != nil {
		return nil, err
	}
	s.clog.mark()
	res, err := run()
	for _, w := range s.clog.since() {
		if verr := s.awaitVerdict(ctx, w); verr != nil && err == nil {
			res, err = nil, verr
		}
	}
	return res, err
}

// catalogCaughtUp waits until the follower has applied the log up to its
// end as it is now.
func (s *Server) catalogCaughtUp(ctx context.Context) error {
	s.catMu.Lock()
	started := s.cf.started
	s.catMu.Unlock()
	if !started {
		return nil
	}
	ends, err := s.kafka.EndOffsets(ctx, s.clog.topic)
	if err != nil {
		return err
	}
	return s.awaitFollower(ctx, ends[0], func() error {
		return sql.Errorf("40003", "the catalog log has records this node has not applied yet").WithHint("retry; the node may be unable to read the catalog topic")
	})
}

// awaitVerdict waits for the follower to judge a record this node wrote
// and returns the verdict (nil: it stands).
func (s *Server) awaitVerdict(ctx context.Context, w writtenRecord) error {
	err := s.awaitFollower(ctx, w.offset+1, func() error {
		return sql.Errorf("40003", "the statement was written to the catalog, but this node has not read it back yet: its outcome is not known").
			WithHint("SHOW SOURCES / SHOW STREAMS show whether it took effect")
	})
	if err != nil {
		return err
	}
	s.catMu.Lock()
	defer s.catMu.Unlock()
	v := s.cf.verdict[w.stmt]
	delete(s.cf.verdict, w.stmt)
	return v
}

// awaitFollower waits until the follower's position reaches at.
func (s *Server) awaitFollower(ctx context.Context, at int64, timeout func() error) error {
	s.catMu.Lock()
	started := s.cf.started
	s.catMu.Unlock()
	if !started {
		return nil
	}
	deadline := time.NewTimer(catalogVerdictTimeout)
	defer deadline.Stop()
	for {
		s.catMu.Lock()
		next, ch := s.cf.next, s.cf.advance
		s.catMu.Unlock()
		if next >= at {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return timeout()
		}
	}
}

// writesCatalog says whether a statement changes the catalog.
func writesCatalog(stmt sql.Statement) bool {
	switch st := stmt.(type) {
	case *sql.CreateSource, *sql.CreateStream, *sql.Drop, *sql.AlterSource, *sql.CreateUser, *sql.AlterUser, *sql.DropUser:
		return true
	case *sql.AlterStream:
		return st.Action != sql.AlterRestart
	}
	return false
}

var errNotSource = errors.New("catalog entry is not a CREATE SOURCE")
