package server

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/state"
)

// paneRecord is one output record of a windowed stream, read raw, as a
// downstream consumer sees it.
type paneRecord struct {
	rec     *kgo.Record
	headers map[string][]byte
	hasKey  bool // a turbine.key header is present
	start   int64
	end     int64
	value   map[string]any
}

// readPanes reads every record of topic (read_committed) and checks what
// each must carry: the stream's name and the window's start and end as
// headers, every header once.
func readPanes(ctx context.Context, t *testing.T, srv *Server, stream, topic string) []paneRecord {
	t.Helper()
	var out []paneRecord
	err := srv.kafka.ReadAll(ctx, topic, func(r *kgo.Record) error {
		p := paneRecord{rec: r, headers: map[string][]byte{}}
		for _, h := range r.Headers {
			if _, dup := p.headers[h.Key]; dup {
				return fmt.Errorf("%s/%d@%d: header %s twice", topic, r.Partition, r.Offset, h.Key)
			}
			p.headers[h.Key] = h.Value
		}
		if got := string(p.headers[dataflow.HeaderStream]); got != stream {
			return fmt.Errorf("%s/%d@%d: %s %q, want %q", topic, r.Partition, r.Offset, dataflow.HeaderStream, got, stream)
		}
		var err error
		if p.start, err = strconv.ParseInt(string(p.headers[dataflow.HeaderWindowStart]), 10, 64); err != nil {
			return fmt.Errorf("%s/%d@%d: %s: %v", topic, r.Partition, r.Offset, dataflow.HeaderWindowStart, err)
		}
		if p.end, err = strconv.ParseInt(string(p.headers[dataflow.HeaderWindowEnd]), 10, 64); err != nil {
			return fmt.Errorf("%s/%d@%d: %s: %v", topic, r.Partition, r.Offset, dataflow.HeaderWindowEnd, err)
		}
		_, p.hasKey = p.headers[dataflow.HeaderKey]
		if err := json.Unmarshal(r.Value, &p.value); err != nil {
			return fmt.Errorf("%s/%d@%d: %s: %v", topic, r.Partition, r.Offset, r.Value, err)
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// paneRow is an input row of the pane identity tests: key k, user u, at
// second sec of 2026-01-01.
type paneRow struct {
	k, u string
	sec  int64
}

var paneEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// windowsOf are the [start, end) windows (epoch ms) of a row at sec for a
// window of size s sliding by slide s (TUMBLE: slide = size).
func windowsOf(sec, slide, size int64) [][2]int64 {
	ts := paneEpoch + sec*1000
	var out [][2]int64
	for w := ts - ts%(slide*1000); w > ts-size*1000; w -= slide * 1000 {
		out = append(out, [2]int64{w, w + size*1000})
	}
	return out
}

// TestPaneIdentityOnEveryPlan reads the output topics of windowed streams
// raw and checks each pane's identity, on every plan (local, repartition,
// combine, keyless) and both guarantees: the headers name the stream, the
// window (start and end in epoch ms) and the group key (its text; a JSON
// array for several keys; none for a keyless window); the record key is
// the group key (message_key overrides; a keyless window's is its start)
// on the partition murmur2 gives it. The identity is the expected set of
// (key, window) exactly, whether or not the select list outputs the window
// or the key, and where it does, it matches the value.
func TestPaneIdentityOnEveryPlan(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE SOURCE pi_ev (k TEXT, u TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
		WITH (topic = 'pi_ev', partitions = 4, partition_key = 'k')`)
	type spec struct {
		name, with, sel, group string
		// key is a row's group key as the turbine.key header has it
		// (nil: a keyless window); recKey its record key when that is not
		// the group key.
		key    func(paneRow) *string
		recKey func(paneRow, [2]int64) string
		// slide, size: the window (seconds); session: a SESSION window
		// with gap size.
		slide, size int64
		session     bool
		// valueKey, valueStart: columns of the value holding the group
		// key and the window start ("": not output).
		valueKey, valueStart string
		early                bool
	}
	str := func(s string) *string { return &s }
	byK := func(r paneRow) *string { return str(r.k) }
	byU := func(r paneRow) *string { return str(r.u) }
	specs := []spec{
		{name: "pi_local", with: "processing_guarantee = 'exactly_once'", sel: "k, COUNT(*) AS n", group: "k, TUMBLE(ts, INTERVAL '10' SECOND)",
			key: byK, slide: 10, size: 10, valueKey: "k"},
		{name: "pi_rep", with: "strategy = 'repartition'", sel: "u, TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n",
			group: "u, TUMBLE(ts, INTERVAL '10' SECOND)", key: byU, slide: 10, size: 10, valueKey: "u", valueStart: "ws"},
		{name: "pi_cmb", with: "strategy = 'combine', processing_guarantee = 'exactly_once'", sel: "COUNT(*) AS n",
			group: "u, TUMBLE(ts, INTERVAL '10' SECOND)", key: byU, slide: 10, size: 10},
		{name: "pi_keyless", sel: "TUMBLE_START(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n", group: "TUMBLE(ts, INTERVAL '10' SECOND)",
			slide: 10, size: 10, valueStart: "ws", recKey: func(_ paneRow, w [2]int64) string { return strconv.FormatInt(w[0], 10) }},
		{name: "pi_hop", sel: "k, COUNT(*) AS n", group: "k, HOP(ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND)",
			key: byK, slide: 5, size: 10, valueKey: "k"},
		{name: "pi_session", with: "processing_guarantee = 'exactly_once'", sel: "k, SESSION_START(ts, INTERVAL '5' SECOND) AS ss, COUNT(*) AS n",
			group: "k, SESSION(ts, INTERVAL '5' SECOND)", key: byK, size: 5, session: true, valueKey: "k", valueStart: "ss"},
		{name: "pi_multi", sel: "u, k, COUNT(*) AS n", group: "k, u, TUMBLE(ts, INTERVAL '10' SECOND)",
			key: func(r paneRow) *string { return str(fmt.Sprintf("[%q,%q]", r.k, r.u)) }, slide: 10, size: 10},
		{name: "pi_mk", with: "message_key = 'u'", sel: "k, u, COUNT(*) AS n", group: "k, u, TUMBLE(ts, INTERVAL '10' SECOND)",
			key: func(r paneRow) *string { return str(fmt.Sprintf("[%q,%q]", r.k, r.u)) }, slide: 10, size: 10,
			recKey: func(r paneRow, _ [2]int64) string { return r.u }},
		{name: "pi_early", with: "processing_guarantee = 'exactly_once'", sel: "k, COUNT(*) AS n",
			group: "k, TUMBLE(ts, INTERVAL '10' SECOND) EMIT EVERY INTERVAL '200' MILLISECOND", key: byK, slide: 10, size: 10, valueKey: "k", early: true},
	}
	for _, s := range specs {
		with := "topic = '" + s.name + "', partitions = 4"
		if s.with != "" {
			with += ", " + s.with
		}
		exec(fmt.Sprintf("CREATE STREAM %s WITH (%s) AS SELECT %s FROM pi_ev GROUP BY %s", s.name, with, s.sel, s.group))
	}
	insert := func(rows []paneRow) {
		var vals []string
		for _, r := range rows {
			vals = append(vals, fmt.Sprintf("('%s', '%s', TIMESTAMP '2026-01-01 00:00:00' + INTERVAL '%d' SECOND)", r.k, r.u, r.sec))
		}
		exec("INSERT INTO pi_ev VALUES " + strings.Join(vals, ", "))
		exec("FLUSH")
	}
	var rows []paneRow
	for i := range 40 {
		rows = append(rows, paneRow{k: fmt.Sprintf("k%d", i%7), u: fmt.Sprintf("u%d", i%3), sec: int64(i*37%45) + 1})
	}
	insert(rows)                       // closes the windows before the last row's
	time.Sleep(400 * time.Millisecond) // early fires of the open ones
	// Every window of the rows closes; the closing row's stays open.
	closer := paneRow{k: "k0", u: "u0", sec: 200}
	insert([]paneRow{closer})

	for _, s := range specs {
		t.Run(s.name, func(t *testing.T) {
			// The panes that must be there, "turbine.key start end record-key".
			want := map[string]int{}
			id := func(k *string, w [2]int64, rec string) string {
				gk := "-"
				if k != nil {
					gk = *k
				}
				return fmt.Sprintf("%s %d %d %s", gk, w[0], w[1], rec)
			}
			recKey := func(r paneRow, w [2]int64) string {
				if s.recKey != nil {
					return s.recKey(r, w)
				}
				return *s.key(r)
			}
			if s.session {
				// Sessions of each key: a row at t covers [t, t+gap).
				byKey := map[string][]int64{}
				first := map[string]paneRow{}
				for _, r := range rows {
					byKey[*s.key(r)] = append(byKey[*s.key(r)], paneEpoch+r.sec*1000)
					first[*s.key(r)] = r
				}
				for k, ts := range byKey {
					slices.Sort(ts)
					w := [2]int64{ts[0], ts[0] + s.size*1000}
					for _, t := range ts[1:] {
						if t >= w[1] {
							want[id(&k, w, recKey(first[k], w))]++
							w = [2]int64{t, t}
						}
						w[1] = max(w[1], t+s.size*1000)
					}
					want[id(&k, w, recKey(first[k], w))]++
				}
			} else {
				for _, r := range rows {
					for _, w := range windowsOf(r.sec, s.slide, s.size) {
						var k *string
						if s.key != nil {
							k = s.key(r)
						}
						want[id(k, w, recKey(r, w))]++
					}
				}
			}
			got := map[string]int{}
			finals, earlies := 0, 0
			outN := 4
			for _, p := range readPanes(ctx, t, srv, s.name, s.name) {
				r := p.rec
				var gk *string
				if p.hasKey {
					gk = str(string(p.headers[dataflow.HeaderKey]))
				} else if s.key != nil {
					t.Fatalf("%s/%d@%d: no %s header", s.name, r.Partition, r.Offset, dataflow.HeaderKey)
				}
				if r.Key == nil {
					t.Fatalf("%s/%d@%d: an unkeyed pane", s.name, r.Partition, r.Offset)
				}
				if want := state.PartitionFor(r.Key, outN); r.Partition != want {
					t.Fatalf("%s: key %q on partition %d; murmur2 puts it on %d", s.name, r.Key, r.Partition, want)
				}
				if s.valueKey != "" && (gk == nil || p.value[s.valueKey] != *gk) {
					t.Fatalf("%s: the value's %s is %v, the header's key %v", s.name, s.valueKey, p.value[s.valueKey], gk)
				}
				if s.valueStart != "" {
					ws, err := time.Parse(time.RFC3339, fmt.Sprint(p.value[s.valueStart]))
					if err != nil || ws.UnixMilli() != p.start {
						t.Fatalf("%s: the value's %s is %v, the header's start %d (%v)", s.name, s.valueStart, p.value[s.valueStart], p.start, err)
					}
				}
				if p.end <= p.start {
					t.Fatalf("%s: window [%d, %d)", s.name, p.start, p.end)
				}
				if p.end > paneEpoch+closer.sec*1000 {
					// A window of the closing row, still open: an early
					// fire only.
					if f, _ := p.value["is_final"].(bool); !s.early || f {
						t.Fatalf("%s: an open window [%d, %d) was emitted final: %s", s.name, p.start, p.end, r.Value)
					}
					continue
				}
				if f, ok := p.value["is_final"].(bool); s.early && ok && !f {
					earlies++
					if _, ok := want[id(gk, [2]int64{p.start, p.end}, string(r.Key))]; !ok {
						t.Fatalf("%s: an early fire of a pane that is not due: %s %d %d", s.name, r.Key, p.start, p.end)
					}
					continue
				}
				finals++
				got[id(gk, [2]int64{p.start, p.end}, string(r.Key))]++
			}
			for k, n := range want {
				want[k] = min(n, 1) // each pane once, whatever its count
			}
			if !maps.Equal(got, want) {
				t.Fatalf("%s: %d final panes\n got %v\nwant %v", s.name, finals, got, want)
			}
			if s.early && earlies == 0 {
				t.Fatalf("%s: no early fire", s.name)
			}
		})
	}
}

// TestPaneIdentityDedupesADuplicate: an at-least-once stream whose commit
// Kafka refuses after the pane it closed was written (as a crash between
// the two would) starts again from its state and writes that pane a
// second time. The stream's select list leaves out the window, and two
// windows of one key have the same count: the three records' values are
// equal, so nothing in them tells the duplicate from the next window's
// pane. Their headers do: deduped on (stream, turbine.key,
// turbine.window.start) they are each window's pane once.
func TestPaneIdentityDedupesADuplicate(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	// Armed, the broker refuses the stream's first commit (its changelog
	// records, produced in the commit's transaction) after an output
	// record was written: the pane is out, the state and offset that
	// record its close are not.
	var armed, paneOut, refused atomic.Bool
	var outID atomic.Value // the output topic's id: produce requests name topics by id
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		r := req.(*kmsg.ProduceRequest)
		if !armed.Load() {
			return nil, nil, false
		}

		if r.TransactionID == nil {
			for _, rt := range r.Topics {
				if rt.Topic == "dd" || rt.TopicID == outID.Load() {
					paneOut.Store(true)
				}
			}
			return nil, nil, false
		}
		if !paneOut.Load() || !strings.Contains(*r.TransactionID, "-dd-") || !armed.CompareAndSwap(true, false) {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.OutOfOrderSequenceNumber.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		refused.Store(true)
		return resp, nil, true
	})
	srv := startTestServer(t, t.TempDir(), func(c *Config) { c.Brokers = cluster.ListenAddrs(); c.AppID = "dedupe" })
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE SOURCE dd_ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'dd_ev', partitions = 1, partition_key = 'k')`)
	exec(`CREATE STREAM dd WITH (topic = 'dd') AS SELECT k, COUNT(*) AS n FROM dd_ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`)
	exec(`INSERT INTO dd_ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:01'), ('a', TIMESTAMP '2026-01-01 00:00:02'),
		('a', TIMESTAMP '2026-01-01 00:00:11'), ('a', TIMESTAMP '2026-01-01 00:00:12')`)
	exec(`FLUSH`) // closes [0, 10)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx, "dd")
	if err != nil || topics.Error() != nil {
		t.Fatalf("topic dd: %v %v", err, topics.Error())
	}
	outID.Store([16]byte(topics["dd"].ID))
	armed.Store(true)
	exec(`INSERT INTO dd_ev VALUES ('a', TIMESTAMP '2026-01-01 00:00:25')`) // closes [10, 20)
	waitFor(t, 30*time.Second, "the refused commit", refused.Load)
	// The at-least-once stream fails on it, and starts again from its
	// state when told to: the input since its last commit is read again.
	waitFor(t, 30*time.Second, "the stream to fail", func() bool {
		st, _ := streamStatus(ctx, t, conn, "dd")
		return st == "failed"
	})
	exec(`ALTER STREAM dd RESTART`)
	exec(`FLUSH`)

	panes := readPanes(ctx, t, srv, "dd", "dd")
	values := map[string]bool{}
	for _, p := range panes {
		values[string(p.rec.Value)] = true
	}
	if len(panes) != 3 || len(values) != 1 {
		t.Fatalf("%d records with %d distinct values, want 3 records (one a duplicate) of one value: %v", len(panes), len(values), values)
	}
	// The dedupe a downstream consumer does, on the identity alone.
	type identity struct {
		stream, key string
		start       int64
	}
	seen := map[identity]int{}
	for _, p := range panes {
		seen[identity{string(p.headers[dataflow.HeaderStream]), string(p.headers[dataflow.HeaderKey]), p.start}]++
	}
	ws := func(sec int64) int64 { return paneEpoch + sec*1000 }
	want := map[identity]int{{"dd", "a", ws(0)}: 1, {"dd", "a", ws(10)}: 2}
	if len(seen) != len(want) || seen[identity{"dd", "a", ws(0)}] != 1 || seen[identity{"dd", "a", ws(10)}] != 2 {
		t.Fatalf("identities %v, want %v: [10 s, 20 s) written twice, and deduped to one pane a window", seen, want)
	}
	// The duplicate sits beside the pane it repeats: one key, one partition,
	// the later record replacing the earlier for an upsert by (key, window).
	for _, p := range panes[1:] {
		if p.rec.Partition != panes[0].rec.Partition || string(p.rec.Key) != "a" {
			t.Fatalf("panes of key a on partitions %d and %d (key %q)", panes[0].rec.Partition, p.rec.Partition, p.rec.Key)
		}
	}
}

// TestLegacyWindowedStreamKeepsNoPartitionKey: a windowed stream whose
// catalog record an earlier release wrote (no turbine.keyed.panes header)
// wrote its panes unkeyed, round robin: it keeps no partition key,
// followed live and after a restart, so a reader grouping by its key,
// which would take those panes for placed, is refused as it was. One this
// release creates, or whose record says so, has its group key as its
// partition key, and such a reader is local.
func TestLegacyWindowedStreamKeepsNoPartitionKey(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addr, start := appNodes(t, 2, "legacy")
	dir := t.TempDir()
	a := start(dir)
	defer func() { a.Close() }()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	put := func(key, val string, keyed bool) {
		r := &kgo.Record{Topic: "turbine-legacy-catalog", Key: []byte(key), Value: []byte(val), Headers: []kgo.RecordHeader{
			{Key: hdrCatalogV, Value: []byte(strconv.Itoa(catalogVersion))}, {Key: hdrNode, Value: []byte("nodeEarlier")},
			{Key: hdrStmt, Value: []byte(newStmtID())}, {Key: hdrOp, Value: []byte("create")},
		}}
		if keyed {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: hdrKeyed, Value: []byte("true")})
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	put("source/lg_ev", `CREATE SOURCE lg_ev (k TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (topic = 'ev', partition_key = 'k')`, false)
	const window = `AS SELECT k, COUNT(*) AS n FROM lg_ev GROUP BY k, TUMBLE(ts, INTERVAL '10' SECOND)`
	put("stream/lg_old", `CREATE STREAM lg_old WITH (topic = 'lg_old') `+window, false)
	put("stream/lg_rec", `CREATE STREAM lg_rec WITH (topic = 'lg_rec') `+window, true)
	waitWithin(t, "a to follow both streams", 10*time.Second, func() bool { return hasStream(a, "lg_old") && hasStream(a, "lg_rec") })
	conn := connect(ctx, t, a)
	if _, err := conn.Exec(ctx, `CREATE STREAM lg_new WITH (topic = 'lg_new') `+window); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		for name, want := range map[string]string{"lg_old": "", "lg_rec": "k", "lg_new": "k"} {
			st, ok := a.cat.Stream(name)
			if !ok || st.KeyColumn != want {
				t.Fatalf("%s: stream %s's partition key %q (found %v), want %q", when, name, st.KeyColumn, ok, want)
			}
		}
		const down = `EXPLAIN CREATE STREAM lg_down AS SELECT k, SUM(n) AS n FROM %s GROUP BY k`
		var plan string
		if err := conn.QueryRow(ctx, fmt.Sprintf(down, "lg_old")).Scan(&plan); err == nil || !strings.Contains(err.Error(), "0A000") {
			t.Fatalf("%s: a reader of lg_old grouping by k: %v (plan %q), want it refused (0A000)", when, err, plan)
		}
		for _, up := range []string{"lg_rec", "lg_new"} {
			if err := conn.QueryRow(ctx, fmt.Sprintf(down, up)).Scan(&plan); err != nil || !strings.HasPrefix(plan, "Strategy: local") {
				t.Fatalf("%s: a reader of %s grouping by k plans %q (%v), want local", when, up, plan, err)
			}
		}
	}
	check("followed")
	conn.Close(ctx)
	a.Close()
	a = start(dir)
	conn = connect(ctx, t, a)
	defer conn.Close(ctx)
	check("after a restart")
}
