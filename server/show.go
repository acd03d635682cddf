package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
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
			res.Rows = append(res.Rows, []any{src.Name, src.Topic, nullIfEmpty(src.PartitionKey), src.Format, src.OnError, src.Schema.String()})
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
					row[3] = r.plan.Strategy
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
		if p.Strategy == planner.StrategyRepartition {
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
// repartition topic hop ("": the hop's first generation): the console
// shows it too.
func (s *Server) explainStream(def *catalog.Stream, p *planner.Plan, hop string) []string {
	lines := explainPlan(p, def.Name, def.Topic, s.cfg.AppID, hop)
	lines = append(lines, deliveryLines(p, def.Options.Guarantee)...)
	return append(lines, placementLines(p)...)
}

// deliveryLines tell which processing guarantee a stream needs (the
// seed's aggregate sensitivity): per aggregate, how a duplicated input
// row (what an at-least-once replay after a crash can feed) moves it, and
// a recommendation.
func deliveryLines(p *planner.Plan, guarantee string) []string {
	out := []string{"Guarantee: " + guarantee}
	worst, worstText := agg.Unaffected, ""
	if p.Aggregate && len(p.Aggs) > 0 {
		out = append(out, "Duplicate sensitivity:")
		for _, c := range p.Aggs {
			sv := agg.SensitivityOf(c.Spec)
			out = append(out, fmt.Sprintf("   %s: %s (%s)", c.Text, sv, sv.Why()))
			if sv > worst || worstText == "" {
				worst, worstText = max(worst, sv), c.Text
			}
		}
	}
	var rec string
	switch {
	case !p.Aggregate:
		rec = "at_least_once if the readers of the output dedupe (a replay after a crash repeats rows), else exactly_once"
	case worst == agg.Biased:
		rec = fmt.Sprintf("exactly_once: %s is directly biased, so every row replayed after a crash goes into the answer", worstText)
	case worst == agg.Attenuated:
		rec = fmt.Sprintf("at_least_once when windows hold many rows (%s moves by duplicates over rows); exactly_once for small windows", worstText)
	case p.Window != nil:
		rec = "at_least_once: no aggregate moves on a duplicated row (a pane written twice after a crash carries the same value and identity; dedupe on its turbine.key and turbine.window.start headers)"
	default:
		rec = "at_least_once: no aggregate moves on a duplicated row (a pane written twice after a crash carries the same value; dedupe on (window, key))"
	}
	return append(out, "Recommendation: "+rec)
}

// explainPlan prints the plan as a tree, sink first, each node indented
// under the one it feeds. hop is the repartition topic (generation) the
// stream would read ("": the hop's first).
func explainPlan(p *planner.Plan, stream, topic, appID, hop string) []string {
	var nodes []string
	if stream != "" {
		nodes = append(nodes, fmt.Sprintf("Sink: topic %s (json, stream %s)", topic, stream))
	} else {
		n := "Result"
		if len(p.OrderBy) > 0 {
			n += " (sorted)"
		}
		if p.Limit >= 0 {
			n += fmt.Sprintf(" limit %d", p.Limit)
		}
		nodes = append(nodes, n)
	}
	nodes = append(nodes, "Project: "+exprList(p.Project[:len(p.Output)], p.Output))
	if p.Having != nil {
		nodes = append(nodes, "Filter (HAVING): "+p.Having.String())
	}
	if p.Aggregate {
		a := "HashAggregate"
		if len(p.KeyNames) > 0 {
			a += " keys=[" + strings.Join(p.KeyNames, ", ") + "]"
		}
		if w := p.Window; w != nil {
			switch w.Kind {
			case "HOP":
				a += fmt.Sprintf(" window=HOP(%s, slide %d ms, size %d ms) slices=%d ms", w.TimeCol, w.Spec.Slide, w.Spec.Size, w.Spec.SliceSize())
			case "SESSION":
				a += fmt.Sprintf(" window=SESSION(%s, gap %d ms)", w.TimeCol, w.SizeMs)
			default:
				a += fmt.Sprintf(" window=%s(%s, %d ms)", w.Kind, w.TimeCol, w.SizeMs)
			}
		}
		var aggs []string
		for _, c := range p.Aggs {
			aggs = append(aggs, c.Text)
		}
		a += " aggs=[" + strings.Join(aggs, ", ") + "]"
		nodes = append(nodes, a)
	}
	if p.Filter != nil {
		nodes = append(nodes, "Filter: "+p.Filter.String())
	}
	unit := "window"
	if p.Window != nil && p.Window.Kind == "HOP" {
		unit = "slice" // HOP ships slices; the merge side builds windows from them
	}
	if p.Strategy == planner.StrategyCombine && len(p.Keys) == 0 {
		nodes = append(nodes, fmt.Sprintf("Combine: each partition of %s pre-aggregates per %s and ships one partial per %s to internal topic %s (one partition; a window closes once every source partition has confirmed it)",
			p.Input.Name, unit, unit, combineTopic(appID, p.Input.Topic, orName(stream))))
	} else if p.Strategy == planner.StrategyCombine {
		nodes = append(nodes, fmt.Sprintf("Combine: each partition of %s pre-aggregates per ("+unit+", key) and ships partials to internal topic %s (murmur2 on the group key; a window closes once every source partition has confirmed it)",
			p.Input.Name, combineTopic(appID, p.Input.Topic, orName(stream))))
	}
	if p.Strategy == planner.StrategyRepartition {
		nodes = append(nodes, fmt.Sprintf("Repartition by %s: internal topic %s (murmur2 on %s; watermark markers from every source partition)",
			p.RepartitionBy, cmp.Or(hop, streamplan.RepartitionTopic(appID, p.Input.Topic, []string{p.RepartitionBy})), p.RepartitionBy))
	}
	src := fmt.Sprintf("Source: %s (topic %s", p.Input.Name, p.Input.Topic)
	if p.Input.PartitionKey != "" {
		src += ", partition key " + p.Input.PartitionKey
	}
	if wm := p.Input.Watermark; wm != nil {
		src += fmt.Sprintf(", watermark %s - %d ms", wm.Column, wm.DelayMs)
		if p.Input.Source != nil && p.Input.Source.KafkaTimestamp {
			src += fmt.Sprintf(", %s = Kafka timestamp", wm.Column)
		}
	}
	if p.From == nil {
		nodes = append(nodes, src+")")
	}
	out := []string{fmt.Sprintf("Strategy: %s (rule %s: %s)", p.Strategy, p.Rule, p.Reason)}
	if e := p.Estimate; e != nil {
		out = append(out, fmt.Sprintf("Estimate: %d rows sampled from %d partitions; %.1f rows per window, %.1f keys per window per partition; repartition %d records (%d bytes), combine %d partials (%d bytes)",
			e.SampleRows, e.Partitions, e.RowsPerWindow, e.KeysPerWindowPartition, e.RepartitionRecords, e.RepartitionBytes, e.CombineRecords, e.CombineBytes))
		if e.SourceStats != "" {
			out = append(out, fmt.Sprintf("Statistics of %s: %s", p.Input.Name, e.SourceStats))
		}
	}
	for i, n := range nodes {
		out = append(out, treePrefix(i)+n)
	}
	if p.From != nil {
		out = append(out, relLines(p.From, len(nodes))...)
	}
	return out
}

func treePrefix(depth int) string {
	if depth == 0 {
		return ""
	}
	return strings.Repeat("   ", depth-1) + "└─ "
}

// relLines prints the FROM tree of a bounded query at depth.
func relLines(r *planner.Rel, depth int) []string {
	p := treePrefix(depth)
	switch r.Kind {
	case planner.RelOneRow:
		return []string{p + "One row (no FROM)"}
	case planner.RelTopic:
		return []string{p + fmt.Sprintf("Source: %s (topic %s, read whole)", r.Relation.Name, r.Relation.Topic)}
	case planner.RelVirtual:
		return []string{p + fmt.Sprintf("Catalog table: %s.%s", r.Virtual.Schema, r.Virtual.Name)}
	case planner.RelFunc:
		return []string{p + "Function: " + r.Func}
	case planner.RelDerived:
		out := []string{p + "Subquery"}
		for _, l := range explainPlan(r.Sub, "", "", "", "") {
			if strings.HasPrefix(l, "Strategy: ") {
				continue
			}
			out = append(out, strings.Repeat("   ", depth)+l)
		}
		return out
	case planner.RelJoin:
		j := "Nested loop join (" + r.JoinType + ")"
		if r.On != nil {
			j += " on " + r.On.String()
		}
		out := []string{p + j}
		out = append(out, relLines(r.Left, depth+1)...)
		return append(out, relLines(r.Right, depth+1)...)
	}
	return []string{p + "?"}
}

func exprList(es []exec.Expr, out types.Schema) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.String()
		if out[i].Name != e.String() {
			parts[i] += " AS " + out[i].Name
		}
	}
	return strings.Join(parts, ", ")
}

func orName(stream string) string {
	if stream == "" {
		return "<stream>"
	}
	return stream
}
