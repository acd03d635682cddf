package audit

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/turbinesql/turbinesql/state"
)

func at(sec float64) int64 { return base + int64(sec*1000) }

func TestExpectedWindows(t *testing.T) {
	rows := []row{
		{tenant: "a", user: "u", v: 1, ts: at(1)},
		{tenant: "a", user: "u", v: 2, ts: at(2.5)},   // same session as 1 s (gap 2 s)
		{tenant: "a", user: "u", v: 4, ts: at(4.5)},   // touches 2.5 + 2 exactly: a new session
		{tenant: "a", user: "u", v: 8, ts: at(12)},    // second tumble window
		{tenant: "b", user: "u", v: 16, ts: at(7)},    // another key
		{tenant: "a", user: "u", v: 32, ts: at(1000)}, // every window of it stays open
	}
	wm := at(100)
	check := func(k kind, want map[paneID]value) {
		t.Helper()
		got := expected(streamSpec{name: "x", kind: k, plan: local}, rows, wm)
		if len(got) != len(want) {
			t.Errorf("%s: %d panes %v, want %d %v", k, len(got), got, len(want), want)
		}
		for id, w := range want {
			if got[id] != w {
				t.Errorf("%s: pane %+v = %v, want %v", k, id, got[id], w)
			}
		}
	}
	check(tumble, map[paneID]value{
		{"a", at(0), at(10)}:  {3, 7},
		{"a", at(10), at(20)}: {1, 8},
		{"b", at(0), at(10)}:  {1, 16},
	})
	// HOP(5 s, 20 s): a row at 12 s is in the windows starting at -5, 0, 5, 10.
	check(hop, map[paneID]value{
		{"a", at(-15), at(5)}:  {3, 7},
		{"a", at(-10), at(10)}: {3, 7},
		{"a", at(-5), at(15)}:  {4, 15},
		{"a", at(0), at(20)}:   {4, 15},
		{"a", at(5), at(25)}:   {1, 8},
		{"a", at(10), at(30)}:  {1, 8},
		{"b", at(-10), at(10)}: {1, 16},
		{"b", at(-5), at(15)}:  {1, 16},
		{"b", at(0), at(20)}:   {1, 16},
		{"b", at(5), at(25)}:   {1, 16},
	})
	check(session, map[paneID]value{
		{"a", at(1), at(4.5)}:   {2, 3},
		{"a", at(4.5), at(6.5)}: {1, 4},
		{"a", at(12), at(14)}:   {1, 8},
		{"b", at(7), at(9)}:     {1, 16},
	})
	check(upsert, map[paneID]value{{key: "a"}: {5, 47}, {key: "b"}: {1, 16}})
	// the repartition plan groups by user instead
	if got := expected(streamSpec{kind: upsert, plan: repartition}, rows, wm); got[paneID{key: "u"}] != (value{6, 63}) || len(got) != 1 {
		t.Errorf("upsert by user: %v", got)
	}
}

func TestAuditCounts(t *testing.T) {
	s := streamSpec{name: "e", kind: emit, plan: local}
	id := func(k string) paneID { return paneID{k, at(0), at(10)} }
	want := map[paneID]value{
		id("ok"): {2, 3}, id("lost"): {1, 1}, id("dup"): {4, 4}, id("wrong"): {5, 5}, id("fixed"): {6, 6},
	}
	got := []pane{
		{id: id("ok"), v: value{1, 1}},              // an early fire: ignored
		{id: id("ok"), v: value{2, 3}, final: true}, // the final pane
		{id: id("lost"), v: value{1, 1}},            // only an early fire: the final pane is lost
		{id: id("dup"), v: value{4, 4}, final: true},
		{id: id("dup"), v: value{4, 4}, final: true},
		{id: id("wrong"), v: value{5, 5}, final: true},
		{id: id("wrong"), v: value{3, 5}, final: true}, // the last value counts
		{id: id("fixed"), v: value{2, 6}, final: true},
		{id: id("fixed"), v: value{6, 6}, final: true},
		{id: id("extra"), v: value{1, 1}, final: true},
	}
	v := audit(s, got, want)
	if v.audited != 5 || v.lost != 1 || v.wrong != 1 || v.dup != 3 || v.unexpected != 1 || v.early != 2 || v.records != len(got) {
		t.Errorf("audit = %+v", v)
	}
	v.status = "running"
	v.lateTopic = 0
	if !v.failed() {
		t.Error("lost, wrong and unexpected panes must fail the audit")
	}
	clean := audit(s, got[1:2], map[paneID]value{id("ok"): {2, 3}})
	clean.status = "running"
	if clean.failed() {
		t.Errorf("an exact audit failed: %+v", clean)
	}
	for _, late := range []*int64{&clean.late, &clean.lateMetric, &clean.lateTopic} {
		*late = 1
		if !clean.failed() {
			t.Error("a late row must fail the audit")
		}
		*late = 0
	}
	clean.status = "failed: boom"
	if !clean.failed() {
		t.Error("a stream that is not running must fail the audit")
	}
	// A duplicated pane is counted under at-least-once, and fails
	// exactly-once.
	dupGot := []pane{got[1], got[1]}
	al := audit(s, dupGot, map[paneID]value{id("ok"): {2, 3}})
	al.status = "running"
	if al.dup != 1 || al.failed() {
		t.Errorf("at-least-once duplicate: %+v", al)
	}
	s.guarantee = "exactly_once"
	eo := audit(s, dupGot, map[paneID]value{id("ok"): {2, 3}})
	eo.status = "running"
	if eo.dup != 1 || !eo.failed() {
		t.Errorf("exactly-once duplicate must fail: %+v", eo)
	}
	// An upsert stream repeats a key at every commit: not duplicates.
	u := audit(streamSpec{kind: upsert}, []pane{{id: paneID{key: "k"}, v: value{1, 1}, final: true}, {id: paneID{key: "k"}, v: value{2, 2}, final: true}},
		map[paneID]value{{key: "k"}: {2, 2}})
	if u.dup != 0 || u.wrong != 0 {
		t.Errorf("upsert audit = %+v", u)
	}
}

func TestParsePane(t *testing.T) {
	p, err := parsePane(streamSpec{kind: session, plan: repartition},
		[]byte(`{"user_id":"user-01","ws":"2026-01-01T00:00:01.5Z","we":"2026-01-01T00:00:04Z","n":3,"total":-12}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := (pane{id: paneID{"user-01", at(1.5), at(4)}, v: value{3, -12}, final: true}); p != want {
		t.Errorf("got %+v, want %+v", p, want)
	}
	p, err = parsePane(streamSpec{kind: emit, plan: local}, []byte(`{"tenant":"t","ws":"2026-01-01T00:00:10Z","n":1,"total":2,"is_final":false}`))
	if err != nil || p.final || p.id != (paneID{"t", at(10), at(20)}) {
		t.Errorf("got %+v, %v", p, err)
	}
	if _, err := parsePane(streamSpec{kind: emit, plan: local}, []byte(`{"tenant":"t","ws":"2026-01-01T00:00:10Z","n":1,"total":2}`)); err == nil {
		t.Error("an EMIT EVERY pane without is_final must not parse")
	}
}

// TestCheckIdentity: a pane's identity headers must match its value; an
// upsert stream's records carry none.
func TestCheckIdentity(t *testing.T) {
	s := streamSpec{name: "tumble_local", kind: tumble, plan: local}
	p := pane{id: paneID{"t", at(10), at(20)}, v: value{1, 2}, final: true}
	rec := func(start int64, key string) *kgo.Record {
		return &kgo.Record{Value: []byte(`{}`), Headers: []kgo.RecordHeader{
			{Key: "turbine.stream", Value: []byte("tumble_local")},
			{Key: "turbine.window.start", Value: []byte(strconv.FormatInt(start, 10))},
			{Key: "turbine.window.end", Value: []byte(strconv.FormatInt(at(20), 10))},
			{Key: "turbine.key", Value: []byte(key)},
		}}
	}
	if err := checkIdentity(s, p, rec(at(10), "t")); err != nil {
		t.Errorf("the pane's own identity: %v", err)
	}
	if err := checkIdentity(s, p, rec(at(0), "t")); err == nil {
		t.Error("another window's start must not pass")
	}
	if err := checkIdentity(s, p, rec(at(10), "u")); err == nil {
		t.Error("another key must not pass")
	}
	if err := checkIdentity(s, p, &kgo.Record{Value: []byte(`{}`)}); err == nil {
		t.Error("a pane without headers must not pass")
	}
	if err := checkIdentity(streamSpec{kind: upsert}, pane{id: paneID{key: "t"}}, rec(at(10), "t")); err == nil {
		t.Error("an upsert record with pane headers must not pass")
	}
}

// The input's promise: every tick feeds every partition, each key sits on
// the partition murmur2 gives it, and no row is older than its partition's
// watermark (largest event time so far minus the delay) when it arrives,
// so no row can be late under any interleaving of partitions.
func TestInputCannotBeLate(t *testing.T) {
	const parts = 4
	w := &workload{parts: parts, keys: newKeys(parts, defaultUsers), rng: rand.New(rand.NewPCG(3, 2))}
	for p, ts := range w.keys.tenants {
		for _, k := range ts {
			if got := state.PartitionFor([]byte(k), parts); got != int32(p) {
				t.Fatalf("tenant %s in pool %d, murmur2 places it on %d", k, p, got)
			}
		}
	}
	maxTS := make([]int64, parts)
	for p := range maxTS {
		maxTS[p] = -1 << 62
	}
	for i := int64(0); i < 5000; i++ {
		fed := make([]int, parts)
		for _, r := range w.tick(i) {
			fed[r.part]++
			if r.ts <= maxTS[r.part]-delayMs {
				t.Fatalf("tick %d: row at %d behind partition %d's watermark %d", i, r.ts, r.part, maxTS[r.part]-delayMs)
			}
			// Another row of this tick may be read first: the row must
			// also beat a watermark at its own tick's time.
			if r.ts <= base+i*tickMs-delayMs {
				t.Fatalf("tick %d: row at %d can be late within its tick", i, r.ts)
			}
			maxTS[r.part] = max(maxTS[r.part], r.ts)
		}
		for p, n := range fed {
			if n != rowsPerPart {
				t.Fatalf("tick %d fed partition %d %d rows", i, p, n)
			}
		}
	}
	for _, r := range w.final(5000) {
		if r.ts-delayMs < base+5000*tickMs+hopSize {
			t.Fatalf("the final row at %d does not close the last windows", r.ts)
		}
	}
}

func TestSpecs(t *testing.T) {
	got := map[string]bool{}
	for _, s := range specs("p-", "exactly_once") {
		got[s.name] = true
		q := s.sql()
		if !strings.Contains(q, "strategy = '"+string(s.plan)+"'") || !strings.Contains(q, "GROUP BY "+s.keyCol()) ||
			!strings.Contains(q, "processing_guarantee = 'exactly_once'") || !strings.Contains(q, "topic = 'p-out_") {
			t.Errorf("%s: %s", s.name, q)
		}
		if s.plan == combine && (s.kind == session || s.kind == upsert || s.lateTopic() != "") {
			t.Errorf("combine takes TUMBLE and HOP windows (EMIT EVERY too) and no late-data topic: %+v", s)
		}
	}
	for _, k := range []string{"tumble", "hop", "session", "emit", "upsert"} {
		for _, p := range []string{"local", "repartition"} {
			if !got[k+"_"+p] {
				t.Errorf("no stream %s_%s", k, p)
			}
		}
	}
	if !got["tumble_combine"] || !got["hop_combine"] || !got["emit_combine"] || len(got) != 13 {
		t.Errorf("streams: %v", got)
	}
}
