package exec

import (
	"errors"
	"reflect"
	"testing"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

var copyCols = types.Schema{{Name: "a", Type: types.Text}, {Name: "n", Type: types.Int}}

func textFormat() sql.CopyFormat {
	return sql.CopyFormat{Kind: sql.CopyText, Delimiter: '\t', Null: `\N`}
}

func csvFormat() sql.CopyFormat {
	return sql.CopyFormat{Kind: sql.CopyCSV, Delimiter: ',', Null: "", Quote: '"', Escape: '"'}
}

// decodeAll runs data through a decoder in pieces of size n (0: one
// piece) and returns each row's line and values.
func decodeAll(t *testing.T, f sql.CopyFormat, data string, n int) ([][]any, error) {
	t.Helper()
	d := NewCopyDecoder("t", f, copyCols)
	var out [][]any
	row := func(r *CopyRow) error {
		out = append(out, append([]any{r.Line}, r.Values...))
		return nil
	}
	b := []byte(data)
	for n > 0 && len(b) > n {
		if err := d.Write(b[:n], row); err != nil {
			return out, err
		}
		b = b[n:]
	}
	if err := d.Write(b, row); err != nil {
		return out, err
	}
	return out, d.Finish(row)
}

// TestCopyDecoder reads PostgreSQL's text and CSV formats, with the data
// cut into pieces of every size from 1 byte: rows, escapes, quotes and
// \r\n split anywhere read the same.
func TestCopyDecoder(t *testing.T) {
	for _, c := range []struct {
		name string
		f    sql.CopyFormat
		data string
		want [][]any
	}{
		{"text escapes", textFormat(),
			"x\\ty\\\\z\\n\t1\n\\101\\x41\\x4g\\xz\\q\t\\N\n\\N\t-7\r\n\\\\N\t 8 \n",
			[][]any{{1, "x\ty\\z\n", int64(1)}, {2, "AA\x04gxzq", nil}, {3, nil, int64(-7)}, {4, `\N`, int64(8)}}},
		{"text escaped delimiter and newline", textFormat(), "a\\\tb\\\nc\t1",
			[][]any{{1, "a\tb\nc", int64(1)}}},
		{"text end marker", textFormat(), "a\t1\n\\.\nnot\tread\n",
			[][]any{{1, "a", int64(1)}}},
		{"text empty field is not NULL", textFormat(), "\t2\n",
			[][]any{{1, "", int64(2)}}},
		{"csv quoting", csvFormat(),
			"\"a,b\",1\n\"\",\n,3\n\"say \"\"hi\"\"\",4\r\n\"x\ny\",5\rlast,6",
			[][]any{{1, "a,b", int64(1)}, {2, "", nil}, {3, nil, int64(3)}, {4, `say "hi"`, int64(4)}, {6, "x\ny", int64(5)}, {7, "last", int64(6)}}},
		{"csv with its own escape", sql.CopyFormat{Kind: sql.CopyCSV, Delimiter: ';', Null: "NULL", Quote: '\'', Escape: '\\'},
			"'it\\'s;\\\\';1\nNULL;NULL\n'NULL';2\n",
			[][]any{{1, `it's;\`, int64(1)}, {2, nil, nil}, {3, "NULL", int64(2)}}},
		{"csv header", func() sql.CopyFormat { f := csvFormat(); f.Header = sql.CopyHeaderMatch; return f }(),
			"a,n\nv,1\n", [][]any{{2, "v", int64(1)}}},
	} {
		for n := 0; n <= len(c.data); n++ {
			got, err := decodeAll(t, c.f, c.data, n)
			if err != nil {
				t.Fatalf("%s in pieces of %d: %v", c.name, n, err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("%s in pieces of %d:\n got %#v\nwant %#v", c.name, n, got, c.want)
			}
		}
	}
}

// TestCopyDecoderErrors: PostgreSQL's SQLSTATE and the CONTEXT line of
// each bad row, the same whatever the pieces.
func TestCopyDecoderErrors(t *testing.T) {
	for _, c := range []struct {
		f             sql.CopyFormat
		data          string
		code, context string
	}{
		{textFormat(), "a\t1\nb\tx\n", "22P02", `COPY t, line 2, column n: "x"`},
		{textFormat(), "a\t99999999999999999999\n", "22003", `COPY t, line 1, column n: "99999999999999999999"`},
		{textFormat(), "a\n", "22P04", `COPY t, line 1: "a"`},
		{textFormat(), "a\t1\t2", "22P04", "COPY t, line 1: \"a\t1\t2\""},
		{csvFormat(), "a,1\n\"b,2\n", "22P04", "COPY t, line 3: \"\"b,2\n\""},
		{csvFormat(), "a,1\n\"b\nc\",x\n", "22P02", `COPY t, line 3, column n: "x"`},
		{func() sql.CopyFormat { f := csvFormat(); f.Header = sql.CopyHeaderMatch; return f }(), "a\n", "22P04", `COPY t, line 1: "a"`},
	} {
		for n := 0; n <= len(c.data); n++ {
			_, err := decodeAll(t, c.f, c.data, n)
			var se *sql.Error
			if !errors.As(err, &se) || se.Code != c.code || se.Context != c.context {
				t.Fatalf("%q in pieces of %d: %v (%+v), want %s with CONTEXT %q", c.data, n, err, se, c.code, c.context)
			}
		}
	}
}
