package placement

import (
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/state"
)

type fakeBroker struct {
	count, end int
	asked      int
}

func (b *fakeBroker) Count() (int, error) { b.asked++; return b.count, nil }
func (b *fakeBroker) End() (int64, error) { return int64(b.end), nil }

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newChecker(p int32, n int) (*Checker, *fakeBroker, *clock) {
	b := &fakeBroker{count: n}
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	ch := &Checker{Partition: p, Window: 10 * time.Minute, Now: c.now, Broker: b}
	if _, err := ch.Start(n, 0); err != nil {
		panic(err)
	}
	return ch, b, c
}

// keysFor returns k distinct keys murmur2 places on p of n.
func keysFor(p int32, n, k int, prefix string) [][]byte {
	var out [][]byte
	for i := 0; len(out) < k; i++ {
		key := []byte(fmt.Sprintf("%s%d", prefix, i))
		if state.PartitionFor(key, n) == p {
			out = append(out, key)
		}
	}
	return out
}

func rowsOf(keys [][]byte, off int64) []Row {
	rows := make([]Row, len(keys))
	for i, k := range keys {
		rows[i] = Row{Key: k, Offset: off + int64(i)}
	}
	return rows
}

func TestThreshold(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 40, 4: 20, 8: 14, 12: 12, 960: 5} {
		if got := Threshold(n); got != want {
			t.Errorf("Threshold(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestLooksRightPastThreshold(t *testing.T) {
	for _, n := range []int{1, 2, 4, 12} {
		ch, b, _ := newChecker(0, n)
		keys := keysFor(0, n, Threshold(n), "k")
		// One busy key counts once.
		busy := make([][]byte, 50)
		for i := range busy {
			busy[i] = keys[0]
		}
		if err := ch.Judge(rowsOf(busy, 0)); err != nil {
			t.Fatal(err)
		}
		if n > 1 && ch.Verdict != Unknown {
			t.Fatalf("n=%d: one busy key gave verdict %d", n, ch.Verdict)
		}
		if err := ch.Judge(rowsOf(keys[:len(keys)-1], 100)); err != nil {
			t.Fatal(err)
		}
		if n > 1 && (ch.Verdict != Unknown || ch.WellPlaced() != Threshold(n)-1) {
			t.Fatalf("n=%d: below threshold: verdict %d, %d keys", n, ch.Verdict, ch.WellPlaced())
		}
		if err := ch.Judge(rowsOf(keys[len(keys)-1:], 200)); err != nil {
			t.Fatal(err)
		}
		if ch.Verdict != LooksOK {
			t.Fatalf("n=%d: at threshold verdict %d", n, ch.Verdict)
		}
		if b.asked != 0 {
			t.Fatalf("n=%d: the broker was asked %d times without a suspicion", n, b.asked)
		}
	}
}

func TestNullKeysAreNoEvidence(t *testing.T) {
	ch, b, _ := newChecker(1, 2)
	rows := make([]Row, 100)
	for i := range rows {
		rows[i] = Row{Null: true, Offset: int64(i)}
	}
	if err := ch.Judge(rows); err != nil {
		t.Fatal(err)
	}
	if ch.Verdict != Unknown || ch.WellPlaced() != 0 || b.asked != 0 {
		t.Fatalf("null keys: verdict %d, %d keys, %d asks", ch.Verdict, ch.WellPlaced(), b.asked)
	}
}

func TestCRC32ProducerIsMisplacedAndStaysSo(t *testing.T) {
	ch, b, _ := newChecker(0, 4)
	var rows []Row
	for i := 0; len(rows) < 10; i++ {
		k := []byte(fmt.Sprintf("user-%d", i))
		if crc32.ChecksumIEEE(k)%4 == 0 {
			rows = append(rows, Row{Key: k, Offset: int64(i)})
		}
	}
	if err := ch.Judge(rows); err != nil {
		t.Fatal(err)
	}
	if ch.Verdict != Misplaced || b.asked != 1 {
		t.Fatalf("verdict %d after %d asks", ch.Verdict, b.asked)
	}
	// Durable: through Encode/Decode, and well-placed keys do not lift it.
	st, err := Decode(ch.Encode())
	if err != nil {
		t.Fatal(err)
	}
	ch2 := &Checker{State: st, Partition: 0, Window: time.Minute, Now: time.Now, Broker: b}
	if _, err := ch2.Start(4, 100); err != nil {
		t.Fatal(err)
	}
	if err := ch2.Judge(rowsOf(keysFor(0, 4, 40, "w"), 200)); err != nil {
		t.Fatal(err)
	}
	if ch2.Verdict != Misplaced {
		t.Fatalf("verdict %d after restart", ch2.Verdict)
	}
}

func TestTransitionWindow(t *testing.T) {
	ch, b, clk := newChecker(1, 4)
	ch.Verdict = LooksOK
	// Restart on 8: a window opens, the verdict goes back to 0.
	st, _ := Decode(ch.Encode())
	ch = &Checker{State: st, Partition: 1, Window: 10 * time.Minute, Now: clk.now, Broker: b}
	b.count = 8
	isNew, err := ch.Start(8, 1000)
	if err != nil || !isNew || !ch.Open || ch.Verdict != Unknown || ch.History() != "4,8" || !ch.CleanupDue || ch.CleanupReady() {
		t.Fatalf("start on 8: new %v err %v open %v verdict %d history %s", isNew, err, ch.Open, ch.Verdict, ch.History())
	}
	// A key placed on 1 under 4 but on 5 under 8: excused inside.
	old := keysFor(1, 4, 200, "o")
	var moved [][]byte
	for _, k := range old {
		if state.PartitionFor(k, 8) == 5 {
			moved = append(moved, k)
		}
	}
	good := keysFor(1, 8, 30, "g")
	if err := ch.Judge(rowsOf(append(moved[:5:5], good...), 1000)); err != nil {
		t.Fatal(err)
	}
	if ch.Verdict != Unknown || ch.WellPlaced() != 0 {
		t.Fatalf("inside the window: verdict %d, %d keys (well-placed ones count for nothing)", ch.Verdict, ch.WellPlaced())
	}
	// Time passes: the log end is noted, records before it still excused.
	b.end = 5000
	clk.t = clk.t.Add(11 * time.Minute)
	if err := ch.Tick(1100); err != nil || !ch.Open || ch.NotedEnd != 5000 {
		t.Fatalf("after the time: open %v noted %d err %v", ch.Open, ch.NotedEnd, err)
	}
	if err := ch.Judge(rowsOf(moved[5:10], 4000)); err != nil || ch.Verdict != Unknown {
		t.Fatalf("backlog before the noted end: verdict %d err %v", ch.Verdict, err)
	}
	if err := ch.Tick(5000); err != nil || ch.Open || ch.Transition() != "closed at offset 5000" || !ch.CleanupReady() {
		t.Fatalf("read past the end: open %v %s", ch.Open, ch.Transition())
	}
	// After it: a record placed under 4 is misplaced.
	asked := b.asked
	if err := ch.Judge(rowsOf(moved[10:11], 5001)); err != nil {
		t.Fatal(err)
	}
	if ch.Verdict != Misplaced || b.asked != asked+1 || ch.CleanupReady() {
		t.Fatalf("after the window: verdict %d, asks %d", ch.Verdict, b.asked-asked)
	}
}

func TestStartUpNeverClosesByClock(t *testing.T) {
	ch, b, clk := newChecker(0, 2)
	b.count = 4
	st, _ := Decode(ch.Encode())
	ch = &Checker{State: st, Partition: 0, Window: 10 * time.Minute, Now: clk.now, Broker: b}
	if _, err := ch.Start(4, 10); err != nil {
		t.Fatal(err)
	}
	// An hour later, restarted with a backlog: the end is noted as it is
	// now, and the backlog is read inside the window.
	clk.t = clk.t.Add(time.Hour)
	b.end = 100_000
	st, _ = Decode(ch.Encode())
	ch = &Checker{State: st, Partition: 0, Window: 10 * time.Minute, Now: clk.now, Broker: b}
	if isNew, err := ch.Start(4, 10); err != nil || isNew || !ch.Open || ch.NotedEnd != 100_000 {
		t.Fatalf("lagging restart: new %v open %v noted %d err %v", isNew, ch.Open, ch.NotedEnd, err)
	}
	var under2 [][]byte
	for _, k := range keysFor(0, 2, 100, "b") {
		if state.PartitionFor(k, 4) != 0 {
			under2 = append(under2, k)
		}
	}
	if err := ch.Judge(rowsOf(under2, 50_000)); err != nil || ch.Verdict != Unknown {
		t.Fatalf("backlog: verdict %d err %v", ch.Verdict, err)
	}
}

func TestCountSeenWhileRunning(t *testing.T) {
	ch, b, _ := newChecker(0, 2)
	var from, to int
	ch.Changed = func(f, t int) { from, to = f, t }
	// A record placed under a count the partition has not seen yet:
	// 2 to 3, where keys murmur2 puts on 0 of 3 are on 1 of 2.
	b.count = 3
	var keys [][]byte
	for _, k := range keysFor(0, 3, 50, "r") {
		if state.PartitionFor(k, 2) != 0 {
			keys = append(keys, k)
		}
	}
	if err := ch.Judge(rowsOf(keys, 0)); err != nil {
		t.Fatal(err)
	}
	if ch.Verdict != Unknown || !ch.Open || from != 2 || to != 3 || ch.History() != "2,3" || b.asked != 1 {
		t.Fatalf("verdict %d open %v change %d->%d history %s asks %d", ch.Verdict, ch.Open, from, to, ch.History(), b.asked)
	}
}

func TestSampleBounds(t *testing.T) {
	ch, _, _ := newChecker(0, 2)
	seen := map[int]bool{}
	for round := 0; round < 20; round++ {
		s := ch.Sample(1000)
		if len(s) != SampleRows {
			t.Fatalf("sampled %d", len(s))
		}
		for _, i := range s {
			if i < 0 || i >= 1000 {
				t.Fatalf("row %d", i)
			}
			seen[i] = true
		}
	}
	if len(seen) <= SampleRows {
		t.Fatalf("sampling does not rotate: %d rows seen", len(seen))
	}
	if got := ch.Sample(10); len(got) != 10 {
		t.Fatalf("small batch sampled %d", len(got))
	}
}
