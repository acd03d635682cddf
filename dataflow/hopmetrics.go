package dataflow

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/turbinesql/turbinesql/kafkaio"
)

// hopLag exports turbine_repartition_lag_records: the records of the
// source topic a repartition hop has not read yet, over all its
// partitions (the upstream side of the hop, as the seed's console draws
// it). It is derived at scrape time from the hop stage's
// turbine_input_lag_records, which its tasks keep current, so the two can
// never disagree.
type hopLag struct {
	lag   *prometheus.GaugeVec
	mu    sync.Mutex
	names map[string]bool
}

var hopLagDesc = prometheus.NewDesc("turbine_repartition_lag_records",
	"Records of the source topic a repartition hop has not read yet, summed over its partitions.", []string{"hop"}, nil)

// RegisterHop makes the stage named hop a repartition hop for
// turbine_repartition_lag_records.
func (m *Metrics) RegisterHop(hop string) {
	m.hops.mu.Lock()
	m.hops.names[hop] = true
	m.hops.mu.Unlock()
}

func (h *hopLag) forget(hop string) {
	h.mu.Lock()
	delete(h.names, hop)
	h.mu.Unlock()
}

func (h *hopLag) Describe(ch chan<- *prometheus.Desc) { ch <- hopLagDesc }

func (h *hopLag) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	names := make(map[string]float64, len(h.names))
	for n := range h.names {
		names[n] = 0
	}
	h.mu.Unlock()
	if len(names) == 0 {
		return
	}
	ms := make(chan prometheus.Metric, 64)
	go func() {
		h.lag.Collect(ms)
		close(ms)
	}()
	for m := range ms {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		for _, lp := range d.GetLabel() {
			if lp.GetName() != "stream" {
				continue
			}
			if _, ok := names[lp.GetValue()]; ok {
				names[lp.GetValue()] += d.GetGauge().GetValue()
			}
		}
	}
	for n, v := range names {
		ch <- prometheus.MustNewConstMetric(hopLagDesc, prometheus.GaugeValue, v, n)
	}
}

// shipCounts counts what a combine's pre-aggregation ships per internal
// partition, added to its counters once per ship rather than per record.
type shipCounts struct {
	partials, bytes []prometheus.Counter
	markers         prometheus.Counter
	n, b            []int
}

func newShipCounts(env *Env, partitions int) *shipCounts {
	m := env.Metrics
	c := &shipCounts{partials: make([]prometheus.Counter, partitions), bytes: make([]prometheus.Counter, partitions),
		markers: m.CombineMarkersOut.WithLabelValues(env.Name), n: make([]int, partitions), b: make([]int, partitions)}
	for q := range partitions {
		p := strconv.Itoa(q)
		c.partials[q] = m.CombinePartialsOut.WithLabelValues(env.Name, p)
		c.bytes[q] = m.CombineBytesOut.WithLabelValues(env.Name, p)
	}
	return c
}

func (c *shipCounts) count(r *kafkaio.Record) {
	if int(r.Partition) < len(c.n) {
		c.n[r.Partition]++
		c.b[r.Partition] += len(r.Value)
	}
}

func (c *shipCounts) flush() {
	for q, n := range c.n {
		if n > 0 {
			c.partials[q].Add(float64(n))
			c.bytes[q].Add(float64(c.b[q]))
			c.n[q], c.b[q] = 0, 0
		}
	}
}
