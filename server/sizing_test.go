package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/state"
)

// flagshipCapture is one record of the produced data set.
type flagshipCapture struct {
	store   *string // nil: a record without a store (NULL key)
	fixture string
	frame   int
	ts      int64 // event time, ms
}

// flagshipDay is a chain's reset window: 30 ordinary stores of 100
// fixtures and flagship store 42 with 3000, two frames a fixture, plus a
// few captures with no store. Frames are spread over one minute of event
// time, with a burst in second 30.
func flagshipDay() []flagshipCapture {
	rng := rand.New(rand.NewSource(17))
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	var out []flagshipCapture
	add := func(store *string, fixtures int) {
		for f := 0; f < fixtures; f++ {
			for fr := 0; fr < 2; fr++ {
				sec := int64(rng.Intn(60))
				if rng.Intn(10) == 0 {
					sec = 30
				}
				out = append(out, flagshipCapture{store, fmt.Sprintf("fx-%d", f), fr, base + sec*1000 + int64(rng.Intn(1000))})
			}
		}
	}
	for s := 1; s <= 30; s++ {
		id := fmt.Sprint(s)
		add(&id, 100)
	}
	flagship := "42"
	add(&flagship, 3000)
	add(nil, 25)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// expectedSkew is the test's own computation of a skew row set: murmur2
// placement straight from state.PartitionFor, the mean, the ratios and the
// hot bound, written out here rather than taken from package sizing.
func expectedSkew(counts []int64, tolerance float64) (rows []string, peakToMean float64) {
	var total, peak int64
	for _, c := range counts {
		total += c
		peak = max(peak, c)
	}
	mean := float64(total) / float64(len(counts))
	for p, c := range counts {
		hot := "f"
		if float64(c) > mean*(1+tolerance) {
			hot = "t"
		}
		rows = append(rows, fmt.Sprintf("%d %d %s %s", p, c, fmtRatio(float64(c)/mean), hot))
	}
	return rows, math.Round(float64(peak)/mean*1000) / 1000
}

func fmtRatio(f float64) string { return fmt.Sprint(math.Round(f*1000) / 1000) }

// TestShowSkewFlagship produces the flagship data set with an ordinary
// Kafka producer (franz-go's default partitioner: murmur2 on the record
// key, as Kafka's Java client), then checks SHOW SKEW against where the
// records actually are, and against counts computed here for other keys
// and counts; and SHOW SIZING FOR against the rate and sizes measured here.
func TestShowSkewFlagship(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	conn := connectNotices(ctx, t, srv)
	defer conn.Close(ctx)
	// query runs q and returns its rows as space-joined text, and the
	// notices it raised.
	query := func(q string) ([]string, []*pgconn.Notice) {
		t.Helper()
		conn.takeNotices()
		rows, err := conn.Query(ctx, q, pgx.QueryResultFormats{pgx.TextFormatCode})
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		var out []string
		for rows.Next() {
			var vals []string
			for _, v := range rows.RawValues() {
				vals = append(vals, string(v))
			}
			out = append(out, strings.Join(vals, " "))
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return out, conn.takeNotices()
	}
	if _, err := conn.Exec(ctx, `CREATE SOURCE captures (store_id TEXT, fixture_id TEXT, frame BIGINT, ts TIMESTAMP,
		WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) WITH (topic = 'captures', partitions = 6, partition_key = 'store_id')`); err != nil {
		t.Fatal(err)
	}

	day := flagshipDay()
	prod, err := kgo.NewClient(kgo.SeedBrokers(srv.KafkaAddrs()...), kgo.DefaultProduceTopic("captures"))
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	var bytes int64
	perSecond := map[int64]int64{}
	for _, c := range day {
		v, _ := json.Marshal(map[string]any{"store_id": c.store, "fixture_id": c.fixture, "frame": c.frame, "ts": c.ts})
		r := &kgo.Record{Value: v}
		if c.store != nil {
			r.Key = []byte(*c.store)
		}
		recs = append(recs, r)
		bytes += int64(len(r.Key) + len(r.Value))
		perSecond[c.ts/1000]++
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	prod.Close()

	// Where the producer put the keyed records, read back from the topic.
	placed := make([]int64, 6)
	if err := srv.kafka.ReadAll(ctx, "captures", func(r *kgo.Record) error {
		if r.Key != nil {
			placed[r.Partition]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// 1. The partition key at the topic's count: exactly the topic's
	// per-partition counts of keyed records.
	got, ns := query("SHOW SKEW FOR captures")
	want, peak := expectedSkew(placed, 0.2)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("SHOW SKEW FOR captures:\n%s\nwant (the topic's own counts):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(ns) != 2 {
		t.Fatalf("%d notices, want a summary and a suggestion: %+v", len(ns), ns)
	}
	flagshipShare := 6000.0 / float64(len(day)-50) * 100
	if m, d := ns[0].Message, ns[0].Detail; !strings.Contains(m, fmt.Sprintf("peak_to_mean_ratio %v, balanced false", peak)) ||
		!strings.Contains(d, fmt.Sprintf(`"42" %.1f%% (partition %d)`, flagshipShare, state.PartitionFor([]byte("42"), 6))) ||
		!strings.Contains(d, "50 records with a NULL key") {
		t.Fatalf("summary notice %q / %q", m, d)
	}
	if !strings.Contains(ns[1].Message, "store_id || ':' || fixture_id") {
		t.Fatalf("suggestion %q, want the composite with fixture_id (the highest cardinality)", ns[1].Message)
	}

	// 2. The suggested composite, at the topic's count and at 12: flat.
	// Counts computed here from the data set.
	countBy := func(key func(flagshipCapture) string, n int) []int64 {
		out := make([]int64, n)
		for _, c := range day {
			if c.store != nil {
				out[state.PartitionFor([]byte(key(c)), n)]++
			}
		}
		return out
	}
	composite := func(c flagshipCapture) string { return *c.store + ":" + c.fixture }
	got, ns = query("SHOW SKEW FOR captures BY store_id || ':' || fixture_id")
	want, peak = expectedSkew(countBy(composite, 6), 0.2)
	if strings.Join(got, "\n") != strings.Join(want, "\n") || peak >= 1.2 {
		t.Fatalf("composite on 6:\n%s\nwant:\n%s (peak %v)", strings.Join(got, "\n"), strings.Join(want, "\n"), peak)
	}
	if len(ns) != 1 || !strings.Contains(ns[0].Message, "balanced true") {
		t.Fatalf("composite notices %+v", ns)
	}
	// The suggestion's figure is what the check of the composite says.
	_, sug := query("SHOW SKEW FOR captures")
	if !strings.Contains(sug[1].Message, fmt.Sprintf("peak_to_mean_ratio %v, balanced true", peak)) {
		t.Fatalf("suggestion %q, want peak_to_mean_ratio %v", sug[1].Message, peak)
	}
	got, _ = query("SHOW SKEW FOR captures BY store_id || ':' || fixture_id WITH (partitions = 12)")
	want, peak = expectedSkew(countBy(composite, 12), 0.2)
	if strings.Join(got, "\n") != strings.Join(want, "\n") || peak >= 1.2 {
		t.Fatalf("composite on 12:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// 3. store_id alone at another count and tolerance: still hot.
	got, _ = query("SHOW SKEW FOR captures BY store_id WITH (partitions = 24, tolerance = 0.5, sample = 1000000)")
	want, _ = expectedSkew(countBy(func(c flagshipCapture) string { return *c.store }, 24), 0.5)
	if strings.Join(got, "\n") != strings.Join(want, "\n") || !strings.HasSuffix(got[state.PartitionFor([]byte("42"), 24)], " t") {
		t.Fatalf("store_id on 24:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// 4. SHOW SIZING FOR: the busiest second of event time and the mean
	// record size, measured here from what was produced. A tiny
	// per-partition ceiling makes throughput drive.
	var peakSec int64
	for _, n := range perSecond {
		peakSec = max(peakSec, n)
	}
	kb := float64(bytes) / float64(len(day)) / 1024
	mbs := float64(peakSec) * kb / 1024
	got, ns = query("SHOW SIZING FOR captures WITH (target_consumers = 3, per_partition_mb_s = 0.01)")
	thru := int64(math.Ceil(mbs / 0.01))
	rec := int64(math.Ceil(float64(thru) * 1.5))
	if len(got) != 1 {
		t.Fatalf("SHOW SIZING FOR: %q", got)
	}
	var gotMBs float64
	var gotThru, gotPar, gotRec, gotValid int64
	var gotHead float64
	var driver string
	if _, err := fmt.Sscan(got[0], &gotMBs, &gotThru, &gotPar, &gotHead, &gotRec, &gotValid, &driver); err != nil {
		t.Fatalf("%q: %v", got[0], err)
	}
	if math.Abs(gotMBs-mbs) > 0.005 || gotThru != thru || gotPar != 3 || gotHead != 1.5 || gotRec != rec || driver != "throughput" ||
		gotValid < rec || 960%gotValid != 0 || gotValid%3 != 0 {
		t.Fatalf("SHOW SIZING FOR: %q; want peak %.2f MiB/s (%d events/s × %.4f KiB), %d throughput partitions, recommended %d", got[0], mbs, peakSec, kb, thru, rec)
	}
	if len(ns) != 1 || !strings.Contains(ns[0].Message, fmt.Sprintf("peak_events_per_sec = %d (measured)", peakSec)) ||
		!strings.Contains(ns[0].Message, "target_consumers = 3 (given)") || !strings.Contains(ns[0].Message, "headroom = 1.5 (default)") ||
		!strings.Contains(ns[0].Detail, fmt.Sprintf("(%d bytes in %d records)", bytes, len(day))) {
		t.Fatalf("inputs notice %+v", ns)
	}
}
