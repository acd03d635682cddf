package sizing

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func mustSize(t *testing.T, in Inputs) Plan {
	t.Helper()
	p, err := Size(in)
	if err != nil {
		t.Fatalf("Size(%+v): %v", in, err)
	}
	return p
}

// The seed's example: 4200 events/s of 18 KiB, 12 consumers.
func TestSizeSeedExample(t *testing.T) {
	p := mustSize(t, Inputs{PeakEventsPerSec: 4200, AvgRecordKB: 18, PerPartitionMBs: 10, TargetConsumers: 12, Headroom: 1.5})
	want := Plan{PeakMBs: 73.83, ThroughputPartitions: 8, ParallelismPartitions: 12, Headroom: 1.5, Recommended: 18, RecommendedValid: 24, Driver: DriverParallelism}
	if p.PeakMBs != want.PeakMBs || p.ThroughputPartitions != want.ThroughputPartitions || p.ParallelismPartitions != want.ParallelismPartitions ||
		p.Headroom != want.Headroom || p.Recommended != want.Recommended || p.RecommendedValid != want.RecommendedValid || p.Driver != want.Driver || len(p.Notices) != 0 {
		t.Fatalf("got %+v, want %+v", p, want)
	}
}

// Seed verification 1: with a tiny peak, the consumer count drives.
func TestParallelismFloor(t *testing.T) {
	p := mustSize(t, Inputs{PeakEventsPerSec: 1, AvgRecordKB: 0.5, PerPartitionMBs: 10, TargetConsumers: 12, Headroom: 1.5})
	if p.Recommended < 12 || p.Driver != DriverParallelism || p.ThroughputPartitions != 1 {
		t.Fatalf("tiny peak, 12 consumers: %+v; want recommended >= 12 driven by parallelism, throughput floor 1", p)
	}
	if p.Recommended != 18 || p.RecommendedValid != 24 {
		t.Fatalf("recommended %d valid %d, want 18 and 24", p.Recommended, p.RecommendedValid)
	}
}

// Seed verification 2: with 2 consumers and a peak that needs 9
// partitions, throughput drives, with recommended >= ceil(9 × headroom).
func TestThroughputFloor(t *testing.T) {
	// 5000 events/s × 18 KiB = 87.89 MiB/s: 9 partitions of 10 MiB/s.
	p := mustSize(t, Inputs{PeakEventsPerSec: 5000, AvgRecordKB: 18, PerPartitionMBs: 10, TargetConsumers: 2, Headroom: 1.5})
	if p.ThroughputPartitions != 9 || p.Driver != DriverThroughput {
		t.Fatalf("got %+v, want 9 throughput partitions driving", p)
	}
	if p.Recommended < int64(math.Ceil(9*1.5)) || p.Recommended != 14 {
		t.Fatalf("recommended %d, want ceil(9 × 1.5) = 14", p.Recommended)
	}
	if p.PeakMBs != 87.89 || p.RecommendedValid != 16 {
		t.Fatalf("peak %v valid %d, want 87.89 and 16 (the smallest divisor of 960 >= 14 that 2 divides)", p.PeakMBs, p.RecommendedValid)
	}
}

// The arithmetic is on the decimals as written: 10 × 1.1 is 11, though
// 10 * 1.1 in floating point is 11.000000000000002.
func TestSizeExactDecimals(t *testing.T) {
	p := mustSize(t, Inputs{PeakEventsPerSec: 1, AvgRecordKB: 1, PerPartitionMBs: 10, TargetConsumers: 10, Headroom: 1.1})
	if p.Recommended != 11 {
		t.Fatalf("10 consumers × 1.1: recommended %d, want 11", p.Recommended)
	}
	// 1024 events/s of 10 KiB is exactly 10 MiB/s: one partition, not two.
	p = mustSize(t, Inputs{PeakEventsPerSec: 1024, AvgRecordKB: 10, PerPartitionMBs: 10, TargetConsumers: 1, Headroom: 1})
	if p.ThroughputPartitions != 1 || p.Recommended != 1 || p.RecommendedValid != 1 || p.Driver != DriverThroughput {
		t.Fatalf("exactly one partition's worth: %+v", p)
	}
	// 0.1 × 0.3 / 1024 MiB/s ... rounds to 0.00 but still needs one partition.
	p = mustSize(t, Inputs{PeakEventsPerSec: 0.1, AvgRecordKB: 0.3, PerPartitionMBs: 10, TargetConsumers: 1, Headroom: 1})
	if p.PeakMBs != 0 || p.ThroughputPartitions != 1 {
		t.Fatalf("tiny: %+v", p)
	}
	// Half-up rounding of the peak: 1.005 MiB/s is 1029.12 events of 1 KiB.
	p = mustSize(t, Inputs{PeakEventsPerSec: 1029.12, AvgRecordKB: 1, PerPartitionMBs: 10, TargetConsumers: 1, Headroom: 1})
	if p.PeakMBs != 1.01 {
		t.Fatalf("1.005 MiB/s printed as %v, want 1.01", p.PeakMBs)
	}
}

func TestValidCount(t *testing.T) {
	cases := []struct {
		rec, consumers, want int64
		note                 string
	}{
		{18, 12, 24, ""},
		{14, 2, 16, ""},
		{13, 1, 15, ""},
		{1, 1, 1, ""},
		{960, 5, 960, ""},
		{100, 16, 160, ""},
		{18, 7, 20, "multiple of 7 consumers"}, // no divisor of 960 is a multiple of 7
		{500, 9, 960, "multiple of 9"},         // 9 does not divide 960 either
		{961, 12, 960, "above 960"},
		{5000, 1, 960, "above 960"},
	}
	for _, c := range cases {
		got, note := ValidCount(c.rec, c.consumers)
		if got != c.want || (c.note == "") != (note == "") || !strings.Contains(note, c.note) {
			t.Errorf("ValidCount(%d, %d) = %d, %q; want %d, a note with %q", c.rec, c.consumers, got, note, c.want, c.note)
		}
		if 960%got != 0 {
			t.Errorf("ValidCount(%d, %d) = %d does not divide 960", c.rec, c.consumers, got)
		}
	}
}

func TestSizeAbove960Notices(t *testing.T) {
	p := mustSize(t, Inputs{PeakEventsPerSec: 1e6, AvgRecordKB: 20, PerPartitionMBs: 10, TargetConsumers: 4, Headroom: 1.5})
	if p.ThroughputPartitions != 1954 || p.Recommended != 2931 || p.RecommendedValid != 960 || len(p.Notices) != 1 || !strings.Contains(p.Notices[0], "above 960") {
		t.Fatalf("%+v", p)
	}
}

func TestValidate(t *testing.T) {
	good := Inputs{PeakEventsPerSec: 1, AvgRecordKB: 1, PerPartitionMBs: 10, TargetConsumers: 1, Headroom: 1}
	bad := []struct {
		field string
		mod   func(*Inputs)
	}{
		{"peak_events_per_sec", func(in *Inputs) { in.PeakEventsPerSec = 0 }},
		{"peak_events_per_sec", func(in *Inputs) { in.PeakEventsPerSec = -5 }},
		{"peak_events_per_sec", func(in *Inputs) { in.PeakEventsPerSec = math.Inf(1) }},
		{"avg_record_kb", func(in *Inputs) { in.AvgRecordKB = 0 }},
		{"avg_record_kb", func(in *Inputs) { in.AvgRecordKB = math.NaN() }},
		{"per_partition_mb_s", func(in *Inputs) { in.PerPartitionMBs = -1 }},
		{"target_consumers", func(in *Inputs) { in.TargetConsumers = 0 }},
		{"headroom", func(in *Inputs) { in.Headroom = 0.99 }},
		{"headroom", func(in *Inputs) { in.Headroom = math.NaN() }},
		{"", func(in *Inputs) { in.PeakEventsPerSec = 1e300; in.AvgRecordKB = 1e10 }},
	}
	for _, b := range bad {
		in := good
		b.mod(&in)
		_, err := Size(in)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != b.field {
			t.Errorf("%+v: got %v, want an InputError on %q", in, err, b.field)
		}
	}
	if _, err := Size(good); err != nil {
		t.Fatal(err)
	}
}
