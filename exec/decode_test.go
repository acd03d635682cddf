package exec

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/turbinesql/turbinesql/types"
)

func TestDecodeJSONValues(t *testing.T) {
	cases := []struct {
		rec  string
		col  string
		want any    // decoded value (nil: NULL)
		err  string // or a substring of the DecodeError
	}{
		{`{"i":42}`, "i", int64(42), ""},
		{`{"i":1.0}`, "i", int64(1), ""},
		{`{"i":1e3}`, "i", int64(1000), ""},
		{`{"i":-9223372036854775808}`, "i", int64(math.MinInt64), ""},
		{`{"i":1.5}`, "i", nil, "want a BIGINT"},
		{`{"i":1e19}`, "i", nil, "BIGINT out of range"},
		{`{"i":"1"}`, "i", nil, "want a BIGINT"},
		{`{"i":null}`, "i", nil, ""},
		{`{}`, "i", nil, ""},
		{`{"f":2.5}`, "f", 2.5, ""},
		{`{"f":"NaN"}`, "f", math.NaN(), ""},
		{`{"f":"-Infinity"}`, "f", math.Inf(-1), ""},
		{`{"f":1e999}`, "f", nil, "DOUBLE out of range"},
		{`{"f":"2.5"}`, "f", nil, "want a DOUBLE"},
		{`{"s":"ñandú"}`, "s", "ñandú", ""},
		{`{"s":""}`, "s", "", ""},
		{`{"s":1}`, "s", nil, "want TEXT"},
		{`{"b":true}`, "b", true, ""},
		{`{"b":1}`, "b", nil, "want a BOOLEAN"},
		{`{"ts":1000}`, "ts", ts("1970-01-01T00:00:01Z"), ""},
		{`{"ts":1.7e12}`, "ts", ts("2023-11-14T22:13:20Z"), ""},
		{`{"ts":"2026-01-01 10:00:00"}`, "ts", ts("2026-01-01T10:00:00Z"), ""},
		{`{"ts":"soon"}`, "ts", nil, "cannot parse"},
		{`[1]`, "s", nil, "not a JSON object"},
		{`{"s":`, "s", nil, "not JSON"},
	}
	dec := NewJSONDecoder(fuzzSchema, nil)
	for _, c := range cases {
		rec, ok, errs := dec.Decode([][]byte{[]byte(c.rec)})
		func() {
			defer rec.Release()
			if c.err != "" {
				if len(errs) != 1 || !strings.Contains(errs[0].Err.Error(), c.err) {
					t.Errorf("%s: want error %q, got %v", c.rec, c.err, errs)
				}
				return
			}
			if len(ok) != 1 {
				t.Errorf("%s: %v", c.rec, errs)
				return
			}
			got := BatchOf(rec, fuzzSchema).Cols[fuzzSchema.Index(c.col)].Value(0)
			if !sameValue(got, c.want) {
				t.Errorf("%s: got %#v, want %#v", c.rec, got, c.want)
			}
		}()
	}
}

// TestDecodeRefusesBadText: TEXT that is not valid UTF-8, or a \u escape
// of a lone surrogate, is an encoding error (22021), never copied raw into
// a column; escaped backslashes and real surrogate pairs are text.
func TestDecodeRefusesBadText(t *testing.T) {
	d := NewJSONDecoder(types.Schema{{Name: "s", Type: types.Text}}, nil)
	cases := []struct {
		in   string
		want string // "" for an error
	}{
		{`{"s": "plain"}`, "plain"},
		{`{"s": "x\ud83d\ude00"}`, "x😀"},
		{`{"s": "\\ud800"}`, `\ud800`},
		{`{"s": "\ud800"}`, ""},
		{`{"s": "\udc00x"}`, ""},
		{`{"s": "\ud800\u0041"}`, ""},
		{"{\"s\": \"\xff\xfe\"}", ""},
		{`{"s": "caf\u00e9"}`, "café"},
	}
	for _, c := range cases {
		rec, ok, errs := d.Decode([][]byte{[]byte(c.in)})
		if c.want == "" {
			var ee *EncodingError
			if len(errs) != 1 || !errors.As(errs[0].Err, &ee) || ee.SQLState() != "22021" {
				t.Errorf("%s: errors %v, want an encoding error", c.in, errs)
			}
		} else if len(ok) != 1 || len(errs) != 0 {
			t.Errorf("%s: errors %v", c.in, errs)
		} else if got := BatchOf(rec, types.Schema{{Name: "s", Type: types.Text}}).Cols[0].S[0]; got != c.want {
			t.Errorf("%s: %q, want %q", c.in, got, c.want)
		}
		rec.Release()
	}
}
