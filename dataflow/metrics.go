package dataflow

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the runtime's Prometheus series, registered on the
// registry the caller gives (never the global one, so tests can run several
// servers).
type Metrics struct {
	RecordsIn       *prometheus.CounterVec
	RecordsOut      *prometheus.CounterVec
	LateRows        *prometheus.CounterVec
	DecodeErrors    *prometheus.CounterVec
	NullEventTime   *prometheus.CounterVec
	Watermark       *prometheus.GaugeVec
	WatermarkLag    *prometheus.GaugeVec
	BatchSeconds    *prometheus.HistogramVec
	OpenGroups      *prometheus.GaugeVec
	RecoveredTimers *prometheus.CounterVec
	ExpiredGroups   *prometheus.CounterVec
	// HeldRows, StateRuns and StateFolds show the state path of groups
	// not in memory: rows of cold windows held and folded at once (exec's
	// blindrows.go), runs of partials a commit wrote as tables of their
	// own (state's runs.go), and windows whose partials a commit folded
	// into one run (state's runfold.go).
	HeldRows            *prometheus.CounterVec
	StateRuns           *prometheus.CounterVec
	StateFolds          *prometheus.CounterVec
	CombineLatePartials *prometheus.CounterVec
	CombineLag          *prometheus.GaugeVec
	IdlePartitions      *prometheus.GaugeVec
	ConsumerLag         *prometheus.GaugeVec
	// KeyPlacement is the producer-placement verdict of each input
	// partition of a keyed stateful stream: -1, 0 or 1 (Placement).
	KeyPlacement *prometheus.GaugeVec
	// RestoredRecords and RestoreRemaining show a task's restore from its
	// changelog: records applied, and records left, per stage and partition.
	RestoredRecords  *prometheus.CounterVec
	RestoreRemaining *prometheus.GaugeVec
	// StandbyRecords counts changelog records standby copies applied.
	StandbyRecords *prometheus.CounterVec

	// The repartition hop's family (seed: monitoring the hop), by hop
	// (its internal topic) and internal partition: its output
	// distribution, where one dominant partition is a hot key.
	RepRecordsOut *prometheus.CounterVec
	RepBytesOut   *prometheus.CounterVec
	RepNullKeys   *prometheus.CounterVec
	// The combine hop's family: partials and markers shipped, by stream
	// and internal partition.
	CombinePartialsOut *prometheus.CounterVec
	CombineBytesOut    *prometheus.CounterVec
	CombineMarkersOut  *prometheus.CounterVec

	hops *hopLag
	late *lateLog // rate-limits the log of late rows
}

// NewMetrics creates the series and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		RecordsIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_records_in_total", Help: "Input records read by a stream, per input partition.",
		}, []string{"stream", "partition"}),
		RecordsOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_records_out_total", Help: "Records a stream wrote to its output topic.",
		}, []string{"stream"}),
		LateRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_late_rows_total", Help: "Rows whose windows had all closed: dropped, or routed to the late_data_topic.",
		}, []string{"stream", "action"}),
		DecodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_decode_errors_total", Help: "Undecodable input records, by the on_error policy that handled them.",
		}, []string{"stream", "policy"}),
		NullEventTime: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_null_event_time_total", Help: "Input rows without an event time (NULL or missing), by the on_error policy that handled them.",
		}, []string{"stream", "policy"}),
		Watermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turbine_watermark_timestamp_seconds", Help: "A stream's event-time watermark (seconds since the epoch).",
		}, []string{"stream"}),
		WatermarkLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turbine_watermark_lag_seconds", Help: "Wall clock minus the stream's watermark, in seconds.",
		}, []string{"stream"}),
		BatchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "turbine_batch_duration_seconds", Help: "Time to process one fetched batch, commit included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"stream"}),
		OpenGroups: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turbine_open_groups", Help: "Open (key, window) groups held by a stream, per input partition.",
		}, []string{"stream", "partition"}),
		RecoveredTimers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_recovered_due_timers_total", Help: "Windows already due when a stream started (closed at once).",
		}, []string{"stream"}),
		ExpiredGroups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_expired_groups_total", Help: "Groups of an upsert stream forgotten by state_ttl (each wrote a tombstone).",
		}, []string{"stream"}),
		HeldRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_held_rows_total", Help: "Rows of windows whose groups left memory, held and folded together at the commit instead of going to the grouper.",
		}, []string{"stream"}),
		StateRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_state_runs_total", Help: "Runs of partials (one table per window a commit wrote partials of) ingested into the state store.",
		}, []string{"stream"}),
		StateFolds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_state_folds_total", Help: "Windows whose stored partials a commit folded into one run of one partial per group (at the window's bound on runs, or after many classic partials).",
		}, []string{"stream"}),
		CombineLatePartials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "turbine_combine_late_partials_total", Help: "Partial accumulators that reached a combine merge stage after their window closed and were copies of what the pane holds (shipped again): dropped. One carrying rows the pane never had counts them in turbine_late_rows_total.",
		}, []string{"stream"}),
		CombineLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turbine_combine_min_watermark_lag_seconds", Help: "Wall clock minus the event time of the slowest source partition a combine merge stage waits on (named by label), in seconds.",
		}, []string{"stream", "source_partition"}),
		IdlePartitions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "turbine_idle_partitions", Help: "Input partitions idle (nothing to read for idle_timeout) and not holding the watermark back.",
		}, []string{"stream"}),
	}
	m.ConsumerLag = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "turbine_input_lag_records", Help: "Records of an input partition not read yet (log end offset minus next offset), per stream (or hop), topic read and partition.",
	}, []string{"stream", "topic", "partition"})
	reg.MustRegister(m.ConsumerLag)
	m.KeyPlacement = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "turbine_partition_key_placement",
		Help: "Whether an input partition's records sit where murmur2 puts their partition key: -1 misplaced (durable), 0 nothing to say yet, 1 looks right.",
	}, []string{"stream", "topic", "partition"})
	reg.MustRegister(m.KeyPlacement)
	m.RestoredRecords = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turbine_changelog_restored_records_total", Help: "Changelog records applied to local state when a task opened on a disk that was behind.",
	}, []string{"stream"})
	m.RestoreRemaining = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "turbine_changelog_restore_remaining_records", Help: "Changelog records a restoring task has yet to apply (0 once it runs).",
	}, []string{"stream", "partition"})
	m.StandbyRecords = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turbine_standby_applied_records_total", Help: "Changelog records applied to standby copies of partitions other processes run (--standby-replicas).",
	}, []string{"stream"})
	reg.MustRegister(m.RestoredRecords, m.RestoreRemaining, m.StandbyRecords)
	m.RepRecordsOut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turbine_repartition_records_out_total", Help: "Records a repartition hop wrote, per internal partition: one dominant partition is a hot key.",
	}, []string{"hop", "partition"})
	m.RepBytesOut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turbine_repartition_bytes_out_total", Help: "Value bytes a repartition hop wrote, per internal partition.",
	}, []string{"hop", "partition"})
	m.RepNullKeys = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turbine_repartition_null_keys_total", Help: "Rows a repartition hop re-emitted without a value in the column it re-keys by (one group, on partition 0).",
	}, []string{"hop"})
	m.CombinePartialsOut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turbine_combine_partials_out_total", Help: "Partial accumulators a combine's pre-aggregation shipped, per internal partition.",
	}, []string{"stream", "partition"})
	m.CombineBytesOut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turbine_combine_bytes_out_total", Help: "Bytes of partial accumulators a combine's pre-aggregation shipped, per internal partition.",
	}, []string{"stream", "partition"})
	m.CombineMarkersOut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "turbine_combine_markers_out_total", Help: "Watermark markers a combine's pre-aggregation sent to its merge stage.",
	}, []string{"stream"})
	m.late = newLateLog()
	m.hops = &hopLag{lag: m.ConsumerLag, names: map[string]bool{}}
	reg.MustRegister(m.RepRecordsOut, m.RepBytesOut, m.RepNullKeys, m.CombinePartialsOut, m.CombineBytesOut, m.CombineMarkersOut, m.hops)
	reg.MustRegister(m.RecordsIn, m.RecordsOut, m.LateRows, m.DecodeErrors, m.NullEventTime, m.Watermark, m.WatermarkLag, m.BatchSeconds, m.OpenGroups,
		m.RecoveredTimers, m.ExpiredGroups, m.HeldRows, m.StateRuns, m.StateFolds, m.IdlePartitions, m.CombineLatePartials, m.CombineLag)
	return m
}

// Forget drops a dropped stream's series.
func (m *Metrics) Forget(stream string) {
	l := prometheus.Labels{"stream": stream}
	m.RecordsIn.DeletePartialMatch(l)
	m.StandbyRecords.DeletePartialMatch(l)
	m.RecordsOut.DeletePartialMatch(l)
	m.LateRows.DeletePartialMatch(l)
	m.DecodeErrors.DeletePartialMatch(l)
	m.NullEventTime.DeletePartialMatch(l)
	m.Watermark.DeletePartialMatch(l)
	m.WatermarkLag.DeletePartialMatch(l)
	m.BatchSeconds.DeletePartialMatch(l)
	m.OpenGroups.DeletePartialMatch(l)
	m.RecoveredTimers.DeletePartialMatch(l)
	m.ExpiredGroups.DeletePartialMatch(l)
	m.HeldRows.DeletePartialMatch(l)
	m.StateRuns.DeletePartialMatch(l)
	m.StateFolds.DeletePartialMatch(l)
	m.IdlePartitions.DeletePartialMatch(l)
	m.CombineLatePartials.DeletePartialMatch(l)
	m.CombineLag.DeletePartialMatch(l)
	m.ConsumerLag.DeletePartialMatch(l)
	m.KeyPlacement.DeletePartialMatch(l)
	m.CombinePartialsOut.DeletePartialMatch(l)
	m.CombineBytesOut.DeletePartialMatch(l)
	m.CombineMarkersOut.DeletePartialMatch(l)
}

// ForgetHop drops a stopped repartition hop's series.
func (m *Metrics) ForgetHop(hop string) {
	l := prometheus.Labels{"hop": hop}
	m.RepRecordsOut.DeletePartialMatch(l)
	m.RepBytesOut.DeletePartialMatch(l)
	m.RepNullKeys.DeletePartialMatch(l)
	m.ConsumerLag.DeletePartialMatch(prometheus.Labels{"stream": hop})
	m.hops.forget(hop)
}
