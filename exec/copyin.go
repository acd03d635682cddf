package exec

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// maxCopyDisplay bounds how much of a line or value an error's CONTEXT
// shows, as PostgreSQL's limit_printout_length does.
const maxCopyDisplay = 100

// CopyRow is one row of COPY ... FROM STDIN data, its values typed as the
// decoder's columns.
type CopyRow struct {
	// Line is PostgreSQL's line number of the row: physical lines read so
	// far, the header included, so a CSV row with quoted newlines counts
	// each of them and is named by its last line.
	Line   int
	Raw    []byte // the row as sent, without its line end; valid during the callback only
	Values []any  // one per column; nil is NULL
}

// CopyDecoder reads the data of COPY ... FROM STDIN in PostgreSQL's text
// or CSV format, as PostgreSQL's copyfromparse.c reads it: rows end at \n,
// \r\n or \r (in CSV not inside quotes); a line holding only \. ends the
// data; text fields are split at the delimiter with backslash escapes
// (\t \n \r \b \f \v, octal \NNN, hex \xHH, anything else itself) and
// are NULL when they read, as sent, as the NULL string; CSV fields may be
// quoted (newlines and delimiters inside, the escape character before a
// quote or itself), and only an unquoted field can be NULL. Each field is
// then read as its column's type as a cast from text reads it.
//
// Data arrives in pieces that may split a row anywhere (one CopyData
// message each); Write keeps the unfinished row for the next piece.
// Errors carry PostgreSQL's SQLSTATE and a CONTEXT naming the line.
type CopyDecoder struct {
	table string
	f     sql.CopyFormat
	cols  types.Schema

	buf    []byte // data not made into rows yet
	line   int    // physical lines consumed
	eol    eolKind
	header bool // the header line is still to come
	ended  bool // \. was read: the rest of the data is ignored
}

// eolKind is how the data's lines end, as its first row ends.
type eolKind uint8

const (
	eolUnknown eolKind = iota
	eolNL              // \n
	eolCR              // \r or \r\n
)

// NewCopyDecoder reads rows of cols (in the order the data has them) for
// COPY into table.
func NewCopyDecoder(table string, f sql.CopyFormat, cols types.Schema) *CopyDecoder {
	return &CopyDecoder{table: table, f: f, cols: cols, header: f.Header != sql.CopyNoHeader}
}

// Write takes the next piece of the data and calls row for every row it
// completes, stopping at the first error.
func (d *CopyDecoder) Write(p []byte, row func(*CopyRow) error) error {
	if d.ended {
		return nil
	}
	d.buf = append(d.buf, p...)
	return d.rows(false, row)
}

// Finish reads what is left after the last piece: a last row without a
// line end, or an unterminated quoted field.
func (d *CopyDecoder) Finish(row func(*CopyRow) error) error {
	if d.ended {
		return nil
	}
	return d.rows(true, row)
}

// Where is the CONTEXT of an error about r as a whole.
func (d *CopyDecoder) Where(r *CopyRow) string {
	return fmt.Sprintf("COPY %s, line %d: %s", d.table, r.Line, quoteDisplay(string(r.Raw)))
}

func (d *CopyDecoder) rows(final bool, row func(*CopyRow) error) error {
	off := 0
	defer func() {
		// Keep only the unfinished row, at the start of the buffer.
		n := copy(d.buf, d.buf[off:])
		d.buf = d.buf[:n]
	}()
	for off < len(d.buf) {
		end, next, lines, ok := d.scan(d.buf[off:], final)
		if !ok {
			return nil
		}
		rec := d.buf[off : off+end]
		if d.eol == eolUnknown && end < next {
			d.eol = eolNL
			if d.buf[off+end] == '\r' {
				d.eol = eolCR
			}
		}
		off += next
		d.line += lines
		if string(rec) == `\.` {
			d.ended = true
			return nil
		}
		r := &CopyRow{Line: d.line, Raw: rec}
		fields, nulls, err := d.split(rec)
		if err != nil {
			return d.wrap(err, r)
		}
		if d.header {
			d.header = false
			if err := d.matchHeader(fields, nulls); err != nil {
				return d.wrap(err, r)
			}
			continue
		}
		if len(fields) > len(d.cols) {
			return d.wrap(sql.Errorf(sql.CodeBadCopyFormat, "extra data after last expected column"), r)
		}
		if len(fields) < len(d.cols) {
			return d.wrap(sql.Errorf(sql.CodeBadCopyFormat, "missing data for column %q", d.cols[len(fields)].Name), r)
		}
		r.Values = make([]any, len(fields))
		for i, s := range fields {
			if nulls[i] {
				continue
			}
			v, err := ParseText(s, d.cols[i].Type)
			if err != nil {
				return withWhere(err, fmt.Sprintf("COPY %s, line %d, column %s: %s", d.table, r.Line, d.cols[i].Name, quoteDisplay(s)))
			}
			r.Values[i] = v
		}
		if err := row(r); err != nil {
			return err
		}
	}
	return nil
}

// scan finds the end of the first row of b: its length without the line
// end, where the next row starts, and how many physical lines it spans.
// ok is false when b holds no whole row yet (and more data may come).
func (d *CopyDecoder) scan(b []byte, final bool) (end, next, lines int, ok bool) {
	csv := d.f.Kind == sql.CopyCSV
	// copyfromparse.c's rule: with the quote its own escape, the quote
	// just toggles; otherwise an escape counts only inside quotes and
	// right before a quote, not as the second of an escaped escape.
	escapes := d.f.Escape != d.f.Quote
	inQuote, lastEsc := false, false
	lines = 1
	for i := 0; i < len(b); i++ {
		c := b[i]
		if csv {
			isEsc := escapes && c == d.f.Escape
			if inQuote && isEsc {
				lastEsc = !lastEsc
			}
			if c == d.f.Quote && !lastEsc {
				inQuote = !inQuote
			}
			if !isEsc {
				lastEsc = false
			}
		} else if c == '\\' {
			// The escaped byte is data, even a newline.
			if i+1 >= len(b) && !final {
				return 0, 0, 0, false
			}
			i++
			continue
		}
		if c != '\n' && c != '\r' {
			continue
		}
		if inQuote {
			// PostgreSQL counts a quoted line end as a line when it is
			// the data's own: the first row's end says which (\n, or \r
			// for \r and \r\n); before it is known, only \r counts.
			want := byte('\r')
			if d.eol == eolNL {
				want = '\n'
			}
			if c == want {
				lines++
			}
			continue
		}
		if c == '\r' && i+1 >= len(b) && !final {
			return 0, 0, 0, false // \r\n may be split between pieces
		}
		eol := i + 1
		if c == '\r' && eol < len(b) && b[eol] == '\n' {
			eol++
		}
		return i, eol, lines, true
	}
	if !final {
		return 0, 0, 0, false
	}
	return len(b), len(b), lines, true
}

// split cuts one row into its fields, decoded, and says which are NULL.
func (d *CopyDecoder) split(rec []byte) ([]string, []bool, error) {
	if d.f.Kind == sql.CopyCSV {
		return d.splitCSV(rec)
	}
	return d.splitText(rec)
}

func (d *CopyDecoder) splitText(rec []byte) ([]string, []bool, error) {
	var fields []string
	var nulls []bool
	var val []byte
	start := 0
	for i := 0; ; {
		val = val[:0]
		for i < len(rec) && rec[i] != d.f.Delimiter {
			c := rec[i]
			i++
			if c != '\\' {
				val = append(val, c)
				continue
			}
			if i >= len(rec) {
				break // a backslash ending the line escapes nothing
			}
			c = rec[i]
			i++
			switch c {
			case 'b':
				val = append(val, '\b')
			case 'f':
				val = append(val, '\f')
			case 'n':
				val = append(val, '\n')
			case 'r':
				val = append(val, '\r')
			case 't':
				val = append(val, '\t')
			case 'v':
				val = append(val, '\v')
			case '0', '1', '2', '3', '4', '5', '6', '7':
				v := c - '0'
				for k := 0; k < 2 && i < len(rec) && rec[i] >= '0' && rec[i] <= '7'; k++ {
					v = v<<3 | (rec[i] - '0')
					i++
				}
				val = append(val, v)
			case 'x':
				if i < len(rec) && hexVal(rec[i]) >= 0 {
					v := byte(hexVal(rec[i]))
					i++
					if i < len(rec) && hexVal(rec[i]) >= 0 {
						v = v<<4 | byte(hexVal(rec[i]))
						i++
					}
					val = append(val, v)
				} else {
					val = append(val, 'x')
				}
			default:
				val = append(val, c)
			}
		}
		// NULL is what was sent, before escapes: \N is NULL, \\N is
		// the text \N.
		null := string(rec[start:i]) == d.f.Null
		if !null && !utf8.Valid(val) {
			return nil, nil, invalidUTF8(val)
		}
		fields = append(fields, string(val))
		nulls = append(nulls, null)
		if i >= len(rec) {
			return fields, nulls, nil
		}
		i++ // the delimiter
		start = i
	}
}

func (d *CopyDecoder) splitCSV(rec []byte) ([]string, []bool, error) {
	var fields []string
	var nulls []bool
	var val []byte
	q, esc, delim := d.f.Quote, d.f.Escape, d.f.Delimiter
	i := 0
	for {
		val = val[:0]
		start, quoted := i, false
	field:
		for {
			// Unquoted part: up to the delimiter, the line's end or a quote.
			for {
				if i >= len(rec) {
					break field
				}
				c := rec[i]
				i++
				if c == delim {
					i--
					break field
				}
				if c == q {
					break
				}
				val = append(val, c)
			}
			// Quoted part: up to the closing quote.
			quoted = true
			for {
				if i >= len(rec) {
					return nil, nil, sql.Errorf(sql.CodeBadCopyFormat, "unterminated CSV quoted field")
				}
				c := rec[i]
				i++
				if c == esc && i < len(rec) && (rec[i] == esc || rec[i] == q) {
					val = append(val, rec[i])
					i++
					continue
				}
				if c == q {
					break
				}
				val = append(val, c)
			}
		}
		null := !quoted && string(rec[start:i]) == d.f.Null
		if !null && !utf8.Valid(val) {
			return nil, nil, invalidUTF8(val)
		}
		fields = append(fields, string(val))
		nulls = append(nulls, null)
		if i >= len(rec) {
			return fields, nulls, nil
		}
		i++ // the delimiter
	}
}

// matchHeader checks a header line under HEADER match: its names must be
// the columns', in order. HEADER true skips it unread.
func (d *CopyDecoder) matchHeader(fields []string, nulls []bool) error {
	if d.f.Header != sql.CopyHeaderMatch {
		return nil
	}
	if len(fields) != len(d.cols) {
		return sql.Errorf(sql.CodeBadCopyFormat, "wrong number of fields in header line: got %d, expected %d", len(fields), len(d.cols))
	}
	for i, f := range fields {
		if nulls[i] {
			return sql.Errorf(sql.CodeBadCopyFormat, "column name mismatch in header line field %d: got null value (%q), expected %q", i+1, d.f.Null, d.cols[i].Name)
		}
		if f != d.cols[i].Name {
			return sql.Errorf(sql.CodeBadCopyFormat, "column name mismatch in header line field %d: got %q, expected %q", i+1, f, d.cols[i].Name)
		}
	}
	return nil
}

// wrap gives err the CONTEXT of row r.
func (d *CopyDecoder) wrap(err error, r *CopyRow) error {
	return withWhere(err, d.Where(r))
}

// withWhere attaches a CONTEXT line to err, keeping its SQLSTATE.
func withWhere(err error, where string) error {
	var se *sql.Error
	if !errors.As(err, &se) {
		return &sql.Error{Code: sql.CodeInternal, Message: err.Error(), Context: where, Err: err}
	}
	e := *se
	e.Context = where
	return &e
}

func invalidUTF8(b []byte) error {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return sql.Errorf(sql.CodeCharNotInRepert, "invalid byte sequence for encoding \"UTF8\": 0x%02x", b[i])
		}
		i += n
	}
	return sql.Errorf(sql.CodeCharNotInRepert, "invalid byte sequence for encoding \"UTF8\"")
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// quoteDisplay quotes s for a CONTEXT line, cut to maxCopyDisplay bytes
// (on a character boundary) with "..." as PostgreSQL does.
func quoteDisplay(s string) string {
	if len(s) > maxCopyDisplay {
		cut := maxCopyDisplay
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return `"` + s + `"`
}

// ParseText reads s as a value of type t the way a cast from text does
// (INSERT's constants and COPY's fields), with the cast's errors: 22P02
// invalid input syntax for type bigint: "x", and so on.
func ParseText(s string, t types.Type) (any, error) {
	v, err := castVec(&Vec{T: types.Text, N: 1, S: []string{s}}, t)
	if err != nil {
		return nil, err
	}
	return v.Value(0), nil
}
