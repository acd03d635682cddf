package server

import (
	"context"
	"fmt"
	"hash/crc32"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/state"
)

// These tests drive the producer-placement check, the count history, the
// transition window and the start-up cleanup (seed: kafka-and-partitioning)
// end to end: an in-process broker that outlives the servers (so a
// producer can write while the engine is down), records placed by hand on
// the partition a given producer would choose, kadm's CreatePartitions to
// change counts, and a clock the test moves forward instead of sleeping
// through the 10-minute window.

// offsetClock is the real clock plus an offset the test advances.
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *offsetClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// placementRig is a broker, a data dir and the server running on them.
type placementRig struct {
	t       *testing.T
	ctx     context.Context
	cluster *kfake.Cluster
	dir     string
	clock   *offsetClock
	srv     *Server
	conn    *pgx.Conn
	// metadataEvery is how often streams look for a changed count (0:
	// the tests' default).
	metadataEvery time.Duration
	// allowNonDivisor: TURBINE_ALLOW_NON_DIVISOR_PARTITIONS=1.
	allowNonDivisor bool
}

func newPlacementRig(t *testing.T) *placementRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	r := &placementRig{t: t, ctx: ctx, cluster: cluster, dir: t.TempDir(), clock: &offsetClock{}}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *placementRig) start() {
	r.t.Helper()
	r.srv = startTestServer(r.t, r.dir, func(c *Config) {
		c.Brokers = r.cluster.ListenAddrs()
		c.AppID = "placement"
		c.Clock = r.clock.now
		c.AllowNonDivisor = r.allowNonDivisor
		if r.metadataEvery > 0 {
			c.MetadataInterval = r.metadataEvery
		}
	})
	r.conn = connect(r.ctx, r.t, r.srv)
}

func (r *placementRig) stop() {
	if r.srv == nil {
		return
	}
	r.conn.Close(context.Background())
	r.srv.Close()
	r.srv = nil
}

func (r *placementRig) restart() {
	r.t.Helper()
	r.stop()
	r.start()
}

func (r *placementRig) exec(qs ...string) {
	r.t.Helper()
	execAll(r.ctx, r.t, r.conn, qs...)
}

// at is a timestamp of 2026-01-01 as epoch millis.
func at(sec int) int64 {
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() + int64(sec)*1000
}

// placed is a record a producer puts on a partition of its choosing; an
// empty key is a NULL partition key.
type placed struct {
	key  string
	part int32
	sec  int
}

// produce writes records as the given producer placed them.
func (r *placementRig) produce(topic string, recs ...placed) {
	r.t.Helper()
	var out []*kgo.Record
	for _, p := range recs {
		rec := &kgo.Record{Topic: topic, Partition: p.part, Value: []byte(fmt.Sprintf(`{"k":null,"ts":%d}`, at(p.sec)))}
		if p.key != "" {
			rec.Key = []byte(p.key)
			rec.Value = []byte(fmt.Sprintf(`{"k":%q,"ts":%d}`, p.key, at(p.sec)))
		}
		out = append(out, rec)
	}
	if err := r.srv.kafka.ProduceSync(r.ctx, out); err != nil {
		r.t.Fatal(err)
	}
}

// insert writes keys through INSERT (placed with murmur2 on the topic's
// current count).
func (r *placementRig) insert(source string, keys []string, sec int) {
	r.t.Helper()
	var vals []string
	for _, k := range keys {
		vals = append(vals, fmt.Sprintf("('%s', TIMESTAMP '2026-01-01 00:%02d:%02d')", k, sec/60, sec%60))
	}
	r.exec("INSERT INTO " + source + " VALUES " + strings.Join(vals, ", "))
}

// partRow is a row of SHOW PARTITIONS.
type partRow struct {
	placement, wellPlaced int64
	counts, transition    string
	owned, lag            int64
}

func (r *placementRig) partitions(stream string) []partRow {
	r.t.Helper()
	rows, err := r.conn.Query(r.ctx, "SHOW PARTITIONS "+stream)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	var out []partRow
	for rows.Next() {
		var p int64
		var vals [6]any
		if err := rows.Scan(&p, &vals[0], &vals[1], &vals[2], &vals[3], &vals[4], &vals[5]); err != nil {
			r.t.Fatal(err)
		}
		// NULL (a partition the stream has no task for yet): -99 and "".
		num := func(v any) int64 {
			if v == nil {
				return -99
			}
			return v.(int64)
		}
		text := func(v any) string { s, _ := v.(string); return s }
		pr := partRow{placement: num(vals[0]), wellPlaced: num(vals[1]), counts: text(vals[2]), transition: text(vals[3]), owned: num(vals[4]), lag: num(vals[5])}
		if p != int64(len(out)) {
			r.t.Fatalf("SHOW PARTITIONS %s: partition %d in row %d", stream, p, len(out))
		}
		out = append(out, pr)
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// waitPartitions polls SHOW PARTITIONS until ok holds.
func (r *placementRig) waitPartitions(stream string, what string, ok func([]partRow) bool) []partRow {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows := r.partitions(stream)
		if ok(rows) {
			return rows
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: %s never held: %+v", stream, what, rows)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gauge reads turbine_partition_key_placement of a partition.
func (r *placementRig) gauge(stream, topic string, p int) (float64, bool) {
	r.t.Helper()
	fams, err := r.srv.reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "turbine_partition_key_placement" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["stream"] == stream && l["topic"] == topic && l["partition"] == fmt.Sprint(p) {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// storedGroups counts the stored groups of partition p's state by key group.
func (r *placementRig) storedGroups(stream string, p int32) map[uint16]int {
	r.t.Helper()
	scope := state.Scope(stream, p)
	out := map[uint16]int{}
	ws, err := r.srv.store.GroupWindows(scope)
	if err != nil {
		r.t.Fatal(err)
	}
	pn := r.srv.store.NewPending(scope)
	defer pn.Close()
	for _, w := range ws {
		sc := pn.ScanWindow(w, nil)
		for {
			kg, _, _, ok := sc.Next()
			if !ok {
				break
			}
			out[kg]++
		}
		if err := sc.Close(); err != nil {
			r.t.Fatal(err)
		}
	}
	return out
}

// panes reads a stream's panes of the window starting at 00:00:00: the
// counts of each key ("" for NULL), sorted.
func (r *placementRig) panes(stream string) map[string][]int64 {
	r.t.Helper()
	rows, err := r.conn.Query(r.ctx, "SELECT k, n FROM "+stream+" WHERE ws = TIMESTAMP '2026-01-01 00:00:00'")
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]int64{}
	for rows.Next() {
		var k *string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			r.t.Fatal(err)
		}
		key := ""
		if k != nil {
			key = *k
		}
		out[key] = append(out[key], n)
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	for _, ns := range out {
		sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
	}
	return out
}

// keyWhere finds a key with prefix that murmur2 places as want asks.
func keyWhere(prefix string, want func(k []byte) bool) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		if want([]byte(k)) {
			return k
		}
	}
}

const keyedDDL = `CREATE SOURCE %[1]s (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = '%[1]s', partitions = %[2]d, partition_key = 'k', idle_timeout = INTERVAL '1' HOUR%[3]s)`
const countsDDL = `CREATE STREAM %[1]s AS SELECT k, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n FROM %[2]s GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`

// TestPlacementCRC32Producer: a producer placing keys as librdkafka does
// by default (CRC32) drives the partitions to -1, on the gauge and in
// SHOW PARTITIONS; the -1 survives a restart, and it blocks the start-up
// cleanup after a count change although the source declares murmur2.
func TestPlacementCRC32Producer(t *testing.T) {
	parallel(t)
	r := newPlacementRig(t)
	r.exec(fmt.Sprintf(keyedDDL, "ev", 2, ", partition_hash = 'murmur2'"), fmt.Sprintf(countsDDL, "counts", "ev"))
	var recs []placed
	for i := 0; i < 40; i++ {
		k := fmt.Sprintf("user-%d", i)
		recs = append(recs, placed{key: k, part: int32(crc32.ChecksumIEEE([]byte(k)) % 2), sec: 1})
	}
	r.produce("ev", recs...)
	r.exec("FLUSH")
	for p, row := range r.partitions("counts") {
		if row.placement != -1 || row.counts != "2" || row.owned != 480 || row.lag != 0 {
			t.Fatalf("partition %d after a CRC32 producer: %+v", p, row)
		}
		if v, ok := r.gauge("counts", "ev", p); !ok || v != -1 {
			t.Fatalf("gauge of partition %d: %v (%v)", p, v, ok)
		}
	}
	before := []map[uint16]int{r.storedGroups("counts", 0), r.storedGroups("counts", 1)}

	r.restart()
	for p, row := range r.partitions("counts") {
		if row.placement != -1 {
			t.Fatalf("partition %d after restart: %+v", p, row)
		}
		if v, _ := r.gauge("counts", "ev", p); v != -1 {
			t.Fatalf("gauge of partition %d after restart: %v", p, v)
		}
	}

	// 2 -> 4, the window runs out and is read past, then a restart: a
	// declared source would drop the groups its partitions no longer own,
	// but -1 keeps every one of them.
	if err := r.srv.kafka.CreatePartitions(r.ctx, "ev", 4); err != nil {
		t.Fatal(err)
	}
	waitTasks(r.ctx, t, r.conn, r.srv, "counts", 4)
	r.clock.advance(11 * time.Minute)
	r.waitPartitions("counts", "windows closed", func(rows []partRow) bool {
		return len(rows) == 4 && strings.HasPrefix(rows[0].transition, "closed at offset") && strings.HasPrefix(rows[1].transition, "closed at offset")
	})
	r.restart()
	rows := r.partitions("counts")
	for p := 0; p < 2; p++ {
		if rows[p].placement != -1 || rows[p].counts != "2,4" {
			t.Fatalf("partition %d: %+v", p, rows[p])
		}
		after := r.storedGroups("counts", int32(p))
		if fmt.Sprint(after) != fmt.Sprint(before[p]) {
			t.Fatalf("partition %d's state changed though its verdict is -1:\nbefore %v\nafter  %v", p, before[p], after)
		}
		notOwned := 0
		for kg := range after {
			if int(kg)%4 != p {
				notOwned++
			}
		}
		if notOwned == 0 {
			t.Fatalf("partition %d holds no group it does not own on 4: the test proves nothing", p)
		}
	}
}

// TestRescaleTransitionAndCleanup: 4 -> 8 partitions under a declared and
// an undeclared source. The count change opens the transition window;
// records placed under 4 are excused inside it and not after it. At the
// next start-up the declared stream's partitions drop exactly the key
// groups that moved (partition 0, gone to -1, keeps them), the undeclared
// one keeps everything; keys that stayed carry their windows across the
// change, keys that moved start empty on their new partition, NULL keys
// keep their state on every partition.
func TestRescaleTransitionAndCleanup(t *testing.T) {
	parallel(t)
	r := newPlacementRig(t)
	r.exec(fmt.Sprintf(keyedDDL, "d", 4, ", partition_hash = 'murmur2'"), fmt.Sprintf(countsDDL, "dn", "d"),
		fmt.Sprintf(keyedDDL, "u", 4, ""), fmt.Sprintf(countsDDL, "un", "u"))
	var keys []string
	for i := 0; i < 40; i++ {
		keys = append(keys, fmt.Sprintf("key%d", i))
	}
	moved := func(k string) bool { return state.PartitionFor([]byte(k), 4) != state.PartitionFor([]byte(k), 8) }
	nulls := func(n int, sec int) []placed {
		var out []placed
		for p := 0; p < n; p++ {
			out = append(out, placed{part: int32(p), sec: sec})
		}
		return out
	}
	for _, src := range []string{"d", "u"} {
		r.insert(src, keys, 1)
		r.produce(src, nulls(4, 1)...)
	}
	r.exec("FLUSH")

	for _, topic := range []string{"d", "u"} {
		if err := r.srv.kafka.CreatePartitions(r.ctx, topic, 8); err != nil {
			t.Fatal(err)
		}
	}
	waitTasks(r.ctx, t, r.conn, r.srv, "dn", 8)
	waitTasks(r.ctx, t, r.conn, r.srv, "un", 8)
	rows := r.partitions("dn")
	for p, row := range rows {
		switch {
		case p < 4 && (row.counts != "4,8" || !strings.HasPrefix(row.transition, "open since") || row.placement != 0 || row.owned != 120):
			t.Fatalf("partition %d after 4 -> 8: %+v", p, row)
		case p >= 4 && (row.counts != "8" || row.transition != "none"):
			t.Fatalf("new partition %d: %+v (its first count is its baseline)", p, row)
		}
	}

	// A producer still on 4: inside the window its records are excused.
	stale := func(p int32) string {
		return keyWhere(fmt.Sprintf("stale%d-", p), func(k []byte) bool {
			return state.PartitionFor(k, 4) == p && state.PartitionFor(k, 8) != p
		})
	}
	r.produce("d", placed{key: stale(0), part: 0, sec: 3}, placed{key: stale(1), part: 1, sec: 3})
	r.exec("FLUSH")
	for p, row := range r.partitions("dn")[:2] {
		if row.placement != 0 {
			t.Fatalf("partition %d: a record placed under 4 inside the window: %+v", p, row)
		}
	}

	// The window's time is up: each partition notes its log end and,
	// having read it, closes the window.
	r.clock.advance(11 * time.Minute)
	closed := func(rows []partRow) bool {
		for _, row := range rows[:4] {
			if !strings.HasPrefix(row.transition, "closed at offset") {
				return false
			}
		}
		return true
	}
	r.waitPartitions("dn", "windows closed", closed)
	r.waitPartitions("un", "windows closed", closed)
	// After it, a record placed under 4 is a misplacement.
	r.produce("d", placed{key: keyWhere("late0-", func(k []byte) bool {
		return state.PartitionFor(k, 4) == 0 && state.PartitionFor(k, 8) != 0
	}), part: 0, sec: 4})
	r.exec("FLUSH")
	rows = r.partitions("dn")
	if rows[0].placement != -1 {
		t.Fatalf("partition 0: a record placed under 4 after the window: %+v", rows[0])
	}
	for p := 1; p < 8; p++ {
		if rows[p].placement != 0 {
			t.Fatalf("partition %d: %+v", p, rows[p])
		}
	}
	beforeU := r.storedGroups("un", 1)
	before0 := r.storedGroups("dn", 0)

	// The start-up cleanup.
	r.restart()
	for p := int32(0); p < 4; p++ {
		got := r.storedGroups("dn", p)
		want := map[uint16]int{state.NullGroup: 1}
		for _, k := range keys {
			if state.PartitionFor([]byte(k), 8) == p {
				want[state.KeyGroup([]byte(k))]++
			}
		}
		if p == 0 {
			// -1: nothing dropped.
			want = before0
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("dn partition %d after the cleanup holds groups\n%v\nwant\n%v", p, got, want)
		}
	}
	if got := r.storedGroups("un", 1); fmt.Sprint(got) != fmt.Sprint(beforeU) {
		t.Fatalf("undeclared un partition 1 lost state at start-up:\nbefore %v\nafter  %v", beforeU, got)
	}
	movedAway := 0
	for kg := range beforeU {
		if kg != state.NullGroup && kg%8 != 1 {
			movedAway++
		}
	}
	if movedAway == 0 {
		t.Fatal("no key moved away from un's partition 1: the test proves nothing")
	}

	// Continue the window across the change: every key once more, NULL
	// keys on every partition, then a row per partition past the window.
	for _, src := range []string{"d", "u"} {
		r.insert(src, keys, 2)
		r.produce(src, nulls(8, 2)...)
		var ticks []string
		for p := int32(0); p < 8; p++ {
			ticks = append(ticks, keyWhere(fmt.Sprintf("tick%d-", p), func(k []byte) bool { return state.PartitionFor(k, 8) == p }))
		}
		r.insert(src, ticks, 90)
	}
	r.exec("FLUSH")
	for _, stream := range []string{"dn", "un"} {
		got := r.panes(stream)
		for _, k := range keys {
			from := state.PartitionFor([]byte(k), 4)
			var want string
			switch {
			case !moved(k):
				want = "[2]" // one pane, rows from before and after
			case stream == "dn" && from != 0:
				want = "[1]" // its old state was dropped; only the new partition's pane
			default:
				want = "[1 1]" // kept: the partition it left publishes its part too
			}
			if fmt.Sprint(got[k]) != want {
				t.Errorf("%s: key %s (partition %d of 4, %d of 8): panes %v, want %s", stream, k, from, state.PartitionFor([]byte(k), 8), got[k], want)
			}
		}
		if fmt.Sprint(got[""]) != "[1 1 1 1 2 2 2 2]" {
			t.Errorf("%s: NULL key panes %v: partitions 0-3 keep their NULL group (2 rows each), 4-7 start one (1 row)", stream, got[""])
		}
	}
}

// TestLaggingRestartReadsBacklogInWindow: the window opened while running;
// the server is down for an hour while a producer still on the old count
// writes. At start-up the window's time is long up, so the partition
// notes its log end as it is then: the backlog is read inside the window
// (excused), the window closes once it is read, and only a record after
// it counts as misplaced.
func TestLaggingRestartReadsBacklogInWindow(t *testing.T) {
	parallel(t)
	r := newPlacementRig(t)
	r.exec(fmt.Sprintf(keyedDDL, "lg", 2, ", partition_hash = 'murmur2'"), fmt.Sprintf(countsDDL, "lgn", "lg"))
	r.insert("lg", []string{"a", "b", "c", "d"}, 1)
	r.exec("FLUSH")
	if err := r.srv.kafka.CreatePartitions(r.ctx, "lg", 4); err != nil {
		t.Fatal(err)
	}
	waitTasks(r.ctx, t, r.conn, r.srv, "lgn", 4)
	r.waitPartitions("lgn", "window open", func(rows []partRow) bool {
		return len(rows) == 4 && strings.HasPrefix(rows[0].transition, "open since") && strings.HasPrefix(rows[1].transition, "open since")
	})
	r.stop()

	// The backlog, written while the engine is down by a producer on 2.
	r.clock.advance(time.Hour)
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var backlog []*kgo.Record
	ends := map[int32]int64{}
	for p := int32(0); p < 2; p++ {
		for i := 0; i < 150; i++ {
			k := keyWhere(fmt.Sprintf("old%d-%d-", p, i), func(k []byte) bool {
				return state.PartitionFor(k, 2) == p && state.PartitionFor(k, 4) != p
			})
			backlog = append(backlog, &kgo.Record{Topic: "lg", Partition: p, Key: []byte(k), Value: []byte(fmt.Sprintf(`{"k":%q,"ts":%d}`, k, at(5)))})
		}
	}
	for _, res := range cl.ProduceSync(r.ctx, backlog...) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		ends[res.Record.Partition] = max(ends[res.Record.Partition], res.Record.Offset+1)
	}

	r.start()
	r.exec("FLUSH")
	rows := r.partitions("lgn")
	for p := 0; p < 2; p++ {
		want := fmt.Sprintf("closed at offset %d", ends[int32(p)])
		if rows[p].placement != 0 || rows[p].transition != want || rows[p].counts != "2,4" || rows[p].lag != 0 {
			t.Fatalf("partition %d after reading its backlog: %+v, want placement 0 and %q", p, rows[p], want)
		}
	}
	r.produce("lg", placed{key: keyWhere("after-", func(k []byte) bool {
		return state.PartitionFor(k, 2) == 1 && state.PartitionFor(k, 4) != 1
	}), part: 1, sec: 6})
	r.exec("FLUSH")
	if rows := r.partitions("lgn"); rows[1].placement != -1 || rows[0].placement != 0 {
		t.Fatalf("after the window: %+v", rows[:2])
	}
}

// TestNonDivisorCountBetweenRestarts: a keyed stream whose input grew, while
// the server was down, to a count that does not divide 960 does not start:
// it is listed failed with the refusal CREATE STREAM gives.
func TestNonDivisorCountBetweenRestarts(t *testing.T) {
	r := newPlacementRig(t)
	r.exec(fmt.Sprintf(keyedDDL, "nd", 2, ", partition_hash = 'murmur2'"), fmt.Sprintf(countsDDL, "ndn", "nd"))
	r.insert("nd", []string{"a", "b"}, 1)
	r.exec("FLUSH")
	r.stop()
	adm, err := kgo.NewClient(kgo.SeedBrokers(r.cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreatePartitions(r.ctx, 5, "nd"); err != nil {
		t.Fatal(err)
	}
	r.start()
	status, msg := streamStatus(r.ctx, t, r.conn, "ndn")
	if status != "failed" || !strings.Contains(msg, `topic "nd" has 7 partitions, which does not divide 960`) || !strings.Contains(msg, "closest valid counts: 6 and 8") {
		t.Fatalf("ndn on 7 partitions: %s %q", status, msg)
	}
}

// TestCountSeenWhileRunning: a record that looks misplaced makes the
// partition ask the broker for the count; the topic grew (4 -> 6, before
// the stream's own metadata check noticed), so a transition window opens
// and the batch is judged again under 6, where the record is well placed.
func TestCountSeenWhileRunning(t *testing.T) {
	r := &placementRig{t: t, metadataEvery: time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	r.ctx, r.cluster, r.dir, r.clock = ctx, cluster, t.TempDir(), &offsetClock{}
	r.start()
	defer r.stop()
	r.exec(fmt.Sprintf(keyedDDL, "run", 4, ", partition_hash = 'murmur2'"), fmt.Sprintf(countsDDL, "runn", "run"))
	r.insert("run", []string{"a"}, 1)
	r.exec("FLUSH")
	if err := r.srv.kafka.CreatePartitions(ctx, "run", 6); err != nil {
		t.Fatal(err)
	}
	k := keyWhere("grown-", func(k []byte) bool { return state.PartitionFor(k, 6) == 1 && state.PartitionFor(k, 4) != 1 })
	r.produce("run", placed{key: k, part: 1, sec: 2})
	r.exec("FLUSH")
	rows := r.partitions("runn")
	if len(rows) != 6 || rows[4].placement != -99 {
		t.Fatalf("%+v: the stream restarted on its own, the test proves nothing", rows)
	}
	if rows[1].placement != 0 || rows[1].counts != "4,6" || !strings.HasPrefix(rows[1].transition, "open since") {
		t.Fatalf("partition 1 after a record placed under the new count: %+v", rows[1])
	}
	if rows[0].counts != "4" {
		t.Fatalf("partition 0 saw nothing suspect, yet: %+v", rows[0])
	}
}

// TestCleanupLeavingNonDivisorCount: a declared source on 7 partitions
// (which does not divide 960) grown to 8. After the transition window the
// start-up cleanup drops, on each old partition, exactly the state of the
// keys that moved: a key's group is murmur2 mod 960 on every count, so
// under 8 the groups a partition does not own are the keys that left it,
// whatever count the state ran on before. The keys that stayed keep their
// state.
func TestCleanupLeavingNonDivisorCount(t *testing.T) {
	parallel(t)
	r := newPlacementRig(t)
	r.allowNonDivisor = true
	r.restart()
	r.exec(fmt.Sprintf(keyedDDL, "s7", 7, ", partition_hash = 'murmur2'"), fmt.Sprintf(countsDDL, "s7n", "s7"))
	var keys []string
	for i := 0; i < 60; i++ {
		keys = append(keys, fmt.Sprintf("key%d", i))
	}
	r.insert("s7", keys, 1)
	r.exec("FLUSH")
	if err := r.srv.kafka.CreatePartitions(r.ctx, "s7", 8); err != nil {
		t.Fatal(err)
	}
	waitTasks(r.ctx, t, r.conn, r.srv, "s7n", 8)
	r.clock.advance(11 * time.Minute)
	r.waitPartitions("s7n", "windows closed", func(rows []partRow) bool {
		for _, row := range rows[:7] {
			if !strings.HasPrefix(row.transition, "closed at offset") {
				return false
			}
		}
		return true
	})
	r.restart()
	moved := 0
	for p := int32(0); p < 7; p++ {
		want := map[uint16]int{}
		for _, k := range keys {
			if state.PartitionFor([]byte(k), 7) == p {
				if state.PartitionFor([]byte(k), 8) == p {
					want[state.KeyGroup([]byte(k))]++
				} else {
					moved++
				}
			}
		}
		if got := r.storedGroups("s7n", p); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("partition %d after the cleanup holds groups\n%v\nwant (the keys that stayed)\n%v", p, got, want)
		}
	}
	if moved == 0 {
		t.Fatal("no key moved: the test shows nothing")
	}
}
