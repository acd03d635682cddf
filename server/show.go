package server

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/pgcat"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/streamplan"
	"github.com/turbinesql/turbinesql/types"
)

// settings answers SHOW <name> for what drivers ask.
var settings = map[string]string{
	"SERVER_VERSION": "16.0", "SERVER_ENCODING": "UTF8", "CLIENT_ENCODING": "UTF8",
	"DATESTYLE": "ISO, MDY", "TIMEZONE": "UTC", "INTEGER_DATETIMES": "on",
	"STANDARD_CONFORMING_STRINGS": "on", "TRANSACTION_ISOLATION": "read committed",
	"SEARCH_PATH": "public", "MAX_IDENTIFIER_LENGTH": "63",
}

var showSourceCols = []string{"name", "topic", "partition_key", "format", "on_error", "columns"}
var showStreamCols = []string{"name", "input", "topic", "strategy", "status", "records_in", "records_out", "late_rows", "skipped", "dead_lettered", "watermark", "error"}

func showColumns(what string) []pgwire.Column {
	switch what {
	case "SOURCES":
		return textColumns(showSourceCols...)
	case "USERS":
		return textColumns("name", "role")
	case "CLUSTER":
		return showClusterColumns()
	case "TABLES":
		return textColumns("name", "kind", "topic")
	case "STREAMS":
		cols := textColumns(showStreamCols...)
		for i, n := range showStreamCols {
			switch n {
			case "records_in", "records_out", "late_rows", "skipped", "dead_lettered":
				cols[i].OID = pgwire.OIDInt8
			case "watermark":
				cols[i].OID = pgwire.OIDTimestamp
			}
		}
		return cols
	}
	return textColumns(strings.ToLower(what))
}

func (s *Server) show(st *sql.Show) (*pgwire.Result, error) {
	res := &pgwire.Result{Columns: showColumns(st.What), Tag: "SHOW"}
	switch st.What {
	case "USERS":
		return s.showUsers(), nil
	case "CLUSTER":
		return s.showCluster(), nil
	case "TABLES":
		// What a new user coming from MySQL asks for: every relation a
		// SELECT can read, sources and streams, by name.
		for _, src := range s.cat.Sources() {
			res.Rows = append(res.Rows, []any{src.Name, "source", src.Topic})
		}
		for _, def := range s.cat.Streams() {
			res.Rows = append(res.Rows, []any{def.Name, "stream", def.Topic})
		}
		sort.Slice(res.Rows, func(i, j int) bool { return res.Rows[i][0].(string) < res.Rows[j][0].(string) })
	case "SOURCES":
		for _, src := range s.cat.Sources() {
			res.Rows = append(res.Rows, []any{src.Name, src.Topic, nullIfEmpty(src.PartitionKey), src.Format, src.OnError.String(), src.Schema.String()})
		}
	case "STREAMS":
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, def := range s.cat.Streams() {
			row := []any{def.Name, def.Input, def.Topic, nil, "stopped", int64(0), int64(0), int64(0), int64(0), int64(0), nil, nil}
			if r, ok := s.streams[def.Name]; ok {
				status, err := r.status()
				if status == "running" && !s.kafkaUp() {
					status = "waiting for broker"
				}
				if r.plan != nil {
					row[3] = r.plan.Strategy.String()
				}
				row[4] = status
				c := r.counters()
				row[5], row[6], row[7], row[8], row[9] = c.In, c.Out, c.Late, c.Skipped, c.DLQ
				if r.final != nil && r.plan.Window != nil {
					if wm, ok, _ := r.final.Watermark(); ok {
						row[10] = types.MillisTime(wm)
					}
				}
				if err != nil {
					row[11] = err.Error()
				}
			}
			res.Rows = append(res.Rows, row)
		}
		res.Rows = append(res.Rows, s.failedStreamRows()...)
	default:
		v, ok := settings[st.What]
		if !ok {
			return nil, sql.Errorf("42704", "unrecognized configuration parameter %q", strings.ToLower(st.What)).
				WithHint("SHOW TABLES, SHOW SOURCES, SHOW STREAMS and SHOW USERS list objects")
		}
		res.Rows = [][]any{{v}}
	}
	return res, nil
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func (s *Server) describe(st *sql.Describe) (*pgwire.Result, error) {
	rel, ok := s.cat.Relation(st.Name)
	if !ok {
		return nil, &catalog.ErrNotFound{Name: st.Name}
	}
	res := &pgwire.Result{Columns: textColumns("column_name", "data_type", "detail"), Tag: "DESCRIBE"}
	for _, f := range rel.Schema {
		var detail []string
		if slices.ContainsFunc(pgcat.PrimaryKey(rel), func(k string) bool { return strings.EqualFold(k, f.Name) }) {
			detail = append(detail, "primary key")
		}
		if strings.EqualFold(f.Name, rel.PartitionKey) {
			detail = append(detail, "partition key")
			if rel.Source != nil {
				detail = append(detail, hashDetail(rel.Source))
			}
		}
		if rel.Watermark != nil && strings.EqualFold(f.Name, rel.Watermark.Column) {
			detail = append(detail, fmt.Sprintf("watermark %s - %d ms", f.Name, rel.Watermark.DelayMs))
		}
		if rel.Source != nil {
			if d := s.statsFor(rel.Source).distinct(f.Name); d >= 0 {
				detail = append(detail, fmt.Sprintf("≈%d distinct", d))
			}
		}
		var d any
		if len(detail) > 0 {
			d = strings.Join(detail, ", ")
		}
		res.Rows = append(res.Rows, []any{f.Name, f.Type.String(), d})
	}
	return res, nil
}

// showCreate runs SHOW CREATE STREAM|SOURCE name: the statement the
// catalog holds for it, which re-creates it as it is now (a source's
// record is rewritten by each ALTER SOURCE into the CREATE it amounts to).
func (s *Server) showCreate(st *sql.ShowCreate) (*pgwire.Result, error) {
	var text string
	if st.Kind == "SOURCE" {
		if src, ok := s.cat.Source(st.Name); ok {
			text = src.SQL
		}
	} else if def, ok := s.cat.Stream(st.Name); ok {
		text = def.SQL
	}
	if text == "" {
		if _, other := s.cat.Relation(st.Name); other {
			return nil, sql.Errorf(sql.CodeWrongObjectType, "%q is not a %s", st.Name, strings.ToLower(st.Kind)).
				WithHint("use SHOW CREATE %s", otherKind(st.Kind))
		}
		return nil, &catalog.ErrNotFound{Name: st.Name}
	}
	text = strings.TrimRight(strings.TrimSpace(text), ";")
	return &pgwire.Result{Columns: textColumns("name", "create_sql"), Rows: [][]any{{st.Name, text}}, Tag: "SHOW"}, nil
}

func (s *Server) explain(st *sql.Explain, text string) (*pgwire.Result, error) {
	var lines []string
	switch inner := st.Stmt.(type) {
	case *sql.CreateStream:
		def, p, err := s.planNewStream(inner, text)
		if err != nil {
			return nil, err
		}
		hop := ""
		if p.Strategy == streamplan.StrategyRepartition {
			hop = s.hopGeneration(def.Name, p, true)
		}
		lines = s.explainStream(def, p, hop)
	case *sql.Select:
		// A server-side EXPLAIN (no session): the default user and database.
		return (&session{srv: s, user: "turbine", database: "turbine"}).explainQuery(context.Background(), inner, text)
	default:
		return nil, sql.Errorf(sql.CodeNotSupported, "EXPLAIN supports CREATE STREAM and SELECT")
	}
	res := &pgwire.Result{Columns: textColumns("QUERY PLAN"), Tag: "EXPLAIN"}
	for _, l := range lines {
		res.Rows = append(res.Rows, []any{l})
	}
	return res, nil
}

// explainStream is EXPLAIN's text of stream def planned as p, reading the
// repartition topic hop ("": the hop's first generation): the text of its
// stream graph (planner.ExplainStream). The console shows it too.
func (s *Server) explainStream(def *catalog.Stream, p *planner.Plan, hop string) []string {
	d := *def
	d.Hop = hop
	return planner.ExplainStream(planner.BuildGraph(&d, p, s.cfg.AppID))
}
