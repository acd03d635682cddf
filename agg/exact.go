package agg

// MergesExactly reports whether f's result is the same, bit for bit,
// however its rows were split into partial accumulators and in whatever
// order those were merged. That is what lets a group's new rows be folded
// into a fresh partial, written beside the stored accumulator and merged
// with it only when the group is read (exec's blind writes), without
// changing any pane.
//
// Only accumulators whose merge is exact arithmetic or a comparison with
// no ties qualify: COUNT, BIGINT SUM and AVG (128-bit sums), MIN and MAX
// of all but DOUBLE (-0 and +0 tie, and the first seen wins), BOOL_AND
// and BOOL_OR, and the BIGINT variance family (exact integer moments).
// Floating-point sums and moments, CORR and the covariances, the t-digest,
// APPROX_COUNT_DISTINCT (its merge tests check the estimate, not the
// sketch, so it is left out until they do), DISTINCT sets,
// STRING_AGG, ARRAY_AGG, FIRST/LAST and ARG_MIN/ARG_MAX do not: their
// merged results are equal within an error, depend on order, or cost a
// set per group.
func MergesExactly(f Func) bool {
	switch x := f.(type) {
	case *count, *sumInt, *minMaxInt, *minMaxText, *boolAgg, *varInt:
		return true
	case *avg:
		return x.isInt
	}
	return false
}
