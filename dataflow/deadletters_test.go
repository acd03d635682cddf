package dataflow

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/streamplan"
)

// TestDeadLettersClaimEachOffset: a claim is per record, whatever order
// the offsets come in; a claim given back can be taken again; past the
// bound the lowest offsets are forgotten (claimable again: a duplicate at
// worst, never a record refused that nobody wrote).
func TestDeadLettersClaimEachOffset(t *testing.T) {
	src := Letters{"src", "src.dlq"}
	d := NewDeadLetters()
	for _, off := range []int64{9, 3, 5, 4} {
		if !d.Claim(src, 0, off) {
			t.Fatalf("offset %d refused: nobody claimed it", off)
		}
	}
	if !d.Claim(src, 1, 3) || !d.Claim(Letters{"other", "src.dlq"}, 0, 3) || !d.Claim(Letters{"src", "elsewhere"}, 0, 3) {
		t.Fatal("offset 3 of another partition, source or dead-letter topic refused")
	}
	for _, off := range []int64{3, 4, 5, 9} {
		if d.Claim(src, 0, off) {
			t.Fatalf("offset %d claimed twice", off)
		}
	}
	d.Release(src, 0, 4)
	if !d.Claim(src, 0, 4) || d.Claim(src, 0, 3) || d.Claim(src, 0, 5) {
		t.Fatal("Release gave back more or less than offset 4")
	}
	d.Seen(src, 0, 7)
	if d.Claim(src, 0, 7) {
		t.Fatal("an offset seen in the dead-letter topic was claimed")
	}

	b := NewDeadLetters()
	b.MaxPerPartition = 8
	for off := int64(0); off < 20; off++ {
		b.Claim(src, 0, off)
	}
	if n := len(b.claimed[src][0]); n > 8 {
		t.Fatalf("%d offsets kept, bound 8", n)
	}
	if b.Claim(src, 0, 19) || b.Claim(src, 0, 18) {
		t.Fatal("the latest claims were forgotten")
	}
	if !b.Claim(src, 0, 0) {
		t.Fatal("offset 0, forgotten, should be claimable again")
	}
}

// TestDeadLettersEveryOrder: one batch holds, in every order, an
// undecodable record, a row without an event time and a row with a field
// of the wrong type (and good rows around them). Stages reading the
// source (a windowed stream, a stateless one, and a repartition hop with
// a windowed stream behind it) share one registry and run in every order:
// the dead-letter records written hold each bad record exactly once, as it
// was (key, value, source position), and each stage counts what it did
// not use.
func TestDeadLettersEveryOrder(t *testing.T) {
	bad := map[string]string{
		"undecodable": `{"k": "x", "u": "u1", "v": 1, "ts": 10`,
		"no_time":     `{"k": "y", "u": "u2", "v": 2, "ts": null}`,
		"wrong_type":  `{"k": "z", "u": "u3", "v": "seven", "ts": 3000}`,
	}
	for _, order := range permutations([]string{"undecodable", "no_time", "wrong_type"}) {
		for _, stages := range permutations([]string{"windowed", "stateless", "hop"}) {
			t.Run(fmt.Sprint(order, stages), func(t *testing.T) {
				src := *evSource
				src.OnError, src.DLQTopic = streamplan.OnErrorDLQ, "ev.dlq"
				rel := evRelation(&src)
				var recs []*kafkaio.Record
				want := map[int64]string{} // offset → kind
				add := func(key, value string) int64 {
					off := int64(len(recs))
					recs = append(recs, &kafkaio.Record{Topic: "ev", Partition: 1, Offset: off, Key: []byte(key), Value: []byte(value)})
					return off
				}
				add("a", `{"k": "a", "u": "u1", "v": 1, "ts": 1000}`)
				for i, kind := range order {
					want[add(kind, bad[kind])] = kind
					add("b", fmt.Sprintf(`{"k": "b", "u": "u2", "v": %d, "ts": 2000}`, i))
				}
				letters := NewDeadLetters()
				dlq := func(context.Context, string) int { return 1 }
				var dead []*kafkaio.Record
				counted := map[string]int64{}
				for _, stage := range stages {
					switch stage {
					case "windowed", "stateless":
						s := &Source{Input: rel, TimeIdx: 3, DLQ: dlq, Letters: letters, TimeRequired: stage == "windowed", TimeRequiredIdx: 3}
						r := newRig(t, nil, 1, 2, s)
						if _, err := s.Process(context.Background(), &Batch{Partition: 1, Recs: recs}); err != nil {
							t.Fatal(err)
						}
						dead = append(dead, r.out.take()...)
						counted[stage] = r.env.Counts.DLQ.Load()
					case "hop":
						hop := newRig(t, nil, 1, 2, &Source{Input: rel, TimeIdx: 3, DLQ: dlq, Letters: letters},
							&Exchange{Topic: "rep", Partitions: 1, Col: 1, TimeCols: []int{3}})
						hop.feed(recs)
						var copies []*kafkaio.Record
						for _, r := range hop.out.take() {
							if r.Topic == "rep" {
								r.Offset = int64(100 + len(copies)) // the hop topic's own offsets
								copies = append(copies, r)
							} else {
								dead = append(dead, r)
							}
						}
						counted["hop"] = hop.env.Counts.DLQ.Load()
						s := &Source{Input: rel, TimeIdx: -1, DLQ: dlq, Letters: letters, FromHop: true, TimeRequired: true, TimeRequiredIdx: 3}
						r := newRig(t, nil, 0, 1, s)
						if _, err := s.Process(context.Background(), &Batch{Partition: 0, Recs: copies}); err != nil {
							t.Fatal(err)
						}
						dead = append(dead, r.out.take()...)
						counted["hop"] += r.env.Counts.DLQ.Load()
					}
				}
				got := map[int64]int{}
				for _, d := range dead {
					hdr := map[string]string{}
					for _, h := range d.Headers {
						hdr[h.Key] = string(h.Value)
					}
					off, _ := strconv.ParseInt(hdr["turbine.source.offset"], 10, 64)
					kind, ok := want[off]
					if !ok || hdr["turbine.source.topic"] != "ev" || hdr["turbine.source.partition"] != "1" || hdr["turbine.source"] != "ev" {
						t.Fatalf("dead letter of %v (%q), not one of the bad records %v", hdr, d.Value, want)
					}
					if string(d.Key) != kind || string(d.Value) != bad[kind] || d.Topic != "ev.dlq" {
						t.Fatalf("dead letter of offset %d is %q/%q on %s, want the record as it was: %q/%q", off, d.Key, d.Value, d.Topic, kind, bad[kind])
					}
					got[off]++
				}
				for off, kind := range want {
					if got[off] != 1 {
						t.Errorf("the %s record (offset %d) is in the dead-letter topic %d times, want once", kind, off, got[off])
					}
				}
				// A windowed stream does not use any of the three; a stateless
				// one uses the row without an event time.
				for stage, n := range map[string]int64{"windowed": 3, "stateless": 2, "hop": 3} {
					if counted[stage] != n {
						t.Errorf("%s counted %d dead-lettered, want %d", stage, counted[stage], n)
					}
				}
			})
		}
	}
}

// permutations lists every order of xs.
func permutations(xs []string) [][]string {
	if len(xs) <= 1 {
		return [][]string{append([]string{}, xs...)}
	}
	var out [][]string
	for i := range xs {
		rest := append(append([]string{}, xs[:i]...), xs[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]string{xs[i]}, p...))
		}
	}
	return out
}
