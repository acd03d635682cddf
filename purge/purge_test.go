package purge

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"testing"
)

func TestPoint(t *testing.T) {
	got := Point([]map[int32]int64{
		{0: 10, 1: 5, 2: 7, 3: 4},
		{0: 3, 1: 9, 3: -1},
	})
	want := map[int32]int64{0: 3, 1: 5} // 2: the second reader has none; 3: negative
	if !maps.Equal(got, want) {
		t.Fatalf("Point = %v, want %v", got, want)
	}
	if got := Point(nil); len(got) != 0 {
		t.Fatalf("no readers: %v", got)
	}
}

type fakeKafka struct {
	start   map[int32]int64
	groups  map[string]map[int32]int64
	deleted map[int32]int64
}

func (f *fakeKafka) StartOffsets(context.Context, string) (map[int32]int64, error) {
	return maps.Clone(f.start), nil
}

func (f *fakeKafka) GroupOffsets(_ context.Context, g, _ string) (map[int32]int64, error) {
	return f.groups[g], nil
}

func (f *fakeKafka) DeleteRecordsBefore(_ context.Context, _ string, to map[int32]int64) (map[int32]int64, error) {
	f.deleted = maps.Clone(to)
	for p, o := range to {
		f.start[p] = o
	}
	return maps.Clone(to), nil
}

// TestRoundWaitsForReady: nothing is deleted while Ready says no; then
// each partition goes up to its slowest reader, never below its start.
func TestRoundWaitsForReady(t *testing.T) {
	k := &fakeKafka{start: map[int32]int64{0: 0, 1: 6}, groups: map[string]map[int32]int64{
		"a": {0: 10, 1: 5}, "b": {0: 4, 1: 8},
	}}
	ready := false
	p := &Purger{Kafka: k, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Targets: func() []Target {
		return []Target{{Topic: "t", Readers: []string{"a", "b"}, Ready: func(_ context.Context, n int64) (bool, error) {
			if n != 4 {
				t.Errorf("Ready told %d purgeable records, want 4", n)
			}
			return ready, nil
		}}}
	}}
	if n := p.Round(context.Background()); len(n) != 0 || k.deleted != nil {
		t.Fatalf("purged %v before ready", n)
	}
	ready = true
	n := p.Round(context.Background())
	if n["t"] != 4 || !maps.Equal(k.deleted, map[int32]int64{0: 4}) {
		t.Fatalf("purged %v, deleted %v; want 4 records of partition 0 only", n, k.deleted)
	}
}
