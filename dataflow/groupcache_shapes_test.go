package dataflow_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	. "github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/kafkaio"
)

// TestGroupCacheMetamorphicShapes is TestGroupCacheMetamorphic over other
// shapes than COUNT and SUM by a short key: keys longer than 16 bytes that
// share long prefixes (a held row keeps its key's first 16 bytes for the
// sort), NULLs in keys and arguments, two-column and computed keys, a
// WHERE, HAVING over a window, and the aggregates that merge exactly
// (written blind) beside those that do not (read back): DOUBLE sums,
// DISTINCT, FIRST_VALUE and LAST_VALUE, MAX_BY, approximate ones. With a
// 1 MB cache and an unlimited one, across a crash and a restart (the
// 1 MB run's on another node), every shape must emit the same records.
func TestGroupCacheMetamorphicShapes(t *testing.T) {
	queries := map[string]string{
		"tumble_blind": `CREATE STREAM s AS SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws,
			COUNT(*) AS n, COUNT(v) AS nv, SUM(v) AS total, AVG(v) AS mean, MIN(v) AS lo, MAX(v) AS hi,
			MIN(u) AS ulo, MAX(u) AS uhi, BOOL_OR(v > 90) AS big, BOOL_AND(v > 5) AS small,
			VAR_POP(v) AS var, STDDEV_SAMP(v) AS sd
			FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`,
		"tumble_read": `CREATE STREAM s AS SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws,
			SUM(v * 1.5) AS dsum, AVG(v * 0.1) AS dmean, COUNT(DISTINCT u) AS du,
			FIRST_VALUE(u) AS fu, LAST_VALUE(v) AS lv, MAX_BY(u, v) AS top, APPROX_COUNT_DISTINCT(u) AS adu
			FROM ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`,
		"hop_two_keys_having": `CREATE STREAM s AS SELECT k, u, HOP_END(ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND) AS we,
			COUNT(*) AS n, SUM(v) AS total, MAX(v) AS hi
			FROM ev WHERE v IS NULL OR v <> 13
			GROUP BY k, u, HOP(ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND) HAVING COUNT(*) > 1`,
		"tumble_computed_key": `CREATE STREAM s AS SELECT k, COALESCE(u, '-') || '/' || SUBSTRING(k, 1, 4) AS g,
			TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, SUM(v) AS total
			FROM ev GROUP BY k, COALESCE(u, '-') || '/' || SUBSTRING(k, 1, 4), TUMBLE(ts, INTERVAL '10' SECOND)`,
		"session_mixed": `CREATE STREAM s AS SELECT k, SESSION_START(ts, INTERVAL '3' SECOND) AS ss, SESSION_END(ts, INTERVAL '3' SECOND) AS se,
			COUNT(*) AS n, COUNT(DISTINCT u) AS du, MIN(u) AS ulo, SUM(v * 1.5) AS dsum, AVG(v) AS mean
			FROM ev GROUP BY k, SESSION(ts, INTERVAL '3' SECOND)`,
		"upsert_nullable_key": `CREATE STREAM s AS SELECT k, u, COUNT(*) AS n, SUM(v) AS total, COUNT(DISTINCT v) AS dv
			FROM ev GROUP BY k, u`,
		"upsert_long_key": `CREATE STREAM s AS SELECT k, COUNT(*) AS n, MIN(v) AS lo, MAX(u) AS uhi FROM ev GROUP BY k HAVING COUNT(*) % 3 <> 1`,
	}
	recs := shapeRecords(40000, 40000)
	for name, q := range queries {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in := inputOf(q, recs)
			small, smallMax, _ := runCachedOn(t, in, NewCacheBudget(1), runCachedOnly, 0, true)
			full, fullMax, _ := runCachedOn(t, in, nil, runCachedOnly, 0, false)
			if len(full) < 1000 {
				t.Fatalf("only %d records: the shape emits too little to compare", len(full))
			}
			if !slices.Equal(small, full) {
				t.Fatalf("1 MB cache: %d records, unlimited: %d; differences %s", len(small), len(full), firstDiff(small, full))
			}
			if smallMax*4 > fullMax*3 {
				t.Fatalf("1 MB cache held up to %d groups, unlimited %d: nothing was evicted", smallMax, fullMax)
			}
		})
	}
	// EMIT EVERY over the blind and the read path: early fires read what
	// left memory, and must send what an unlimited cache sends.
	for _, name := range []string{"tumble_blind", "tumble_read"} {
		t.Run(name+"_emit_every", func(t *testing.T) {
			t.Parallel()
			in := inputOf(queries[name], recs[:len(recs)/2])
			small, _, _ := runCachedOn(t, in, NewCacheBudget(1), runCachedOnly, 2*time.Second, true)
			full, _, _ := runCachedOn(t, in, nil, runCachedOnly, 2*time.Second, false)
			if len(full) == 0 {
				t.Fatal("no output")
			}
			if !slices.Equal(small, full) {
				t.Fatalf("1 MB cache: %d records, unlimited: %d; differences %s", len(small), len(full), firstDiff(small, full))
			}
		})
	}
}

// shapeRecords are n seeded records of ev over eventSeconds, up to 5 s out
// of order: keys of 20 to 40 bytes that share a 16-byte prefix or more
// (and some of 2), a fifth of the rows on 300 hot keys; u one of 40 values
// or NULL; v 0..99 or NULL.
func shapeRecords(keys, n int) []*kafkaio.Record {
	rng := rand.New(rand.NewPCG(11, 17))
	out := make([]*kafkaio.Record, n)
	for i := range out {
		sec := max(int64(i)*eventSeconds/int64(n)-rng.Int64N(5), 0)
		k := rng.IntN(keys)
		if rng.IntN(5) == 0 {
			k = rng.IntN(300)
		}
		var key string
		switch k % 7 {
		case 0:
			key = fmt.Sprintf("k%d", k%10) // short, few
		case 1:
			key = fmt.Sprintf("customer-000000000000000000-%d", k) // 16+ shared bytes
		default:
			key = fmt.Sprintf("customer-%012d-eu-west", k)
		}
		row := map[string]any{"k": key, "ts": sec * 1000}
		if rng.IntN(10) != 0 {
			row["u"] = fmt.Sprintf("u%02d", rng.IntN(40))
		} else {
			row["u"] = nil
		}
		if rng.IntN(8) != 0 {
			row["v"] = rng.IntN(100)
		} else {
			row["v"] = nil
		}
		val, _ := json.Marshal(row)
		out[i] = &kafkaio.Record{Topic: "ev", Offset: int64(i), Key: []byte(key), Value: val}
	}
	return out
}
