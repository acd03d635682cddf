package rescale

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/turbinesql/turbinesql/state"
)

// TestCopiesMoveRunEntriesAsDeltas: a moved group's partials stored in
// runs (state's runs.go: several per group, not adjacent in key order)
// arrive as classic partials of the group, numbered apart from its
// classic ones, none lost to a repeated id; runs' markers stay.
func TestCopiesMoveRunEntriesAsDeltas(t *testing.T) {
	const name = "s"
	scope := state.Scope(name, 0)
	g, h := []byte("\x01g"), []byte("\x01h")
	src := map[string][]byte{}
	src[string(state.GroupKey(scope, 7, 1, g))] = []byte("base")
	// A classic partial of g (its key: a run entry's, less the run).
	src[string(state.RunEntryAsDelta(name, state.RunKey(scope, 7, 1, 1, g, state.DeltaID{Gen: 5})))] = []byte("c")
	src[string(state.RunKey(scope, 7, 1, 1, g, state.DeltaID{Gen: 7, Seq: 1}))] = []byte("r1g")
	src[string(state.RunKey(scope, 7, 1, 1, h, state.DeltaID{Gen: 7, Seq: 2}))] = []byte("r1h")
	src[string(state.RunKey(scope, 7, 2, 1, g, state.DeltaID{Gen: 9, Seq: 0}))] = []byte("r2g")
	src[string(state.RunMarker(scope, 7, 1))] = []byte{}
	src[string(state.RunMarker(scope, 7, 2))] = []byte{}
	p := &plan{s: stream{name: name}, n: 1, m: 2, state: []map[string][]byte{src}}
	out, err := p.copies()
	if err != nil {
		t.Fatal(err)
	}
	to := state.Scope(name, 1)
	moved := func(key []byte, seq uint64) string {
		return string(state.WithDeltaID(state.RunEntryAsDelta(name, state.RunKey(to, 7, 0, 1, key, state.DeltaID{})), state.DeltaID{Gen: state.MovedDeltaGen, Seq: seq}))
	}
	want := map[string]string{
		string(state.GroupKey(to, 7, 1, g)): "base",
		moved(g, 0):                         "c",
		moved(g, 1):                         "r1g",
		moved(g, 2):                         "r2g",
		moved(h, 0):                         "r1h",
	}
	got := map[string]string{}
	for k, v := range out[1] {
		got[k] = string(v)
	}
	if !maps.Equal(got, want) {
		keys := func(m map[string]string) []string {
			var l []string
			for k, v := range m {
				l = append(l, fmt.Sprintf("%x=%s", k, v))
			}
			slices.Sort(l)
			return l
		}
		t.Fatalf("partition 1 receives\n %v\nwant\n %v", keys(got), keys(want))
	}
	if len(out[0]) != 0 {
		t.Fatalf("partition 0 receives %d records: markers must stay where they are", len(out[0]))
	}
}
