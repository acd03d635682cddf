package server

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/turbinesql/turbinesql/console"
	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/placement"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/types"
)

// consoleSource gives the web console its figures: the running streams'
// state, and the series of /metrics (read from the same registry, so the
// console and an alert never disagree).
type consoleSource struct {
	s     *Server
	rates console.Rates
	node  string
}

var _ console.Source = (*consoleSource)(nil)

func newConsoleSource(s *Server) *consoleSource {
	node, err := os.Hostname()
	if err != nil || node == "" {
		node = "this node"
	}
	return &consoleSource{s: s, node: node}
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
	m := c.scrape()
	now := time.Now()
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []console.Stream
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
				row.Strategy = r.plan.Strategy
			}
			st := r.stats
			row.RecordsIn, row.RecordsOut, row.LateRows = st.In.Load(), st.Out.Load(), st.Late.Load()
			row.Skipped, row.DeadLettered = st.Skipped.Load(), st.DLQ.Load()
			if h := r.hop; h != nil {
				skipped, dead := h.stats.Skipped.Load(), h.stats.DLQ.Load()
				row.RecordsIn += skipped + dead
				row.Skipped += skipped
				row.DeadLettered += dead
			}
			if r.final != nil {
				if wm, ok, _ := r.final.Watermark(); ok && r.plan != nil && r.plan.Window != nil {
					row.Watermark = types.MillisTime(wm).Format("2006-01-02 15:04:05.000")
				}
			}
			row.LagRecords = int64(m.sum("turbine_input_lag_records", map[string]string{"stream": def.Name}))
			row.InPerSec = c.rates.Rate("in/"+def.Name, float64(row.RecordsIn), now)
			row.OutPerSec = c.rates.Rate("out/"+def.Name, float64(row.RecordsOut), now)
		}
		out = append(out, row)
	}
	for _, f := range s.failedStreamRows() {
		row := console.Stream{Status: "failed"}
		row.Name, _ = f[0].(string)
		row.Input, _ = f[1].(string)
		row.Topic, _ = f[2].(string)
		row.Error, _ = f[len(f)-1].(string)
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func stat(name string, v any) console.Stat {
	switch x := v.(type) {
	case int64:
		return console.Stat{Name: name, Value: strconv.FormatInt(x, 10)}
	case float64:
		return console.Stat{Name: name, Value: strconv.FormatFloat(x, 'f', 1, 64)}
	}
	return console.Stat{Name: name, Value: fmt.Sprint(v)}
}

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
	t := &console.Topology{Stream: def.Name, Status: "stopped"}
	r, running := s.streams[def.Name]
	inTopic, nIn := "", 0
	if rel, ok := s.cat.Relation(def.Input); ok {
		inTopic = rel.Topic
	}
	var p *planner.Plan
	if running {
		status, err := r.status()
		t.Status = status
		if err != nil {
			t.Status += ": " + err.Error()
		}
		p, nIn = r.plan, r.spec.nIn
	}
	lag := func(stage, topic string) int64 {
		return int64(m.sum("turbine_input_lag_records", map[string]string{"stream": stage, "topic": topic}))
	}
	in := int64(0)
	if running {
		in = r.stats.In.Load()
	}
	src := console.Node{Kind: console.KindSource, Title: "source " + def.Input, Topic: inTopic, Partitions: nIn,
		Stats: []console.Stat{stat("records read", in), stat("rate", c.rates.Rate("in/"+def.Name, float64(in), now))}}
	t.Nodes = append(t.Nodes, src)
	downTopic := inTopic // what the stream's last stage reads
	if running && p != nil {
		switch {
		case r.hop != nil:
			h := r.hop
			hopIn := m.sum("turbine_records_in_total", map[string]string{"stream": h.topic})
			nulls := int64(m.sum("turbine_repartition_null_keys_total", map[string]string{"hop": h.topic}))
			node := console.Node{Kind: console.KindRepartition, Title: "repartition by " + p.RepartitionBy, Topic: h.topic, Partitions: h.outN,
				Stats: []console.Stat{
					stat("input rate", c.rates.Rate("hop/"+h.topic, hopIn, now)),
					stat("lag (records)", lag(h.topic, inTopic)),
					stat("records out", int64(m.sum("turbine_repartition_records_out_total", map[string]string{"hop": h.topic}))),
				},
				Distribution: distribution(m, "turbine_repartition_records_out_total", "turbine_repartition_bytes_out_total", map[string]string{"hop": h.topic}, h.outN),
				NullKeys:     &nulls}
			t.Nodes = append(t.Nodes, node)
			downTopic = h.topic
		case r.pre != nil:
			topic := combineTopic(s.cfg.AppID, inTopic, def.Name)
			want := map[string]string{"stream": def.Name}
			node := console.Node{Kind: console.KindCombine, Title: "combine by " + strings.Join(p.KeyNames, ", "), Topic: topic, Partitions: r.spec.nCmb,
				Stats: []console.Stat{
					stat("input rate", c.rates.Rate("in/"+def.Name, float64(in), now)),
					stat("lag (records)", lag(def.Name, inTopic)),
					stat("partials shipped", int64(m.sum("turbine_combine_partials_out_total", want))),
					stat("markers shipped", int64(m.sum("turbine_combine_markers_out_total", want))),
					stat("late partials dropped", int64(m.sum("turbine_combine_late_partials_total", want))),
					stat("merge watermark lag (s)", m.sum("turbine_combine_min_watermark_lag_seconds", want)),
				},
				Distribution: distribution(m, "turbine_combine_partials_out_total", "turbine_combine_bytes_out_total", want, r.spec.nCmb)}
			t.Nodes = append(t.Nodes, node)
			downTopic = topic
		}
	}
	agg := console.Node{Kind: console.KindAggregate, Title: "aggregate " + def.Name}
	if p != nil && !p.Aggregate {
		agg.Kind, agg.Title = console.KindProject, "filter and project "+def.Name
	}
	if running {
		if p != nil {
			agg.Stats = append(agg.Stats, stat("strategy", p.Strategy))
		}
		if r.final != nil {
			if wm, ok, _ := r.final.Watermark(); ok {
				agg.Stats = append(agg.Stats, stat("watermark", types.MillisTime(wm).Format("2006-01-02 15:04:05")))
			}
		}
		agg.Stats = append(agg.Stats, stat("lag (records)", lag(def.Name, downTopic)), stat("late rows", r.stats.Late.Load()))
	}
	t.Nodes = append(t.Nodes, agg)
	out := int64(0)
	if running {
		out = r.stats.Out.Load()
	}
	sink := console.Node{Kind: console.KindSink, Title: "sink " + def.Topic, Topic: def.Topic,
		Stats: []console.Stat{stat("records out", out), stat("rate", c.rates.Rate("out/"+def.Name, float64(out), now))}}
	if running {
		sink.Partitions = r.spec.outN
	}
	t.Nodes = append(t.Nodes, sink)
	return t, true
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
			n := st.st.Partitions()
			for p := 0; p < n; p++ {
				ps := strconv.Itoa(p)
				row := console.Partition{Stream: name, Stage: st.label, Topic: st.st.Topic(), Partition: p, Node: c.node,
					RecordsIn:  int64(m.sum("turbine_records_in_total", map[string]string{"stream": st.name, "partition": ps})),
					LagRecords: int64(m.sum("turbine_input_lag_records", map[string]string{"stream": st.name, "topic": st.st.Topic(), "partition": ps})),
					OpenGroups: int64(m.sum("turbine_open_groups", map[string]string{"stream": st.name, "partition": ps})),
					Placement:  "not checked"}
				if st.keyed {
					row.KeyGroups = len(state.OwnedGroups(int32(p), n))
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
