package sizing

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"

	"github.com/turbinesql/turbinesql/state"
)

// DefaultTolerance is how far above the mean a partition may carry before
// it is hot (the seed's 20%).
const DefaultTolerance = 0.2

// DefaultSample is how many records the skew check samples by default.
const DefaultSample = 100000

// keysPerPartition is the key cardinality per partition below which the
// check says the key has too few values for the count: with fewer than ten
// keys a partition, one key's share moves a partition's load by 10% or more
// and some partitions may get no key at all.
const keysPerPartition = 10

// hottestKeys is how many of the busiest keys the summary names.
const hottestKeys = 5

// ErrNoKeys is returned when nothing with a non-NULL key was sampled.
var ErrNoKeys = errors.New("no record with a non-NULL key was sampled")

// Skew counts sampled keys per partition, placing each one with murmur2 as
// Kafka's Java client does (state.PartitionFor), on a given partition count.
// The seed's own checker uses a Java-hashCode-style hash (h*31 + c) that no
// Kafka client uses; this one places keys where producers put them.
type Skew struct {
	n      int
	counts []int64
	keys   map[string]int64
	nulls  int64
	total  int64
}

// NewSkew starts a check over n partitions.
func NewSkew(n int) (*Skew, error) {
	if n < 1 {
		return nil, &InputError{"partitions", fmt.Sprintf("must be at least 1, got %d", n)}
	}
	return &Skew{n: n, counts: make([]int64, n), keys: map[string]int64{}}, nil
}

// Add counts one record by its key text (a NULL key is nil). NULL keys are
// counted apart: producers spread unkeyed records without a hash.
func (s *Skew) Add(key []byte) {
	if key == nil {
		s.nulls++
		return
	}
	s.counts[state.PartitionFor(key, s.n)]++
	s.keys[string(key)]++
	s.total++
}

// PartitionLoad is one partition's share of the sample: one SHOW SKEW row.
type PartitionLoad struct {
	Partition   int
	Records     int64
	RatioToMean float64 // records / mean, rounded to 3 decimals
	Hot         bool    // records > mean × (1 + tolerance)
}

// KeyShare is one key's share of the hashed records.
type KeyShare struct {
	Key       string
	Records   int64
	Share     float64 // of the hashed records, 0..1
	Partition int
}

// Report is the skew check's result.
type Report struct {
	Partitions     []PartitionLoad
	Records        int64 // records with a key, hashed
	NullKeys       int64
	Mean           float64 // hashed records per partition
	PeakToMean     float64 // busiest partition / mean, rounded to 3 decimals
	Balanced       bool    // no partition is hot
	DistinctKeys   int
	Hottest        []KeyShare // the busiest keys, most records first
	LowCardinality bool       // fewer than 10 distinct keys per partition
	Tolerance      float64
}

// Report computes the per-partition loads and the summary. tolerance must
// be finite and >= 0.
func (s *Skew) Report(tolerance float64) (*Report, error) {
	if math.IsNaN(tolerance) || math.IsInf(tolerance, 0) || tolerance < 0 {
		return nil, &InputError{"tolerance", "must be a number >= 0, got " + fmtFloat(tolerance)}
	}
	if s.total == 0 {
		return nil, ErrNoKeys
	}
	r := &Report{Records: s.total, NullKeys: s.nulls, DistinctKeys: len(s.keys), Tolerance: tolerance, Balanced: true}
	r.Mean = float64(s.total) / float64(s.n)
	// hot: records > total/n × (1 + tolerance), compared exactly as
	// records × n > total × (1 + tolerance), so a partition exactly at the
	// bound is not hot whatever the rounding of the mean.
	bound := new(big.Rat).Mul(new(big.Rat).SetInt64(s.total), new(big.Rat).Add(big.NewRat(1, 1), decimal(tolerance)))
	var peak int64
	for p, c := range s.counts {
		hot := new(big.Rat).SetInt64(c*int64(s.n)).Cmp(bound) > 0
		r.Partitions = append(r.Partitions, PartitionLoad{
			Partition:   p,
			Records:     c,
			RatioToMean: round3(float64(c) * float64(s.n) / float64(s.total)),
			Hot:         hot,
		})
		if hot {
			r.Balanced = false
		}
		peak = max(peak, c)
	}
	r.PeakToMean = round3(float64(peak) * float64(s.n) / float64(s.total))
	r.LowCardinality = len(s.keys) < keysPerPartition*s.n
	for k, c := range s.keys {
		r.Hottest = append(r.Hottest, KeyShare{Key: k, Records: c})
	}
	sort.Slice(r.Hottest, func(i, j int) bool {
		a, b := r.Hottest[i], r.Hottest[j]
		if a.Records != b.Records {
			return a.Records > b.Records
		}
		return a.Key < b.Key
	})
	if len(r.Hottest) > hottestKeys {
		r.Hottest = r.Hottest[:hottestKeys]
	}
	for i := range r.Hottest {
		h := &r.Hottest[i]
		h.Share = float64(h.Records) / float64(s.total)
		h.Partition = int(state.PartitionFor([]byte(h.Key), s.n))
	}
	return r, nil
}

// HotPartitions lists the hot partitions.
func (r *Report) HotPartitions() []int {
	var out []int
	for _, p := range r.Partitions {
		if p.Hot {
			out = append(out, p.Partition)
		}
	}
	return out
}

// Summary is the check's verdict in words: a one-line message, a detail
// with the figures and the hottest keys, and a hint (empty when there is
// nothing to suggest). what names the key, e.g. "store_id of captures".
func (r *Report) Summary(what string) (message, detail, hint string) {
	message = fmt.Sprintf("skew of %s on %d partitions: peak_to_mean_ratio %s, balanced %t",
		what, len(r.Partitions), fmtFloat(r.PeakToMean), r.Balanced)
	if hot := r.HotPartitions(); len(hot) > 0 {
		message += fmt.Sprintf(" (hot: %s, more than %s%% above the mean)", joinInts(hot), fmtFloat(r.Tolerance*100))
	}
	d := fmt.Sprintf("%d records hashed with murmur2, mean %.1f per partition, %d distinct keys", r.Records, r.Mean, r.DistinctKeys)
	if r.NullKeys > 0 {
		d += fmt.Sprintf("; %d records with a NULL key not counted (producers spread them without a hash)", r.NullKeys)
	}
	var hk []string
	for _, h := range r.Hottest {
		hk = append(hk, fmt.Sprintf("%s %.1f%% (partition %d)", strconv.Quote(h.Key), h.Share*100, h.Partition))
	}
	d += "; hottest keys: " + strings.Join(hk, ", ")
	if r.LowCardinality {
		hint = fmt.Sprintf("%d distinct keys is too few for %d partitions (fewer than %d a partition): reduce the partition count so the keys comfortably exceed it, or key on a column of higher cardinality",
			r.DistinctKeys, len(r.Partitions), keysPerPartition)
	}
	return message, d, hint
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
