// Package sizing is the arithmetic of partition sizing and the skew check of
// a partition key (seed: sizing-kafka-partitions), with the 960-divisor rule
// of keyed state (seed: kafka-and-partitioning). It does no I/O: the server
// and the offline commands feed it inputs and sampled keys.
package sizing

import (
	"fmt"
	"math"
	"math/big"
	"strconv"

	"github.com/turbinesql/turbinesql/state"
)

// Defaults of the inputs the seed gives a default to.
const (
	DefaultPerPartitionMBs = 10.0
	DefaultHeadroom        = 1.5
)

// maxPartitions bounds every count the calculator returns, so that absurd
// inputs are refused instead of overflowing.
const maxPartitions = 1_000_000_000_000

// Inputs of the calculator. Each float is taken as the shortest decimal
// that prints it (1.1 is 11/10, not the binary double nearest to it), and
// the arithmetic on those decimals is exact: 10 consumers with headroom 1.1
// recommend 11 partitions, where ceil(10 * 1.1) in floating point is 12.
type Inputs struct {
	PeakEventsPerSec float64 // the measured peak, not the mean
	AvgRecordKB      float64 // average record size, KiB
	PerPartitionMBs  float64 // what one partition and one consumer absorb, MiB/s
	TargetConsumers  int64   // the most consumers the group will run
	Headroom         float64 // factor over the larger requirement, >= 1
}

// InputError refuses one input. Field is the input's option name
// (peak_events_per_sec, ...), empty when the inputs together are refused.
type InputError struct {
	Field  string
	Reason string
}

func (e *InputError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + " " + e.Reason
}

// Validate refuses what the seed refuses: non-positive rates and sizes,
// fewer than one consumer, headroom below 1; and values that are not finite.
func (in Inputs) Validate() error {
	positive := []struct {
		name string
		v    float64
	}{
		{"peak_events_per_sec", in.PeakEventsPerSec},
		{"avg_record_kb", in.AvgRecordKB},
		{"per_partition_mb_s", in.PerPartitionMBs},
	}
	for _, p := range positive {
		if math.IsNaN(p.v) || math.IsInf(p.v, 0) {
			return &InputError{p.name, "must be a finite number, got " + fmtFloat(p.v)}
		}
		if p.v <= 0 {
			return &InputError{p.name, "must be positive, got " + fmtFloat(p.v)}
		}
	}
	if in.TargetConsumers < 1 {
		return &InputError{"target_consumers", fmt.Sprintf("must be at least 1, got %d", in.TargetConsumers)}
	}
	if math.IsNaN(in.Headroom) || math.IsInf(in.Headroom, 0) {
		return &InputError{"headroom", "must be a finite number, got " + fmtFloat(in.Headroom)}
	}
	if in.Headroom < 1 {
		return &InputError{"headroom", "must be at least 1, got " + fmtFloat(in.Headroom)}
	}
	return nil
}

// Driver names the requirement that sets the count.
const (
	DriverThroughput  = "throughput"
	DriverParallelism = "parallelism"
)

// Plan is the calculator's answer, one SHOW SIZING row.
type Plan struct {
	PeakMBs               float64 // events/s × KiB / 1024, rounded to 2 decimals
	ThroughputPartitions  int64   // ceil(peak MiB/s / per-partition ceiling), at least 1
	ParallelismPartitions int64   // the consumer count
	Headroom              float64
	Recommended           int64  // ceil(max(throughput, parallelism) × headroom)
	RecommendedValid      int64  // see ValidCount
	Driver                string // DriverThroughput or DriverParallelism
	// Notices explain a RecommendedValid that does not do all it should:
	// capped at 960, or not a multiple of the consumer count.
	Notices []string
}

// Size runs the seed's calculator: the larger of the throughput and the
// parallelism requirement, times headroom, then the count keyed state can
// rescale to (ValidCount).
func Size(in Inputs) (Plan, error) {
	if err := in.Validate(); err != nil {
		return Plan{}, err
	}
	peak := new(big.Rat).Mul(decimal(in.PeakEventsPerSec), decimal(in.AvgRecordKB))
	peak.Quo(peak, big.NewRat(1024, 1))
	thru := ceilRat(new(big.Rat).Quo(peak, decimal(in.PerPartitionMBs)))
	if thru.Sign() <= 0 {
		thru.SetInt64(1)
	}
	par := big.NewInt(in.TargetConsumers)
	larger, driver := thru, DriverThroughput
	if thru.Cmp(par) < 0 { // the seed: throughput drives on a tie
		larger, driver = par, DriverParallelism
	}
	rec := ceilRat(new(big.Rat).Mul(new(big.Rat).SetInt(larger), decimal(in.Headroom)))
	if !thru.IsInt64() || thru.Int64() > maxPartitions || !rec.IsInt64() || rec.Int64() > maxPartitions {
		return Plan{}, &InputError{Reason: fmt.Sprintf("the inputs call for more than %d partitions", int64(maxPartitions))}
	}
	p := Plan{
		PeakMBs:               round2(peak),
		ThroughputPartitions:  thru.Int64(),
		ParallelismPartitions: in.TargetConsumers,
		Headroom:              in.Headroom,
		Recommended:           rec.Int64(),
		Driver:                driver,
	}
	var note string
	p.RecommendedValid, note = ValidCount(p.Recommended, in.TargetConsumers)
	if note != "" {
		p.Notices = append(p.Notices, note)
	}
	return p, nil
}

// ValidCount is the partition count to create for a keyed stateful stream
// that should have at least recommended partitions read by consumers: the
// smallest divisor of 960 that is at least recommended and a multiple of
// consumers (so that partitions assign in equal shares); failing that the
// smallest divisor at least recommended; above 960, 960. note explains the
// last two cases and is empty otherwise.
func ValidCount(recommended, consumers int64) (count int64, note string) {
	if recommended > state.KeyGroups {
		return state.KeyGroups, fmt.Sprintf("recommended %d partitions is above 960, the largest count keyed state can be rescaled to: recommended_valid is 960, which is short of the requirement; raise per_partition_mb_s (faster consumers) or split the topic", recommended)
	}
	first := int64(0)
	for _, v := range state.ValidCounts() {
		n := int64(v)
		if n < recommended {
			continue
		}
		if first == 0 {
			first = n
		}
		if n%consumers == 0 {
			return n, ""
		}
	}
	return first, fmt.Sprintf("no divisor of 960 from %d up is a multiple of %d consumers: recommended_valid %d is the smallest divisor of 960 from %d up, and its partitions do not split evenly among the consumers", recommended, consumers, first, recommended)
}

// decimal is f as the shortest decimal that prints it, exactly.
func decimal(f float64) *big.Rat {
	r, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	if !ok { // FormatFloat of a finite float always parses
		panic("sizing: cannot read back " + strconv.FormatFloat(f, 'g', -1, 64))
	}
	return r
}

// ceilRat is the least integer >= r.
func ceilRat(r *big.Rat) *big.Int {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 { // DivMod is Euclidean: m >= 0, q is the floor
		q.Add(q, big.NewInt(1))
	}
	return q
}

// round2 rounds r to 2 decimals, halves away from zero (r >= 0 here).
func round2(r *big.Rat) float64 {
	x := new(big.Rat).Mul(r, big.NewRat(100, 1))
	x.Add(x, big.NewRat(1, 2))
	q := new(big.Int).Div(x.Num(), x.Denom()) // floor, x > 0
	f, _ := new(big.Rat).SetFrac(q, big.NewInt(100)).Float64()
	return f
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
