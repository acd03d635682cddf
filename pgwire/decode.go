package pgwire

import (
	"encoding/binary"
	"math"
	"strconv"
)

// decodeParam turns one Bind parameter into the text form the Backend
// receives. Text-format values are copied as they are (Bind's buffers are
// reused by the next Receive); binary values are decoded per oid. i is the
// 0-based parameter index, for messages.
func decodeParam(raw []byte, format int16, oid uint32, i int) ([]byte, error) {
	if raw == nil {
		return nil, nil
	}
	switch format {
	case formatText:
		return append(make([]byte, 0, len(raw)), raw...), nil
	case formatBinary:
	default:
		return nil, newWireError(codeProtocolViolation, "unsupported format code: %d", format)
	}

	badLength := func() error {
		return newWireError(codeInvalidBinaryRepr, "incorrect binary data format in bind parameter %d", i+1)
	}
	out := make([]byte, 0, 32)
	switch oid {
	case OIDInt2:
		if len(raw) != 2 {
			return nil, badLength()
		}
		return strconv.AppendInt(out, int64(int16(binary.BigEndian.Uint16(raw))), 10), nil
	case OIDInt4:
		if len(raw) != 4 {
			return nil, badLength()
		}
		return strconv.AppendInt(out, int64(int32(binary.BigEndian.Uint32(raw))), 10), nil
	case OIDOid:
		if len(raw) != 4 {
			return nil, badLength()
		}
		return strconv.AppendUint(out, uint64(binary.BigEndian.Uint32(raw)), 10), nil
	case OIDInt8:
		if len(raw) != 8 {
			return nil, badLength()
		}
		return strconv.AppendInt(out, int64(binary.BigEndian.Uint64(raw)), 10), nil
	case OIDFloat4:
		if len(raw) != 4 {
			return nil, badLength()
		}
		return appendFloat(out, float64(math.Float32frombits(binary.BigEndian.Uint32(raw))), 32), nil
	case OIDFloat8:
		if len(raw) != 8 {
			return nil, badLength()
		}
		return appendFloat(out, math.Float64frombits(binary.BigEndian.Uint64(raw)), 64), nil
	case OIDBool:
		if len(raw) != 1 {
			return nil, badLength()
		}
		if raw[0] != 0 {
			return append(out, 't'), nil
		}
		return append(out, 'f'), nil
	case OIDTimestamp, OIDTimestampTZ:
		if len(raw) != 8 {
			return nil, badLength()
		}
		us := int64(binary.BigEndian.Uint64(raw))
		// PostgreSQL encodes ±infinity as the extreme int64 values.
		switch us {
		case math.MaxInt64:
			return append(out, "infinity"...), nil
		case math.MinInt64:
			return append(out, "-infinity"...), nil
		}
		return appendTimestamp(out, timeFromPGMicros(us), oid == OIDTimestampTZ), nil
	}
	if isTextLike(oid) {
		return append(make([]byte, 0, len(raw)), raw...), nil
	}
	return nil, newWireError(codeFeatureNotSupported, "binary format is not supported for parameter %d of type OID %d", i+1, oid)
}
