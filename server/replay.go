package server

import (
	"context"
	"fmt"
	"sort"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/sql"
)

// failedObject is a catalog record that could not be applied at start.
type failedObject struct {
	kind, name, err string
	offset          int64
}

// replayCatalog re-creates every object of the catalog log and restarts
// the streams, each from its own state's position. A record that cannot
// be applied (garbage written into the topic, a statement this version
// refuses, a stream whose input failed) is logged, skipped and its object
// marked failed: one bad record must not keep the whole app from starting,
// and /readyz and SHOW STREAMS say what is wrong.
func (s *Server) replayCatalog(ctx context.Context, clog *catalogLog) ([]catalogEntry, map[int32]int64, error) {
	entries, ends, err := clog.load(ctx)
	if err != nil {
		return nil, nil, err
	}
	s.seedLedger(entries)
	if len(entries) > 0 {
		s.log.Info("restoring the catalog", "records", len(entries), "topic", clog.topic)
	}
	for i, e := range entries {
		if k := catalog.Kind(e.kind); k == catalog.KindHop || k == catalog.KindRun {
			continue // a hop generation's seal, a stream's STOP or START: in the ledger, no object
		}
		s.log.Info("restoring", "object", e.kind+"/"+e.name, "step", i+1, "of", len(entries))
		if e.newer != nil {
			s.log.Error("catalog record skipped: its object is marked failed until this node is upgraded",
				"topic", clog.topic, "offset", e.offset, "key", e.kind+"/"+e.name, "err", e.newer)
			s.markFailed(failedObject{kind: e.kind, name: e.name, err: e.newer.Error(), offset: e.offset})
			continue
		}
		switch catalog.Kind(e.kind) {
		case catalog.KindSource, catalog.KindStream, catalog.KindUser:
		default:
			// No object has this key, so none is marked failed, and no
			// DROP could ever remove it: a warning at each start.
			s.log.Warn("catalog record skipped: its key names no catalog object (something other than TurbineSQL wrote to the catalog topic)",
				"topic", clog.topic, "offset", e.offset, "key", e.kind+"/"+e.name, "value", clip(e.sql, 200))
			continue
		}
		if err := s.replayEntry(ctx, e); err != nil {
			s.log.Error("catalog record skipped: it cannot be applied, so its object is marked failed (DROP it to remove the record)",
				"topic", clog.topic, "offset", e.offset, "key", e.kind+"/"+e.name, "statement", clip(e.sql, 200), "err", err)
			s.markFailed(failedObject{kind: e.kind, name: e.name, err: err.Error(), offset: e.offset})
		}
	}
	if len(entries) > 0 {
		s.log.Info("catalog restored", "records", len(entries), "failed", len(s.failedObjects()))
	}
	return entries, ends, nil
}

func (s *Server) replayEntry(ctx context.Context, e catalogEntry) error {
	stmt, err := sql.Parse(e.sql)
	if err != nil {
		return fmt.Errorf("not a statement: %w", err)
	}
	// The record's key is what DROP tombstones: a record whose statement
	// makes some other object could never be removed.
	kind, name := catalogKey(stmt)
	if kind != catalog.Kind(e.kind) || name != e.name {
		return fmt.Errorf("record keyed %s/%s holds a statement for %s/%s", e.kind, e.name, kind, name)
	}
	_, err = s.execDDL(ctx, e.sql, false)
	return err
}

// catalogKey is the kind and name a catalog statement creates.
func catalogKey(stmt sql.Statement) (catalog.Kind, string) {
	switch st := stmt.(type) {
	case *sql.CreateSource:
		return catalog.KindSource, st.Name
	case *sql.CreateStream:
		return catalog.KindStream, st.Name
	case *sql.CreateUser:
		return catalog.KindUser, st.Name
	}
	return "", ""
}

func (s *Server) markFailed(f failedObject) {
	s.failedMu.Lock()
	defer s.failedMu.Unlock()
	s.failed[f.kind+"/"+f.name] = f
}

func (s *Server) failedObjects() []failedObject {
	s.failedMu.Lock()
	defer s.failedMu.Unlock()
	out := make([]failedObject, 0, len(s.failed))
	for _, f := range s.failed {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].offset < out[j].offset })
	return out
}

// dropFailed removes the record of an object that failed at replay (a
// tombstone for its key) and reports whether there was one.
func (s *Server) dropFailed(kind catalog.Kind, name string) (bool, error) {
	key := string(kind) + "/" + name
	s.failedMu.Lock()
	defer s.failedMu.Unlock()
	if _, ok := s.failed[key]; !ok {
		return false, nil
	}
	if err := s.clog.Write(catalog.Change{Kind: kind, Name: name, Op: catalog.OpDrop}); err != nil {
		return true, err
	}
	delete(s.failed, key)
	return true, nil
}

// failedStreamRows are SHOW STREAMS rows for streams that failed at
// replay, in the shape of showStreamCols.
func (s *Server) failedStreamRows() [][]any {
	var rows [][]any
	for _, f := range s.failedObjects() {
		if f.kind == string(catalog.KindStream) {
			rows = append(rows, []any{f.name, nil, nil, nil, "failed", int64(0), int64(0), int64(0), int64(0), int64(0), nil, "catalog replay: " + f.err})
		}
	}
	return rows
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
