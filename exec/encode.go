package exec

import (
	"math"
	"strconv"
	"time"

	"github.com/turbinesql/turbinesql/types"
)

// AppendJSONRow encodes one output row as a JSON object whose field names
// are the select-list names. TIMESTAMP values are RFC 3339 UTC text; NaN and
// infinities, which JSON cannot hold as numbers, are the strings PostgreSQL
// prints for them.
func AppendJSONRow(dst []byte, schema types.Schema, row []any) []byte {
	dst = append(dst, '{')
	for i, f := range schema {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, f.Name)
		dst = append(dst, ':')
		dst = appendJSONValue(dst, row[i])
	}
	return append(dst, '}')
}

func appendJSONValue(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...)
	case int64:
		return strconv.AppendInt(dst, x, 10)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return strconv.AppendQuote(dst, FormatFloat(x))
		}
		return strconv.AppendFloat(dst, x, 'g', -1, 64)
	case bool:
		return strconv.AppendBool(dst, x)
	case string:
		return appendJSONString(dst, x)
	case time.Time:
		dst = append(dst, '"')
		dst = x.UTC().AppendFormat(dst, time.RFC3339Nano)
		return append(dst, '"')
	}
	return append(dst, "null"...)
}

// appendJSONString quotes s per RFC 8259 (strconv.AppendQuote would write
// Go escapes such as \x00 that JSON does not have).
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// AppendJSONArray encodes values as a JSON array (a composite Kafka key).
func AppendJSONArray(dst []byte, vals []any) []byte {
	dst = append(dst, '[')
	for i, v := range vals {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONValue(dst, v)
	}
	return append(dst, ']')
}
