package dataflow_test

import (
	"fmt"
	"strconv"
	"testing"

	. "github.com/turbinesql/turbinesql/dataflow"
	"github.com/turbinesql/turbinesql/dataflow/optest"
	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/streamplan"
)

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
				var dead optest.Output
				counted := map[string]int64{}
				for _, stage := range stages {
					switch stage {
					case "windowed", "stateless":
						task := evHarness(t, 2, chain(func() []Op {
							return []Op{&Source{Input: rel, TimeIdx: 3, DLQ: dlqOne, Letters: letters, TimeRequired: stage == "windowed", TimeRequiredIdx: 3}}
						})).Task(1)
						task.PushRecords(recs...)
						task.Commit()
						dead = append(dead, task.Take()...)
						counted[stage] = task.Counts().DLQ
					case "hop":
						k := optest.NewKafka()
						hop := evHarness(t, 2, func(c *optest.Config) { c.Name, c.Kafka = "hop", k }, chain(func() []Op {
							return []Op{&Source{Input: rel, TimeIdx: 3, DLQ: dlqOne, Letters: letters},
								&Exchange{Topic: "rep", Partitions: 1, Col: 1, TimeCols: []int{3}}}
						})).Task(1)
						hop.PushRecords(recs...)
						hop.Commit()
						dead = append(dead, hop.Take().Topic("ev.dlq")...)
						counted["hop"] = hop.Counts().DLQ
						// The stream behind the hop reads its copies (at the hop
						// topic's own offsets).
						reader := optest.New(t, optest.Config{Topic: "rep", Kafka: k, Ops: func(int32) []Op {
							return []Op{&Markers{Sources: 2},
								&Source{Input: rel, TimeIdx: -1, DLQ: dlqOne, Letters: letters, FromHop: true, TimeRequired: true, TimeRequiredIdx: 3}}
						}}).Task(0)
						reader.Poll()
						reader.Commit()
						dead = append(dead, reader.Take()...)
						counted["hop"] += reader.Counts().DLQ
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
