package dataflow

// What the operator tests (package dataflow_test, which drives operators
// through dataflow/optest) look at inside the operators.

// MarkerOf is the watermark marker a record carries, if any.
var MarkerOf = markerOf

// HeaderOf is a record's header of that key, if it has one.
var HeaderOf = header

// PartialFrom is the first byte of a partial that names its source
// partition (the previous release's form).
const PartialFrom = partialFrom

// MinSliceRuns is the fewest runs a HOP window's slice may take.
const MinSliceRuns = minSliceRuns

// SetEager makes the aggregation restore its whole state at Open, as a
// task without the group cache (an earlier release) does. Call it before
// the task opens.
func (h *HashAgg) SetEager(eager bool) { h.eager = eager }

// Cached reports whether the aggregation runs with the group cache.
func (h *HashAgg) Cached() bool { return h.cache != nil }

// BlindPartials is how many partials of blind groups the cache stored.
func (h *HashAgg) BlindPartials() uint64 { return h.cache.delta.Seq }

// SliceRuns is the bound on runs each window slice takes.
func (h *HashAgg) SliceRuns() int { return h.cache.pending.WindowRuns() }
