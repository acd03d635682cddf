package pgwire

import (
	"bytes"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"time"
)

// Format codes of the extended protocol.
const (
	formatText   int16 = 0
	formatBinary int16 = 1
)

// pgEpochUnix is 2000-01-01 00:00:00 UTC in Unix seconds: PostgreSQL's binary
// timestamps count microseconds from there.
const pgEpochUnix = 946684800

// Binary timestamps are int64 microseconds; these bound the Unix seconds that
// fit without overflow (one second inside, so adding the fraction is safe).
const (
	maxTimestampUnix = math.MaxInt64/1_000_000 + pgEpochUnix - 1
	minTimestampUnix = math.MinInt64/1_000_000 + pgEpochUnix + 1
)

// typeSize is pg_type.typlen for RowDescription; -1 is variable length, -2 a
// NUL-terminated C string (the "unknown" type).
func typeSize(oid uint32) int16 {
	switch oid {
	case OIDBool, OIDChar:
		return 1
	case OIDInt2:
		return 2
	case OIDInt4, OIDFloat4, OIDOid:
		return 4
	case OIDName:
		return 64
	case OIDInt8, OIDFloat8, OIDTimestamp, OIDTimestampTZ:
		return 8
	case OIDUnknown:
		return -2
	default:
		return -1
	}
}

// isTextLike reports whether the binary form of oid is its text form.
func isTextLike(oid uint32) bool {
	switch oid {
	case OIDText, OIDVarchar, OIDUnknown, OIDName, OIDChar:
		return true
	}
	return false
}

// binaryResultSupported reports whether a column of type oid can be sent in
// binary format. Bind rejects binary for anything else, before running the
// statement, rather than failing halfway through the rows.
func binaryResultSupported(oid uint32) bool {
	switch oid {
	case OIDBool, OIDInt2, OIDInt4, OIDInt8, OIDOid, OIDFloat4, OIDFloat8, OIDTimestamp, OIDTimestampTZ:
		return true
	}
	return isTextLike(oid)
}

// appendValue appends v, encoded for a column of type oid in the given
// format, to buf. v must not be nil (NULL is encoded by the caller). Values
// whose Go type differs from the column type are converted where PostgreSQL
// would cast (an int64 in a float8 column); anything else is an error, never
// a panic.
func appendValue(buf []byte, oid uint32, format int16, v any) ([]byte, error) {
	v = normalize(v)
	switch oid {
	case OIDInt2, OIDInt4, OIDInt8, OIDOid:
		i, err := toInt64(v, oid)
		if err != nil {
			return nil, err
		}
		if format == formatText {
			return strconv.AppendInt(buf, i, 10), nil
		}
		switch oid {
		case OIDInt2:
			return binary.BigEndian.AppendUint16(buf, uint16(i)), nil
		case OIDInt4, OIDOid:
			return binary.BigEndian.AppendUint32(buf, uint32(i)), nil
		default:
			return binary.BigEndian.AppendUint64(buf, uint64(i)), nil
		}
	case OIDFloat4, OIDFloat8:
		f, err := toFloat64(v, oid)
		if err != nil {
			return nil, err
		}
		if oid == OIDFloat4 {
			f32 := float32(f)
			if math.IsInf(float64(f32), 0) && !math.IsInf(f, 0) {
				return nil, newWireError(codeNumericOutOfRange, "value out of range: overflow")
			}
			if format == formatText {
				return appendFloat(buf, float64(f32), 32), nil
			}
			return binary.BigEndian.AppendUint32(buf, math.Float32bits(f32)), nil
		}
		if format == formatText {
			return appendFloat(buf, f, 64), nil
		}
		return binary.BigEndian.AppendUint64(buf, math.Float64bits(f)), nil
	case OIDBool:
		b, err := toBool(v, oid)
		if err != nil {
			return nil, err
		}
		switch {
		case format == formatBinary && b:
			return append(buf, 1), nil
		case format == formatBinary:
			return append(buf, 0), nil
		case b:
			return append(buf, 't'), nil
		default:
			return append(buf, 'f'), nil
		}
	case OIDTimestamp, OIDTimestampTZ:
		t, ok := v.(time.Time)
		if !ok {
			return nil, cannotEncode(v, oid)
		}
		if format == formatText {
			return appendTimestamp(buf, t, oid == OIDTimestampTZ), nil
		}
		us, err := pgMicros(t)
		if err != nil {
			return nil, err
		}
		return binary.BigEndian.AppendUint64(buf, uint64(us)), nil
	}

	// Text-like and unknown-to-us types: send the value's text form. Binary
	// is only valid for text-like types, whose binary form is the text.
	if format == formatBinary && !isTextLike(oid) {
		return nil, newWireError(codeFeatureNotSupported, "binary format is not supported for type OID %d", oid)
	}
	return appendText(buf, v, oid)
}

// normalize widens the Go numeric types a backend might reasonably produce to
// the documented int64/float64, and []byte to string, so the encoders only
// deal with the documented set.
func normalize(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case int32:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint:
		if uint64(x) <= math.MaxInt64 {
			return int64(x)
		}
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
	case float32:
		return float64(x)
	case []byte:
		return string(x)
	}
	return v
}

func cannotEncode(v any, oid uint32) error {
	return newWireError(codeInternal, "cannot encode value of Go type %T as type OID %d", v, oid)
}

func toInt64(v any, oid uint32) (int64, error) {
	var i int64
	switch x := v.(type) {
	case int64:
		i = x
	case float64:
		// PostgreSQL's float8-to-integer cast rounds half to even.
		r := math.RoundToEven(x)
		if math.IsNaN(r) || r < math.MinInt64 || r >= math.MaxInt64 {
			return 0, newWireError(codeNumericOutOfRange, "value %v out of range for type OID %d", x, oid)
		}
		i = int64(r)
	case bool:
		if x {
			i = 1
		}
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil {
			return 0, newWireError(codeInvalidTextRepr, "invalid input syntax for type OID %d: %q", oid, x)
		}
		i = n
	default:
		return 0, cannotEncode(v, oid)
	}
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	switch oid {
	case OIDInt2:
		lo, hi = math.MinInt16, math.MaxInt16
	case OIDInt4:
		lo, hi = math.MinInt32, math.MaxInt32
	case OIDOid:
		lo, hi = 0, math.MaxUint32
	}
	if i < lo || i > hi {
		return 0, newWireError(codeNumericOutOfRange, "value %d out of range for type OID %d", i, oid)
	}
	return i, nil
}

func toFloat64(v any, oid uint32) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case int64:
		return float64(x), nil
	case string:
		// ParseFloat accepts Infinity/Inf/NaN in any case, as PostgreSQL does.
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, newWireError(codeInvalidTextRepr, "invalid input syntax for type OID %d: %q", oid, x)
		}
		return f, nil
	}
	return 0, cannotEncode(v, oid)
}

func toBool(v any, oid uint32) (bool, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case int64:
		return x != 0, nil
	case string:
		b, ok := parseBool(x)
		if !ok {
			return false, newWireError(codeInvalidTextRepr, "invalid input syntax for type boolean: %q", x)
		}
		return b, nil
	}
	return false, cannotEncode(v, oid)
}

// parseBool accepts PostgreSQL's boolean spellings (boolin).
func parseBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "t", "true", "y", "yes", "on", "1":
		return true, true
	case "f", "false", "n", "no", "off", "0":
		return false, true
	}
	return false, false
}

// appendText appends the text form of v for a text-like (or otherwise
// unrecognised) column type.
func appendText(buf []byte, v any, oid uint32) ([]byte, error) {
	switch x := v.(type) {
	case string:
		return append(buf, x...), nil
	case int64:
		return strconv.AppendInt(buf, x, 10), nil
	case float64:
		return appendFloat(buf, x, 64), nil
	case bool:
		// bool::text in PostgreSQL spells the words out.
		return strconv.AppendBool(buf, x), nil
	case time.Time:
		return appendTimestamp(buf, x, true), nil
	}
	return nil, cannotEncode(v, oid)
}

// appendFloat formats f like PostgreSQL 12+ float8out/float4out with the
// default extra_float_digits=1: the shortest string that reads back to the
// same value, in positional notation when the decimal exponent is in
// [-4, 15) (float4: [-4, 6)) and in exponent notation with at least two
// exponent digits otherwise. strconv's 'g' switches to exponents already at
// 1e+21 for shortest output, hence the explicit choice here.
func appendFloat(buf []byte, f float64, bitSize int) []byte {
	switch {
	case math.IsNaN(f):
		return append(buf, "NaN"...)
	case math.IsInf(f, 1):
		return append(buf, "Infinity"...)
	case math.IsInf(f, -1):
		return append(buf, "-Infinity"...)
	}
	maxExp := 15 // DBL_DIG
	if bitSize == 32 {
		maxExp = 6 // FLT_DIG
	}
	var scratch [32]byte
	e := strconv.AppendFloat(scratch[:0], f, 'e', -1, bitSize)
	exp := 0
	if i := bytes.LastIndexByte(e, 'e'); i >= 0 {
		exp, _ = strconv.Atoi(string(e[i+1:]))
	}
	if exp < -4 || exp >= maxExp {
		return append(buf, e...)
	}
	return strconv.AppendFloat(buf, f, 'f', -1, bitSize)
}

// appendTimestamp formats t (in UTC) like PostgreSQL's timestamp output with
// DateStyle ISO: fractional seconds only when non-zero, trailing zeros
// trimmed, at most microseconds; "+00" for timestamptz since the session time
// zone is UTC; " BC" for years before 1 AD.
func appendTimestamp(buf []byte, t time.Time, withTZ bool) []byte {
	t = t.UTC().Round(time.Microsecond)
	year, month, day := t.Date()
	bc := year <= 0
	if bc {
		year = 1 - year // there is no year 0: 0 is 1 BC
	}
	buf = appendPadded(buf, year, 4)
	buf = append(buf, '-')
	buf = appendPadded(buf, int(month), 2)
	buf = append(buf, '-')
	buf = appendPadded(buf, day, 2)
	buf = append(buf, ' ')
	buf = appendPadded(buf, t.Hour(), 2)
	buf = append(buf, ':')
	buf = appendPadded(buf, t.Minute(), 2)
	buf = append(buf, ':')
	buf = appendPadded(buf, t.Second(), 2)
	if us := t.Nanosecond() / 1000; us != 0 {
		buf = append(buf, '.')
		start := len(buf)
		buf = appendPadded(buf, us, 6)
		end := len(buf)
		for end > start && buf[end-1] == '0' {
			end--
		}
		buf = buf[:end]
	}
	if withTZ {
		buf = append(buf, "+00"...)
	}
	if bc {
		buf = append(buf, " BC"...)
	}
	return buf
}

func appendPadded(buf []byte, n, width int) []byte {
	var scratch [20]byte
	s := strconv.AppendInt(scratch[:0], int64(n), 10)
	for i := len(s); i < width; i++ {
		buf = append(buf, '0')
	}
	return append(buf, s...)
}

// pgMicros converts t to PostgreSQL's binary timestamp: microseconds since
// 2000-01-01 00:00:00 UTC.
func pgMicros(t time.Time) (int64, error) {
	t = t.Round(time.Microsecond)
	sec := t.Unix()
	if sec > maxTimestampUnix || sec < minTimestampUnix {
		return 0, newWireError(codeDatetimeOverflow, "timestamp out of range")
	}
	return (sec-pgEpochUnix)*1_000_000 + int64(t.Nanosecond()/1000), nil
}

// timeFromPGMicros is the inverse of pgMicros.
func timeFromPGMicros(us int64) time.Time {
	sec, rem := us/1_000_000, us%1_000_000
	if rem < 0 {
		sec--
		rem += 1_000_000
	}
	return time.Unix(sec+pgEpochUnix, rem*1000).UTC()
}
