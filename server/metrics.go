package server

import "github.com/prometheus/client_golang/prometheus"

// metrics are the engine's Prometheus series, registered on the server's
// own registry (never the global one, so tests can run several servers).
type metrics struct {
	reg                 *prometheus.Registry
	recordsIn           *prometheus.CounterVec
	recordsOut          *prometheus.CounterVec
	lateRows            *prometheus.CounterVec
	decodeErrors        *prometheus.CounterVec
	watermark           *prometheus.GaugeVec
	watermarkLag        *prometheus.GaugeVec
	batchSeconds        *prometheus.HistogramVec
	openGroups          *prometheus.GaugeVec
	recoveredTimers     *prometheus.CounterVec
	combineLatePartials *prometheus.CounterVec
	combineLag          *prometheus.GaugeVec
	idlePartitions      *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		recordsIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_records_in_total", Help: "Input records read by a stream, per input partition.",
		}, []string{"stream", "partition"}),
		recordsOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_records_out_total", Help: "Records a stream wrote to its output topic.",
		}, []string{"stream"}),
		lateRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_late_rows_total", Help: "Rows whose windows had all closed: dropped, or routed to the late_data_topic.",
		}, []string{"stream", "action"}),
		decodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_decode_errors_total", Help: "Undecodable input records, by the on_error policy that handled them.",
		}, []string{"stream", "policy"}),
		watermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turbine_watermark_ms", Help: "A stream's event-time watermark (epoch millis).",
		}, []string{"stream"}),
		watermarkLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turbine_watermark_lag_ms", Help: "Wall clock minus the stream's watermark.",
		}, []string{"stream"}),
		batchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "turbine_batch_seconds", Help: "Time to process one fetched batch, commit included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"stream"}),
		openGroups: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turbine_open_groups", Help: "Open (key, window) groups held by a stream.",
		}, []string{"stream"}),
		recoveredTimers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_recovered_due_timers_total", Help: "Windows already due when a stream started (closed at once).",
		}, []string{"stream"}),
		combineLatePartials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_combine_late_partials_total", Help: "Partial accumulators that reached a combine merge stage after their window closed: dropped.",
		}, []string{"stream"}),
		combineLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turbine_combine_min_watermark_lag_ms", Help: "Wall clock minus the event time of the slowest source partition a combine merge stage waits on, named by label.",
		}, []string{"stream", "source_partition"}),
		idlePartitions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turbine_idle_partitions", Help: "Input partitions idle (nothing to read for idle_timeout) and not holding the watermark back.",
		}, []string{"stream"}),
	}
	m.reg.MustRegister(m.recordsIn, m.recordsOut, m.lateRows, m.decodeErrors, m.watermark, m.watermarkLag, m.batchSeconds, m.openGroups,
		m.recoveredTimers, m.idlePartitions, m.combineLatePartials, m.combineLag,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// forget drops a dropped stream's series.
func (m *metrics) forget(stream string) {
	l := prometheus.Labels{"stream": stream}
	m.recordsIn.DeletePartialMatch(l)
	m.recordsOut.DeletePartialMatch(l)
	m.lateRows.DeletePartialMatch(l)
	m.decodeErrors.DeletePartialMatch(l)
	m.watermark.DeletePartialMatch(l)
	m.watermarkLag.DeletePartialMatch(l)
	m.batchSeconds.DeletePartialMatch(l)
	m.openGroups.DeletePartialMatch(l)
	m.recoveredTimers.DeletePartialMatch(l)
	m.idlePartitions.DeletePartialMatch(l)
	m.combineLatePartials.DeletePartialMatch(l)
	m.combineLag.DeletePartialMatch(l)
}
