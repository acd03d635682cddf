package exec

import (
	"bytes"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/types"
)

var fuzzSchema = types.Schema{
	{Name: "s", Type: types.Text},
	{Name: "i", Type: types.Int},
	{Name: "f", Type: types.Double},
	{Name: "b", Type: types.Bool},
	{Name: "ts", Type: types.Timestamp},
}

// FuzzDecodeJSON feeds arbitrary bytes, split into records at newlines, to
// the JSON decoder. It must never panic or leak Arrow memory; every record
// is either a row of the batch or a DecodeError, and decoding a record on
// its own gives the same outcome and values as decoding it in the batch
// (no state leaks from one record into the next).
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"s":"a","i":1,"f":1.5,"b":true,"ts":1700000000000}`,
		`{"s":"ñandú","i":-9223372036854775808,"f":-0.0,"b":false,"ts":"2026-01-01T00:00:00.123Z"}`,
		`{"s":null,"i":null,"f":null,"b":null,"ts":null}`,
		`{}`,
		`[]`,
		`nul`,
		``,
		`{"i":"1"}`,
		`{"i":1.5}`,
		`{"i":1e30}`,
		`{"i":9223372036854775808}`,
		`{"f":"NaN","ts":"2026-01-01 10:00:00"}`,
		`{"f":"Infinity"}`,
		`{"f":1e999}`,
		`{"ts":"yesterday"}`,
		`{"ts":1.5}`,
		"{\"s\":\"\xff\xfe\"}",
		`{"s":"\u0000\ud800"}`,
		`{"b":1}`,
		`{"s":"a","s":"b"}`,
		"{\"s\":\"a\"}\n{\"i\":\"x\"}\n{\"i\":2}",
		"{\"i\":1}\n\n{\"f\":2}",
		`{"s":{"nested":[1,2,{"x":null}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		dec := NewJSONDecoder(fuzzSchema, mem)
		records := bytes.Split(data, []byte("\n"))
		rec, ok, errs := dec.Decode(records)
		defer rec.Release()
		if int(rec.NumCols()) != len(fuzzSchema) {
			t.Fatalf("%d columns, want %d", rec.NumCols(), len(fuzzSchema))
		}
		if int(rec.NumRows()) != len(ok) {
			t.Fatalf("%d rows for %d decoded records", rec.NumRows(), len(ok))
		}
		// ok and errs partition the record indices, each in order.
		seen := make([]int, len(records))
		last := -1
		for _, k := range ok {
			if k <= last || k >= len(records) {
				t.Fatalf("ok indices out of order or range: %v", ok)
			}
			last = k
			seen[k]++
		}
		last = -1
		for _, e := range errs {
			if e.Index <= last || e.Index >= len(records) || e.Err == nil {
				t.Fatalf("bad DecodeError %+v", e)
			}
			last = e.Index
			seen[e.Index]++
		}
		for k, n := range seen {
			if n != 1 {
				t.Fatalf("record %d reported %d times", k, n)
			}
		}
		b := BatchOf(rec, fuzzSchema)
		for c, v := range b.Cols {
			if v.N != len(ok) || !v.typed() || (v.Null != nil && len(v.Null) != v.N) {
				t.Fatalf("column %d: bad Vec %+v", c, v)
			}
		}
		// Each record alone decodes to the same outcome and values.
		row := 0
		for k, r := range records {
			one, okOne, _ := dec.Decode([][]byte{r})
			if (len(okOne) == 1) != (row < len(ok) && ok[row] == k) {
				one.Release()
				t.Fatalf("record %d: alone ok=%v, in batch ok=%v", k, len(okOne) == 1, row < len(ok) && ok[row] == k)
			}
			if len(okOne) == 1 {
				ob := BatchOf(one, fuzzSchema)
				for c := range fuzzSchema {
					got, want := ob.Cols[c].Value(0), b.Cols[c].Value(row)
					if !sameFuzzValue(got, want) {
						one.Release()
						t.Fatalf("record %d column %s: alone %#v, in batch %#v", k, fuzzSchema[c].Name, got, want)
					}
				}
				row++
			}
			one.Release()
		}
	})
}

func sameFuzzValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && (x == y || x != x && y != y)
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	}
	return a == b
}
