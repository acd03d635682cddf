package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/console"
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/placement"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/streamplan"
	"github.com/turbinesql/turbinesql/types"
)

// consoleSource gives the web console its figures: the running streams'
// state, and the series of /metrics (read from the same registry, so the
// console and an alert never disagree).
type consoleSource struct {
	s       *Server
	rates   console.Rates
	history *console.History
}

var _ console.Source = (*consoleSource)(nil)

// startConsole returns the console's figures and samples the streams'
// history (the charts of their pages) until ctx ends.
func startConsole(ctx context.Context, s *Server) *consoleSource {
	c := &consoleSource{s: s, history: console.NewHistory(console.DefaultHistorySpan, cmp.Or(s.cfg.consoleSampleEvery, console.DefaultHistoryEvery))}
	go c.history.Run(ctx, c.figures)
	return c
}

// series is one scrape of the registry, by metric name, for lookups by
// label values.
type series map[string][]*dto.Metric

func (c *consoleSource) scrape() series {
	out := series{}
	fams, err := c.s.reg.Gather()
	if err != nil {
		c.s.log.Debug("console: gathering metrics", "err", err)
	}
	for _, f := range fams {
		out[f.GetName()] = f.GetMetric()
	}
	return out
}

// sum adds the values of name's series whose labels include want.
func (m series) sum(name string, want map[string]string) float64 {
	total := 0.0
	for _, x := range m[name] {
		if !hasLabels(x, want) {
			continue
		}
		total += x.GetCounter().GetValue() + x.GetGauge().GetValue()
	}
	return total
}

// each calls fn with every series of name matching want, by its label
// label's value.
func (m series) each(name string, want map[string]string, label string, fn func(v string, value float64)) {
	for _, x := range m[name] {
		if !hasLabels(x, want) {
			continue
		}
		for _, l := range x.GetLabel() {
			if l.GetName() == label {
				fn(l.GetValue(), x.GetCounter().GetValue()+x.GetGauge().GetValue())
			}
		}
	}
}

func hasLabels(x *dto.Metric, want map[string]string) bool {
	found := 0
	for _, l := range x.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(want)
}

func (c *consoleSource) Streams() []console.Stream {
	now := time.Now()
	var out []console.Stream
	for _, sr := range c.streamRows() {
		row := sr.row
		row.InPerSec = c.rates.Rate("in/"+row.Name, float64(row.RecordsIn), now)
		row.OutPerSec = c.rates.Rate("out/"+row.Name, float64(row.RecordsOut), now)
		out = append(out, row)
	}
	return out
}

// streamRow is a row of the Streams page, without rates, and the catalog
// entry of its stream (nil for a stream the catalog's replay could not
// apply).
type streamRow struct {
	row console.Stream
	def *catalog.Stream
}

// streamRows are the Streams page's rows (SHOW STREAMS's figures and the
// lag) by name.
func (c *consoleSource) streamRows() []streamRow {
	m := c.scrape()
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []streamRow
	for _, def := range s.cat.Streams() {
		row := console.Stream{Name: def.Name, Input: def.Input, Topic: def.Topic, Status: "stopped"}
		if r, ok := s.streams[def.Name]; ok {
			status, err := r.status()
			if status == "running" && !s.kafkaUp() {
				status = "waiting for broker"
			}
			row.Status = status
			if err != nil {
				row.Error = err.Error()
			}
			if r.plan != nil {
				row.Strategy = r.plan.Strategy.String()
			}
			c := r.counters()
			row.RecordsIn, row.RecordsOut, row.LateRows = c.In, c.Out, c.Late
			row.Skipped, row.DeadLettered = c.Skipped, c.DLQ
			// The records the stream has yet to read, wherever they wait:
			// its own stages' inputs and, in front of a repartition hop,
			// the source records the hop has not moved yet.
			lag := m.sum("turbine_input_lag_records", map[string]string{"stream": def.Name})
			if h := r.hop; h != nil {
				lag += m.sum("turbine_input_lag_records", map[string]string{"stream": h.topic})
			}
			row.LagRecords = whole(lag)
			if r.final != nil {
				if wm, ok, _ := r.final.Watermark(); ok && r.plan != nil && r.plan.Window != nil {
					row.Watermark = types.MillisTime(wm).Format("2006-01-02 15:04:05.000")
				}
			}
		}
		out = append(out, streamRow{row, def})
	}
	for _, f := range s.failedStreamRows() {
		row := console.Stream{Status: "failed"}
		row.Name, _ = f[0].(string)
		row.Input, _ = f[1].(string)
		row.Topic, _ = f[2].(string)
		row.Error, _ = f[len(f)-1].(string)
		out = append(out, streamRow{row: row})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].row.Name < out[j].row.Name })
	return out
}

// figures is one sample of every stream's history.
func (c *consoleSource) figures() []console.Figures {
	var out []console.Figures
	for _, sr := range c.streamRows() {
		if sr.def == nil {
			continue
		}
		r := sr.row
		out = append(out, console.Figures{Stream: r.Name, Of: sr.def, RecordsIn: r.RecordsIn, RecordsOut: r.RecordsOut,
			Lag: r.LagRecords, LateRows: r.LateRows, DeadLettered: r.DeadLettered})
	}
	return out
}

// stat is a figure of a node: counts and lags as whole numbers, rates
// (perSec) with a decimal and their unit.
func stat(name string, v any) console.Stat {
	switch x := v.(type) {
	case int64:
		return console.Stat{Name: name, Value: strconv.FormatInt(x, 10)}
	case perSec:
		return console.Stat{Name: name, Value: strconv.FormatFloat(float64(x), 'f', 1, 64) + "/s"}
	}
	return console.Stat{Name: name, Value: fmt.Sprint(v)}
}

// perSec is a rate, per second.
type perSec float64

// whole is a gauge read from the metrics (a float there) as the whole
// number it counts: records behind, or seconds.
func whole(v float64) int64 { return int64(math.Round(v)) }

func (c *consoleSource) Topology(name string) (*console.Topology, bool) {
	m := c.scrape()
	now := time.Now()
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	def, ok := s.cat.Stream(name)
	if !ok {
		return nil, false
	}
	t := &console.Topology{Stream: def.Name, Status: "stopped", SQL: strings.TrimSpace(def.SQL), Guarantee: def.Options.Guarantee.String(),
		History: c.history.Points(def.Name), HistoryEvery: c.history.Every().Seconds()}
	r, running := s.streams[def.Name]
	inTopic, nIn := "", 0
	src := console.Node{Kind: console.KindSource, Title: "source " + def.Input}
	if rel, ok := s.cat.Relation(def.Input); ok {
		inTopic = rel.Topic
		src.Link = "/sources#source-" + rel.Name
		if rel.Stream != nil {
			// A stream reading another: its input is that stream's page.
			src.Title, src.Link = "stream "+rel.Name, "/topology?stream="+url.QueryEscape(rel.Name)
		}
	}
	var p *planner.Plan
	if running {
		status, err := r.status()
		t.Status = status
		if err != nil {
			t.Error = err.Error()
		}
		p, nIn = r.plan, r.spec.nIn
	}
	lag := func(stage, topic string) int64 {
		return whole(m.sum("turbine_input_lag_records", map[string]string{"stream": stage, "topic": topic}))
	}
	var own dataflow.Counters // the stream's own stages', the hop's apart
	if running {
		own = r.stats.Load()
	}
	in := own.In
	src.Topic, src.Partitions = inTopic, nIn
	src.Stats = []console.Stat{stat("records read", in), stat("rate", perSec(c.rates.Rate("in/"+def.Name, float64(in), now)))}
	t.Nodes = append(t.Nodes, src)
	downTopic := inTopic // what the stream's last stage reads
	if running && p != nil {
		hop := ""
		switch {
		case r.hop != nil:
			h := r.hop
			hop = h.topic
			hopIn := m.sum("turbine_records_in_total", map[string]string{"stream": h.topic})
			nulls := whole(m.sum("turbine_repartition_null_keys_total", map[string]string{"hop": h.topic}))
			node := console.Node{Kind: console.KindRepartition, Title: "repartition by " + p.RepartitionBy, Topic: h.topic, Partitions: h.outN,
				Stats: []console.Stat{
					stat("input rate", perSec(c.rates.Rate("hop/"+h.topic, hopIn, now))),
					stat("lag (records)", lag(h.topic, inTopic)),
					stat("records out", whole(m.sum("turbine_repartition_records_out_total", map[string]string{"hop": h.topic}))),
				},
				Distribution: distribution(m, "turbine_repartition_records_out_total", "turbine_repartition_bytes_out_total", map[string]string{"hop": h.topic}, h.outN),
				NullKeys:     &nulls}
			t.Nodes = append(t.Nodes, node)
			downTopic = h.topic
		case r.pre != nil:
			topic := combineTopic(s.cfg.AppID, inTopic, def.Name)
			want := map[string]string{"stream": def.Name}
			node := console.Node{Kind: console.KindCombine, Title: combineTitle(p), Topic: topic, Partitions: r.spec.nCmb,
				Stats: []console.Stat{
					stat("input rate", perSec(c.rates.Rate("in/"+def.Name, float64(in), now))),
					stat("lag (records)", lag(def.Name, inTopic)),
					stat("partials shipped", whole(m.sum("turbine_combine_partials_out_total", want))),
					stat("markers shipped", whole(m.sum("turbine_combine_markers_out_total", want))),
					stat("late partials dropped", whole(m.sum("turbine_combine_late_partials_total", want))),
					stat("merge watermark lag (s)", whole(m.sum("turbine_combine_min_watermark_lag_seconds", want))),
				},
				Distribution: distribution(m, "turbine_combine_partials_out_total", "turbine_combine_bytes_out_total", want, r.spec.nCmb)}
			t.Nodes = append(t.Nodes, node)
			downTopic = topic
		}
		t.Strategy, t.Reason = p.Strategy.String(), fmt.Sprintf("rule %s: %s", p.Rule, p.Reason)
		t.Plan = s.explainStream(def, p, hop)
	}
	agg := console.Node{Kind: console.KindAggregate, Title: "aggregate " + def.Name}
	if p != nil && !p.Aggregate {
		agg.Kind, agg.Title = console.KindProject, "filter and project "+def.Name
	}
	if running {
		if p != nil {
			agg.Stats = append(agg.Stats, stat("strategy", p.Strategy.String()))
		}
		if r.final != nil {
			if wm, ok, _ := r.final.Watermark(); ok {
				agg.Stats = append(agg.Stats, stat("watermark", types.MillisTime(wm).Format("2006-01-02 15:04:05")))
			}
		}
		agg.Stats = append(agg.Stats, stat("lag (records)", lag(def.Name, downTopic)), stat("late rows", own.Late))
	}
	t.Nodes = append(t.Nodes, agg)
	out := own.Out
	sink := console.Node{Kind: console.KindSink, Title: "sink " + def.Topic, Topic: def.Topic,
		Stats: []console.Stat{stat("records out", out), stat("rate", perSec(c.rates.Rate("out/"+def.Name, float64(out), now)))}}
	if running {
		sink.Partitions = r.spec.outN
	}
	t.Nodes = append(t.Nodes, sink)
	return t, true
}

// combineTitle names what a combine hop combines: its group key, or for a
// query without one, its aggregates per window (per slice of a HOP, which
// is what it ships) as EXPLAIN's Combine line says it.
func combineTitle(p *planner.Plan) string {
	if len(p.KeyNames) > 0 {
		return "combine by " + strings.Join(p.KeyNames, ", ")
	}
	aggs := make([]string, len(p.Aggs))
	for i, a := range p.Aggs {
		aggs[i] = a.Text
	}
	unit := "window"
	if p.Window != nil && p.Window.Kind() == streamplan.Hop {
		unit = "slice"
	}
	return fmt.Sprintf("combine %s per %s (no group key)", strings.Join(aggs, ", "), unit)
}

// distribution is a hop's output per internal partition, every partition
// present (an empty one is a bar of zero).
func distribution(m series, records, bytes string, want map[string]string, n int) []console.Bar {
	bars := make([]console.Bar, n)
	for i := range bars {
		bars[i].Partition = i
	}
	m.each(records, want, "partition", func(p string, v float64) {
		if i, err := strconv.Atoi(p); err == nil && i >= 0 && i < n {
			bars[i].Records = int64(v)
		}
	})
	m.each(bytes, want, "partition", func(p string, v float64) {
		if i, err := strconv.Atoi(p); err == nil && i >= 0 && i < n {
			bars[i].Bytes = int64(v)
		}
	})
	return bars
}

// Members is the Cluster page: the app's live processes.
func (c *consoleSource) Members() []console.Member {
	ms := c.s.members.Load()
	if ms == nil {
		return nil
	}
	var out []console.Member
	for _, m := range ms.Members() {
		out = append(out, console.Member{Node: m.Node, PGAddr: m.PGAddr, HTTPAddr: m.HTTPAddr, TasksOwned: m.TasksOwned,
			TasksStandby: m.TasksStandby, State: m.State, This: m.Node == c.s.nodeID})
	}
	return out
}

// Sources is the Sources page: each source's schema (as DESCRIBE shows
// it), its topic's partitions with their end offsets, its arrival rate
// (the end offsets' growth between polls), its rate in event time, and
// its placement verdicts, from the streams that check its partition key.
func (c *consoleSource) Sources() []console.SourceInfo {
	s := c.s
	srcs := s.cat.Sources()
	readers := map[string][]string{}
	checks := map[string][]placementCheck{}
	s.mu.Lock()
	for _, def := range s.cat.Streams() {
		readers[def.Input] = append(readers[def.Input], def.Name)
	}
	for name, r := range s.streams {
		if r.board != nil && r.plan != nil {
			checks[r.plan.Input.Name] = append(checks[r.plan.Input.Name], placementCheck{stream: name, snaps: r.board.All()})
		}
	}
	s.mu.Unlock()
	up := s.kafkaUp()
	out := make([]console.SourceInfo, 0, len(srcs))
	for _, src := range srcs {
		info := console.SourceInfo{Name: src.Name, Topic: src.Topic, Format: src.Format, OnError: src.OnError.String(), DLQTopic: src.DLQTopic,
			PartitionKey: src.PartitionKey, Streams: readers[src.Name], EventRate: s.statsFor(src).line("")}
		if src.PartitionKey != "" {
			info.PartitionHash = hashDetail(src)
		}
		if wm := src.Watermark; wm != nil {
			info.Watermark = fmt.Sprintf("%s - %d ms", wm.Column, wm.DelayMs)
			if src.KafkaTimestamp {
				info.Watermark += " (" + wm.Column + " = Kafka timestamp)"
			}
		}
		if res, err := s.describe(&sql.Describe{Name: src.Name}); err == nil {
			for _, row := range res.Rows {
				col := console.Column{}
				col.Name, _ = row[0].(string)
				col.Type, _ = row[1].(string)
				col.Detail, _ = row[2].(string)
				info.Columns = append(info.Columns, col)
			}
		}
		sort.Slice(checks[src.Name], func(i, j int) bool { return checks[src.Name][i].stream < checks[src.Name][j].stream })
		var ends map[int32]int64
		err := errors.New("Kafka is out of reach")
		if up {
			ctx, cancel := context.WithTimeout(s.bg, 3*time.Second)
			ends, err = s.kafka.EndOffsets(ctx, src.Topic)
			cancel()
		}
		if err != nil {
			info.Error = "cannot read the partitions of " + src.Topic + ": " + err.Error()
		}
		for p := int32(0); p < int32(len(ends)); p++ {
			info.Partitions = append(info.Partitions, console.SourcePartition{Partition: int(p), Records: ends[p],
				Placement: partitionVerdict(src, checks[src.Name], p)})
			info.Records += ends[p]
		}
		if err == nil {
			info.InPerSec = c.rates.Rate("source/"+src.Name, float64(info.Records), time.Now())
		}
		info.Placement = placementSummary(src, checks[src.Name], len(ends))
		out = append(out, info)
	}
	return out
}

// placementCheck is one stream's placement check of its input.
type placementCheck struct {
	stream string
	snaps  []placement.Snapshot
}

// partitionVerdict is what the checks say of partition p of src: a -1
// from any stream stands (its keys are misplaced whoever looks), then a
// 1, then how far a 0 has got.
func partitionVerdict(src *catalog.Source, checks []placementCheck, p int32) string {
	if src.PartitionKey == "" {
		return "no partition key"
	}
	var best *placement.Snapshot
	by := ""
	for _, c := range checks {
		for i, sn := range c.snaps {
			if sn.Partition != p {
				continue
			}
			if best == nil || rank(sn.Verdict) > rank(best.Verdict) || (sn.Verdict == best.Verdict && sn.WellPlaced > best.WellPlaced) {
				best, by = &c.snaps[i], c.stream
			}
		}
	}
	if best == nil {
		return "not checked yet"
	}
	return placementText(*best) + " (" + by + ")"
}

// rank orders verdicts by what a user must see first: -1, 1, 0.
func rank(v int) int {
	switch v {
	case -1:
		return 2
	case 1:
		return 1
	}
	return 0
}

// placementSummary sums up a source's placement: its key and hash, and
// how many of its n partitions each verdict covers.
func placementSummary(src *catalog.Source, checks []placementCheck, n int) string {
	if src.PartitionKey == "" {
		return "no partition key: streams grouping by a column repartition or combine"
	}
	head := "partition key " + src.PartitionKey + ", " + hashDetail(src)
	if len(checks) == 0 {
		return head + "; not checked: no running stream groups by " + src.PartitionKey + " without a hop"
	}
	var streams []string
	verdicts := map[int]map[int32]bool{}
	for _, c := range checks {
		streams = append(streams, c.stream)
		for _, sn := range c.snaps {
			if verdicts[sn.Verdict] == nil {
				verdicts[sn.Verdict] = map[int32]bool{}
			}
			verdicts[sn.Verdict][sn.Partition] = true
		}
	}
	head += "; checked by " + strings.Join(streams, ", ")
	switch {
	case len(verdicts[-1]) > 0:
		return fmt.Sprintf("%s: keys not where murmur2 puts them on %d of %d partitions", head, len(verdicts[-1]), n)
	case len(verdicts[1]) > 0:
		return fmt.Sprintf("%s: murmur2 placement confirmed on %d of %d partitions", head, len(verdicts[1]), n)
	}
	return head + ": no verdict yet"
}

func (c *consoleSource) Partitions() []console.Partition {
	m := c.scrape()
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []console.Partition
	names := make([]string, 0, len(s.streams))
	for n := range s.streams {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		r := s.streams[name]
		verdicts := map[int]placement.Snapshot{}
		if r.board != nil {
			for _, sn := range r.board.All() {
				verdicts[int(sn.Partition)] = sn
			}
		}
		type stage struct {
			st    *dataflow.Stage
			label string
			name  string
			keyed bool // holds keyed state, by key group
		}
		var stages []stage
		if r.hop != nil {
			stages = append(stages, stage{r.hop.stage, "repartition hop", r.hop.topic, false})
		}
		if r.pre != nil {
			stages = append(stages, stage{r.pre, "pre-aggregation", name, false})
		}
		if r.final != nil {
			label, keyed := "stream", r.plan != nil && r.plan.Aggregate && len(r.plan.Keys) > 0
			switch {
			case r.pre != nil:
				label = "merge"
			case r.plan != nil && r.plan.Aggregate:
				label = "aggregate"
			case r.plan != nil:
				label = "filter and project"
			}
			stages = append(stages, stage{r.final, label, name, keyed})
		}
		for _, st := range stages {
			// The partitions whose tasks run here: another process's are
			// on its own console (the Cluster page links to it).
			n := st.st.InputPartitions()
			for _, p32 := range st.st.Owned() {
				p := int(p32)
				ps := strconv.Itoa(p)
				row := console.Partition{Stream: name, Stage: st.label, Topic: st.st.Topic(), Partition: p, Node: s.nodeID,
					RecordsIn:  int64(m.sum("turbine_records_in_total", map[string]string{"stream": st.name, "partition": ps})),
					LagRecords: int64(m.sum("turbine_input_lag_records", map[string]string{"stream": st.name, "topic": st.st.Topic(), "partition": ps})),
					OpenGroups: int64(m.sum("turbine_open_groups", map[string]string{"stream": st.name, "partition": ps})),
					Placement:  "not checked"}
				if st.keyed {
					row.KeyGroups = state.OwnedCount(p32, n)
					switch sn, ok := verdicts[p]; {
					case r.board == nil:
						// A repartition or combine hop's topic: the engine
						// places its keys itself, with murmur2.
						row.Placement = "placed by TurbineSQL"
					case ok && st.st == r.final:
						row.Placement = placementText(sn)
					default:
						row.Placement = "not checked yet"
					}
				}
				out = append(out, row)
			}
		}
	}
	return out
}

// placementText is a partition's placement verdict as the console shows
// it (SHOW PARTITIONS has the numbers).
func placementText(sn placement.Snapshot) string {
	switch sn.Verdict {
	case 1:
		return fmt.Sprintf("1: murmur2 placement confirmed (%d keys)", sn.WellPlaced)
	case -1:
		return "-1: keys not where murmur2 puts them (rebuild the state: DROP and CREATE the stream)"
	}
	return fmt.Sprintf("0: %d well-placed keys so far", sn.WellPlaced)
}
