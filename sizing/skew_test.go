package sizing

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/turbinesql/turbinesql/state"
)

// capture is one capture event of the seed's chain: a store, a fixture.
type capture struct{ store, fixture string }

// captureKey is the seed's composite key.
func captureKey(c capture) string { return c.store + ":" + c.fixture }

// chainDay is a representative day of captures for a chain with one
// flagship superstore: 40 ordinary stores of 60 to 140 fixtures and store
// 42 with 2500, every fixture shot 5 to 15 times in the reset window. The
// flagship carries about a third of the day.
func chainDay(seed int64) []capture {
	rng := rand.New(rand.NewSource(seed))
	var out []capture
	addStore := func(store string, fixtures int) {
		for f := 0; f < fixtures; f++ {
			frames := 5 + rng.Intn(11)
			for i := 0; i < frames; i++ {
				out = append(out, capture{store, fmt.Sprintf("fx-%04d", f)})
			}
		}
	}
	for s := 1; s <= 40; s++ {
		addStore(fmt.Sprint(s), 60+rng.Intn(81))
	}
	addStore("42", 2500)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func check(t *testing.T, keys []string, n int, tolerance float64) *Report {
	t.Helper()
	s, err := NewSkew(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		s.Add([]byte(k))
	}
	r, err := s.Report(tolerance)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The count the seed's example sizes to (24) and a few others.
var counts = []int{4, 12, 24, 48}

// Seed verification 3: the composite key is flat.
func TestCompositeKeyIsFlat(t *testing.T) {
	day := chainDay(1)
	keys := make([]string, len(day))
	for i, c := range day {
		keys[i] = captureKey(c)
	}
	for _, n := range counts {
		r := check(t, keys, n, DefaultTolerance)
		if !r.Balanced || r.PeakToMean >= 1.2 || len(r.HotPartitions()) != 0 {
			t.Errorf("composite key on %d partitions: balanced %t, peak_to_mean %v, hot %v", n, r.Balanced, r.PeakToMean, r.HotPartitions())
		}
	}
}

// Seed verification 4: store_id alone is not flat: the flagship's
// partition is hot.
func TestStoreIDAloneIsHot(t *testing.T) {
	day := chainDay(1)
	keys := make([]string, len(day))
	flagship := 0
	for i, c := range day {
		keys[i] = c.store
		if c.store == "42" {
			flagship++
		}
	}
	for _, n := range counts {
		r := check(t, keys, n, DefaultTolerance)
		hot := r.HotPartitions()
		p42 := int(state.PartitionFor([]byte("42"), n))
		if r.Balanced || len(hot) == 0 || !contains(hot, p42) {
			t.Errorf("store_id on %d partitions: balanced %t, hot %v; want store 42's partition %d hot", n, r.Balanced, hot, p42)
		}
		if r.Hottest[0].Key != "42" || r.Hottest[0].Records != int64(flagship) || r.Hottest[0].Partition != p42 {
			t.Errorf("hottest key %+v, want store 42 with %d records on partition %d", r.Hottest[0], flagship, p42)
		}
		if r.LowCardinality != (41 < 10*n) || r.DistinctKeys != 41 {
			t.Errorf("41 stores on %d partitions: low cardinality %t, distinct %d", n, r.LowCardinality, r.DistinctKeys)
		}
	}
}

// Seed verification 5: placement is stable: every frame of one fixture
// routes to one partition, call after call and check after check; and it
// is Kafka's, not the seed's hashCode-style hash.
func TestPlacementIsStable(t *testing.T) {
	day := chainDay(2)
	for _, n := range counts {
		first := map[string]int32{}
		for _, c := range day {
			k := captureKey(c)
			p := state.PartitionFor([]byte(k), n)
			if q, ok := first[k]; ok && q != p {
				t.Fatalf("key %s placed on %d then %d of %d", k, q, p, n)
			}
			first[k] = p
		}
		// Two checks over the same keys count the same records per partition.
		s1, _ := NewSkew(n)
		s2, _ := NewSkew(n)
		per := make([]int64, n)
		for _, c := range day {
			k := []byte(captureKey(c))
			s1.Add(k)
			s2.Add(k)
			per[first[captureKey(c)]]++
		}
		r1, _ := s1.Report(0.2)
		r2, _ := s2.Report(0.2)
		for p := range per {
			if r1.Partitions[p].Records != per[p] || r2.Partitions[p].Records != per[p] {
				t.Fatalf("%d partitions, partition %d: %d and %d records, want %d", n, p, r1.Partitions[p].Records, r2.Partitions[p].Records, per[p])
			}
		}
	}
	// Kafka's Java client puts "42" on partition 0 of 4 (murmur2); the
	// seed's h*31+c hash would put it on partition ('4'*31+'2') % 4 = 2.
	if p := state.PartitionFor([]byte("42"), 4); p != 0 {
		t.Fatalf("murmur2 places 42 on %d of 4", p)
	}
}

// The hot bound is exact: a partition at exactly mean × (1 + tolerance) is
// not hot; one record more is.
func TestHotBoundIsExact(t *testing.T) {
	// Two partitions; find one key for each.
	var k0, k1 string
	for i := 0; k0 == "" || k1 == ""; i++ {
		k := fmt.Sprint("k", i)
		if state.PartitionFor([]byte(k), 2) == 0 {
			k0 = k
		} else {
			k1 = k
		}
	}
	keys := func(a, b int) []string {
		var out []string
		for i := 0; i < a; i++ {
			out = append(out, k0)
		}
		for i := 0; i < b; i++ {
			out = append(out, k1)
		}
		return out
	}
	// 6 and 4: mean 5, bound 5 × 1.2 = 6: not hot.
	r := check(t, keys(6, 4), 2, 0.2)
	if !r.Balanced || r.Partitions[0].RatioToMean != 1.2 || r.Partitions[1].RatioToMean != 0.8 || r.PeakToMean != 1.2 {
		t.Fatalf("6/4 at tolerance 0.2: %+v", r)
	}
	// 7 and 4: mean 5.5, bound 6.6: partition 0 is hot.
	r = check(t, keys(7, 4), 2, 0.2)
	if r.Balanced || !r.Partitions[0].Hot || r.Partitions[1].Hot || r.PeakToMean != 1.273 {
		t.Fatalf("7/4 at tolerance 0.2: %+v", r)
	}
	// Tolerance 0: anything above the mean is hot.
	r = check(t, keys(6, 5), 2, 0)
	if r.Balanced || !r.Partitions[0].Hot {
		t.Fatalf("6/5 at tolerance 0: %+v", r)
	}
}

func TestSkewNullsAndErrors(t *testing.T) {
	s, _ := NewSkew(3)
	s.Add(nil)
	if _, err := s.Report(0.2); !errors.Is(err, ErrNoKeys) {
		t.Fatalf("only NULL keys: %v", err)
	}
	s.Add([]byte("a"))
	r, err := s.Report(0.2)
	if err != nil || r.NullKeys != 1 || r.Records != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	msg, detail, hint := r.Summary("k of t")
	if !strings.Contains(msg, "balanced false") || !strings.Contains(detail, "NULL key") || !strings.Contains(hint, "too few for 3 partitions") {
		t.Fatalf("summary %q / %q / %q", msg, detail, hint)
	}
	if _, err := s.Report(-0.1); err == nil {
		t.Fatal("negative tolerance accepted")
	}
	if _, err := NewSkew(0); err == nil {
		t.Fatal("0 partitions accepted")
	}
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
