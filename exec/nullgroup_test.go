package exec

import (
	"testing"

	"github.com/turbinesql/turbinesql/agg"
	"github.com/turbinesql/turbinesql/state"
	"github.com/turbinesql/turbinesql/types"
)

// TestNullKeyHasItsOwnGroup: a NULL partition key and the empty text hash
// the same bytes, but NULL keys go to any partition, so their state lives
// in a key group of its own (state.NullGroup) on every partition, apart
// from the empty text's, which murmur2 places like any other key.
func TestNullKeyHasItsOwnGroup(t *testing.T) {
	k := &ColRef{Idx: 0, Name: "k", T: types.Text}
	a, err := NewAggregator(AggConfig{Keys: []Expr{k}, PK: 0, TimeIdx: -1,
		Specs: []agg.Spec{{Name: "COUNT", Star: true}}, Args: [][]Expr{nil}})
	if err != nil {
		t.Fatal(err)
	}
	b := &Batch{N: 3, Cols: []*Vec{{T: types.Text, N: 3, S: []string{"", "", "x"}, Null: []bool{true, false, false}}}}
	if _, err := a.Consume(b, 0, false); err != nil {
		t.Fatal(err)
	}
	groups := map[string]uint16{}
	for _, s := range a.Table.AllSlots() {
		groups[string(a.Table.Key(s))] = a.Table.Meta(s).KG
	}
	if len(groups) != 3 {
		t.Fatalf("%d groups, want 3 (NULL, '', 'x')", len(groups))
	}
	var null, empty, x int
	for _, kg := range groups {
		switch kg {
		case state.NullGroup:
			null++
		case state.KeyGroup([]byte("")):
			empty++
		case state.KeyGroup([]byte("x")):
			x++
		}
	}
	if null != 1 || empty != 1 || x != 1 {
		t.Fatalf("key groups %v: want one NULL group (%d), one for '' (%d), one for 'x'", groups, state.NullGroup, state.KeyGroup(nil))
	}
}
