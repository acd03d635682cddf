package exec

import (
	"bytes"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/valyala/fastjson"

	"github.com/turbinesql/turbinesql/types"
)

// DecodeError is one record that could not be decoded, by its index in the
// input slice.
type DecodeError struct {
	Index int
	Err   error
}

// EncodingError is TEXT that is not valid UTF-8, or a JSON \u escape of a
// lone UTF-16 surrogate (no character at all): PostgreSQL's 22021.
type EncodingError struct{ Msg string }

func (e *EncodingError) Error() string { return e.Msg }

// SQLState is PostgreSQL's character_not_in_repertoire.
func (e *EncodingError) SQLState() string { return "22021" }

// JSONDecoder turns JSON object records into Arrow record batches of a fixed
// schema. Missing fields and JSON null are NULL; a value of the wrong type or
// a record that is not a JSON object is a DecodeError, and that record adds
// no row. Not safe for concurrent use (it reuses its parser).
type JSONDecoder struct {
	schema types.Schema
	arrow  *arrow.Schema
	mem    memory.Allocator
	p      fastjson.Parser
	scr    []scratch
	skip   []bool // by column: never read from the JSON (always NULL)
	// escapes: the record being decoded has a \u escape somewhere.
	escapes bool
	esc     []byte // a TEXT literal as written, for checkSurrogates
}

type scratch struct {
	null bool
	i    int64
	f    float64
	raw  []byte // TEXT: the parser's unescaped bytes
	b    bool
}

// NewJSONDecoder builds a decoder for schema.
func NewJSONDecoder(schema types.Schema, mem memory.Allocator) *JSONDecoder {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	return &JSONDecoder{schema: schema, arrow: schema.Arrow(), mem: mem, scr: make([]scratch, len(schema)), skip: make([]bool, len(schema))}
}

// Skip makes column c always NULL, its JSON field never read: the caller
// fills it from elsewhere (a record's Kafka timestamp), so a field of that
// name, whatever it holds, cannot fail a record.
func (d *JSONDecoder) Skip(c int) { d.skip[c] = true }

// Decode decodes values into one record batch (the caller releases it). ok
// lists, for each row of the batch, the index in values it came from.
func (d *JSONDecoder) Decode(values [][]byte) (rec arrow.RecordBatch, ok []int, errs []DecodeError) {
	b := array.NewRecordBuilder(d.mem, d.arrow)
	defer b.Release()
	// The typed builders, found once per batch rather than per value.
	ints := make([]*array.Int64Builder, len(d.schema))
	floats := make([]*array.Float64Builder, len(d.schema))
	texts := make([]*array.StringBuilder, len(d.schema))
	bools := make([]*array.BooleanBuilder, len(d.schema))
	times := make([]*array.TimestampBuilder, len(d.schema))
	for c, f := range d.schema {
		fb := b.Field(c)
		fb.Reserve(len(values))
		switch f.Type {
		case types.Int:
			ints[c] = fb.(*array.Int64Builder)
		case types.Double:
			floats[c] = fb.(*array.Float64Builder)
		case types.Text:
			texts[c] = fb.(*array.StringBuilder)
		case types.Bool:
			bools[c] = fb.(*array.BooleanBuilder)
		case types.Timestamp:
			times[c] = fb.(*array.TimestampBuilder)
		}
	}
	ok = make([]int, 0, len(values))
	for idx, raw := range values {
		if err := d.row(raw); err != nil {
			errs = append(errs, DecodeError{Index: idx, Err: err})
			continue
		}
		ok = append(ok, idx)
		for c, f := range d.schema {
			s := &d.scr[c]
			if s.null {
				b.Field(c).AppendNull()
				continue
			}
			switch f.Type {
			case types.Int:
				ints[c].Append(s.i)
			case types.Double:
				floats[c].Append(s.f)
			case types.Text:
				// The parser's bytes, copied once into the column.
				texts[c].BinaryBuilder.Append(s.raw)
			case types.Bool:
				bools[c].Append(s.b)
			case types.Timestamp:
				times[c].Append(arrow.Timestamp(s.i))
			}
		}
	}
	return b.NewRecordBatch(), ok, errs
}

// row parses one record into the scratch values.
func (d *JSONDecoder) row(raw []byte) error {
	v, err := d.p.ParseBytes(raw)
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	// fastjson passes a lone surrogate escape (\ud800) through as the six
	// characters, as if the JSON had said \\ud800: records with any \u
	// escape have their TEXT values' escapes checked (the rest, nearly
	// all, skip the check).
	d.escapes = bytes.Contains(raw, []byte(`\u`))
	obj, err := v.Object()
	if err != nil {
		return fmt.Errorf("not a JSON object")
	}
	for c, f := range d.schema {
		s := &d.scr[c]
		*s = scratch{}
		if d.skip[c] {
			s.null = true
			continue
		}
		fv := obj.Get(f.Name)
		if fv != nil && f.Type == types.Text && d.escapes {
			// Before anything asks fv its type: that unescapes it in place.
			d.esc = fv.MarshalTo(d.esc[:0])
			if len(d.esc) > 0 && d.esc[0] == '"' {
				if err := checkSurrogates(d.esc); err != nil {
					return fmt.Errorf("field %q: %w", f.Name, err)
				}
			}
		}
		if fv == nil || fv.Type() == fastjson.TypeNull {
			s.null = true
			continue
		}
		if err := decodeValue(fv, f.Type, s); err != nil {
			return fmt.Errorf("field %q: %w", f.Name, err)
		}
	}
	return nil
}

func decodeValue(v *fastjson.Value, t types.Type, s *scratch) error {
	switch t {
	case types.Int:
		if v.Type() != fastjson.TypeNumber {
			return fmt.Errorf("want a BIGINT, got %s", v.Type())
		}
		n, err := jsonInt(v)
		if err != nil {
			return err
		}
		s.i = n
	case types.Double:
		if v.Type() != fastjson.TypeNumber {
			if v.Type() == fastjson.TypeString { // "NaN", "Infinity" as PostgreSQL's JSON writes them
				if f, err := ParseFloat(string(v.GetStringBytes())); err == nil && (math.IsNaN(f) || math.IsInf(f, 0)) {
					s.f = f
					return nil
				}
			}
			return fmt.Errorf("want a DOUBLE, got %s", v.Type())
		}
		f, err := v.Float64()
		if err != nil {
			return err
		}
		if math.IsInf(f, 0) { // 1e999: PostgreSQL refuses it too; "Infinity" is the way to say it
			return fmt.Errorf("DOUBLE out of range: %s", v.String())
		}
		s.f = f
	case types.Text:
		if v.Type() != fastjson.TypeString {
			return fmt.Errorf("want TEXT, got %s", v.Type())
		}
		s.raw = v.GetStringBytes() // valid until the next record is parsed
		if !utf8.Valid(s.raw) {
			return &EncodingError{Msg: "invalid UTF-8 in TEXT"}
		}
	case types.Bool:
		switch v.Type() {
		case fastjson.TypeTrue:
			s.b = true
		case fastjson.TypeFalse:
		default:
			return fmt.Errorf("want a BOOLEAN, got %s", v.Type())
		}
	case types.Timestamp:
		switch v.Type() {
		case fastjson.TypeNumber:
			n, err := jsonInt(v)
			if err != nil {
				return fmt.Errorf("want epoch milliseconds, got %s", v.String())
			}
			s.i = n
		case fastjson.TypeString:
			ms, err := ParseTimestamp(string(v.GetStringBytes()))
			if err != nil {
				return err
			}
			s.i = ms
		default:
			return fmt.Errorf("want a TIMESTAMP (epoch millis or RFC 3339 text), got %s", v.Type())
		}
	}
	return nil
}

// checkSurrogates refuses a JSON string literal (as written, quotes
// included) with a \u escape of a UTF-16 surrogate that is not half of a
// high-low pair.
func checkSurrogates(lit []byte) error {
	for i := 0; i+1 < len(lit); i++ {
		if lit[i] != '\\' {
			continue
		}
		if lit[i+1] != 'u' || i+6 > len(lit) {
			i++ // another escape: skip its character
			continue
		}
		r, ok := hex4(lit[i+2 : i+6])
		if !ok {
			return &EncodingError{Msg: "bad \\u escape in TEXT"}
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return &EncodingError{Msg: fmt.Sprintf("lone UTF-16 surrogate \\u%04x in TEXT", r)}
		case r >= 0xD800 && r <= 0xDBFF:
			if i+12 > len(lit) || lit[i+6] != '\\' || lit[i+7] != 'u' {
				return &EncodingError{Msg: fmt.Sprintf("lone UTF-16 surrogate \\u%04x in TEXT", r)}
			}
			lo, ok := hex4(lit[i+8 : i+12])
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return &EncodingError{Msg: fmt.Sprintf("lone UTF-16 surrogate \\u%04x in TEXT", r)}
			}
			i += 11
			continue
		}
		i += 5
	}
	return nil
}

func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}

// jsonInt reads a JSON number as an int64. Integral values written as 1.0
// or 1e3 are integers too (fastjson's Int64 reads only plain digits); a
// fraction or a value beyond BIGINT is an error that says which.
func jsonInt(v *fastjson.Value) (int64, error) {
	if n, err := v.Int64(); err == nil {
		return n, nil
	}
	f, err := v.Float64()
	switch {
	case err != nil || f != math.Trunc(f):
		return 0, fmt.Errorf("want a BIGINT, got %s", v.String())
	case f < -9.223372036854775808e18 || f >= 9.223372036854775807e18:
		return 0, fmt.Errorf("BIGINT out of range: %s", v.String())
	}
	return int64(f), nil
}

// BatchOf views an Arrow record batch as evaluator input.
func BatchOf(rec arrow.RecordBatch, schema types.Schema) *Batch {
	b := &Batch{N: int(rec.NumRows()), Cols: make([]*Vec, len(schema))}
	for i, f := range schema {
		b.Cols[i] = FromArrow(rec.Column(i), f.Type)
	}
	return b
}
