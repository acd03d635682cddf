package dataflow

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/turbinesql/turbinesql/kafkaio"
	"github.com/turbinesql/turbinesql/state"
)

// TestChangeArena: every record of a commit keeps its own key and value
// (the changelog encoding of the store value, nil for a deletion) however
// many share a block, values larger than a block included, and the bytes
// handed in may be reused by the caller at once (as a store iterator's
// are).
func TestChangeArena(t *testing.T) {
	a := changeArena{now: time.UnixMilli(1_700_000_000_000)}
	type want struct{ k, v []byte }
	var wants []want
	var got []*kafkaio.Record
	scratchK, scratchV := make([]byte, 0, 1<<20), make([]byte, 0, 1<<20)
	for i := 0; i < 3*changeRecs+7; i++ {
		k := fmt.Appendf(scratchK[:0], "key-%d", i)
		var v []byte
		switch {
		case i%5 == 0: // a deletion
		case i%97 == 1:
			v = bytes.Repeat([]byte{byte(i)}, changeBlock+i) // larger than a block
		default:
			v = fmt.Appendf(scratchV[:0], "value-%d", i*i)
		}
		wants = append(wants, want{append([]byte(nil), k...), append([]byte(nil), v...)})
		if v == nil {
			wants[len(wants)-1].v = nil
		}
		got = append(got, a.record("clog", 3, k, v))
		// The caller's buffers are reused at once.
		for j := range k {
			k[j] = 'x'
		}
		for j := range v {
			v[j] = 'y'
		}
	}
	for i, w := range wants {
		g := got[i]
		if !bytes.Equal(g.Key, w.k) {
			t.Fatalf("record %d: key %q, want %q", i, g.Key, w.k)
		}
		if w.v == nil {
			if g.Value != nil {
				t.Fatalf("record %d: deletion has value %q", i, g.Value)
			}
		} else if !bytes.Equal(g.Value, state.EncodeChange(w.v)) {
			t.Fatalf("record %d: value %q, want %q", i, g.Value[:min(len(g.Value), 32)], state.EncodeChange(w.v)[:min(len(w.v), 32)])
		}
		if g.Partition != 3 || !g.Timestamp.Equal(a.now) {
			t.Fatalf("record %d: partition %d, time %v", i, g.Partition, g.Timestamp)
		}
		// A key or value never reaches into the next record's bytes.
		if cap(g.Key) != len(g.Key) || (g.Value != nil && cap(g.Value) != len(g.Value)) {
			t.Fatalf("record %d: key or value has spare capacity", i)
		}
	}
}
