package pgwire

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

func TestAppendFloat(t *testing.T) {
	tests := []struct {
		f       float64
		bitSize int
		want    string
	}{
		{0, 64, "0"},
		{math.Copysign(0, -1), 64, "-0"},
		{0.1, 64, "0.1"},
		{100, 64, "100"},
		{2.5, 64, "2.5"},
		{-1.5, 64, "-1.5"},
		{1.0 / 3, 64, "0.3333333333333333"},
		{1e6, 64, "1000000"},
		{1e14, 64, "100000000000000"},
		{123456789012345, 64, "123456789012345"},
		{1e15, 64, "1e+15"},
		{1e20, 64, "1e+20"},
		{123456789012345678, 64, "1.2345678901234568e+17"},
		{1.5e300, 64, "1.5e+300"},
		{0.0001, 64, "0.0001"},
		{0.00012, 64, "0.00012"},
		{1e-5, 64, "1e-05"},
		{5e-324, 64, "5e-324"},
		{math.MaxFloat64, 64, "1.7976931348623157e+308"},
		{math.NaN(), 64, "NaN"},
		{math.Inf(1), 64, "Infinity"},
		{math.Inf(-1), 64, "-Infinity"},
		{float64(float32(0.1)), 32, "0.1"},
		{123456, 32, "123456"},
		{1e6, 32, "1e+06"},
		{float64(float32(1.5e-5)), 32, "1.5e-05"},
	}
	for _, tt := range tests {
		if got := string(appendFloat(nil, tt.f, tt.bitSize)); got != tt.want {
			t.Errorf("appendFloat(%v, %d) = %q, want %q", tt.f, tt.bitSize, got, tt.want)
		}
	}
}

func TestAppendTimestamp(t *testing.T) {
	tests := []struct {
		t      time.Time
		withTZ bool
		want   string
	}{
		{time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC), false, "2026-01-01 00:00:01"},
		{time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC), true, "2026-01-01 00:00:01+00"},
		{time.Date(2026, 1, 1, 0, 0, 1, 500_000_000, time.UTC), false, "2026-01-01 00:00:01.5"},
		{time.Date(2026, 1, 1, 0, 0, 1, 123_456_000, time.UTC), true, "2026-01-01 00:00:01.123456+00"},
		{time.Date(2026, 1, 1, 0, 0, 1, 10_000, time.UTC), false, "2026-01-01 00:00:01.00001"},
		// Nanoseconds round to microseconds.
		{time.Date(2026, 12, 31, 23, 59, 59, 999_999_600, time.UTC), false, "2027-01-01 00:00:00"},
		// Other zones are shown in UTC, the session time zone.
		{time.Date(2026, 1, 1, 2, 0, 0, 0, time.FixedZone("x", 2*3600)), true, "2026-01-01 00:00:00+00"},
		{time.Date(33, 2, 3, 4, 5, 6, 0, time.UTC), false, "0033-02-03 04:05:06"},
		{time.Date(0, 3, 15, 0, 0, 0, 0, time.UTC), true, "0001-03-15 00:00:00+00 BC"},
		{time.Date(-43, 3, 15, 0, 0, 0, 0, time.UTC), false, "0044-03-15 00:00:00 BC"},
		{time.Date(12345, 1, 1, 0, 0, 0, 0, time.UTC), false, "12345-01-01 00:00:00"},
	}
	for _, tt := range tests {
		if got := string(appendTimestamp(nil, tt.t, tt.withTZ)); got != tt.want {
			t.Errorf("appendTimestamp(%v, %v) = %q, want %q", tt.t, tt.withTZ, got, tt.want)
		}
	}
}

func TestPGMicrosRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		t  time.Time
		us int64
	}{
		{time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), 0},
		{time.Date(2000, 1, 1, 0, 0, 1, 1000, time.UTC), 1_000_001},
		{time.Date(1999, 12, 31, 23, 59, 59, 999_999_000, time.UTC), -1},
	} {
		us, err := pgMicros(tt.t)
		if err != nil || us != tt.us {
			t.Errorf("pgMicros(%v) = %d, %v; want %d", tt.t, us, err, tt.us)
		}
		if back := timeFromPGMicros(tt.us); !back.Equal(tt.t) {
			t.Errorf("timeFromPGMicros(%d) = %v, want %v", tt.us, back, tt.t)
		}
	}
	if _, err := pgMicros(time.Date(400000, 1, 1, 0, 0, 0, 0, time.UTC)); sqlState(err) != codeDatetimeOverflow {
		t.Errorf("far future: %v", err)
	}
}

func sqlState(err error) string {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		return st.SQLState()
	}
	return ""
}

func TestAppendValue(t *testing.T) {
	tests := []struct {
		oid    uint32
		format int16
		v      any
		want   string // text, or %x of binary
		code   string // SQLSTATE when an error is expected
	}{
		{OIDInt8, formatText, int64(-5), "-5", ""},
		{OIDInt8, formatText, 2.5, "2", ""}, // half to even, like PostgreSQL's cast
		{OIDInt8, formatText, 3.5, "4", ""},
		{OIDInt8, formatText, int32(7), "7", ""},
		{OIDInt8, formatText, " 12 ", "12", ""},
		{OIDInt8, formatText, "x", "", codeInvalidTextRepr},
		{OIDInt8, formatText, math.NaN(), "", codeNumericOutOfRange},
		{OIDInt8, formatText, 1e19, "", codeNumericOutOfRange},
		{OIDInt8, formatText, time.Time{}, "", codeInternal},
		{OIDInt8, formatBinary, int64(1), "0000000000000001", ""},
		{OIDInt4, formatBinary, int64(-2), "fffffffe", ""},
		{OIDInt4, formatText, int64(math.MaxInt32 + 1), "", codeNumericOutOfRange},
		{OIDInt2, formatBinary, int64(3), "0003", ""},
		{OIDInt2, formatText, int64(40000), "", codeNumericOutOfRange},
		{OIDFloat8, formatText, int64(3), "3", ""},
		{OIDFloat8, formatText, "Infinity", "Infinity", ""},
		{OIDFloat8, formatText, true, "", codeInternal},
		{OIDFloat8, formatBinary, 1.0, "3ff0000000000000", ""},
		{OIDFloat4, formatBinary, 1.0, "3f800000", ""},
		{OIDFloat4, formatText, 0.1, "0.1", ""},
		{OIDFloat4, formatText, 1e300, "", codeNumericOutOfRange},
		{OIDBool, formatText, true, "t", ""},
		{OIDBool, formatText, int64(0), "f", ""},
		{OIDBool, formatText, "yes", "t", ""},
		{OIDBool, formatText, "maybe", "", codeInvalidTextRepr},
		{OIDBool, formatBinary, true, "01", ""},
		{OIDTimestamp, formatText, "2026-01-01", "", codeInternal},
		{OIDTimestampTZ, formatBinary, time.Date(2000, 1, 1, 0, 0, 0, 1000, time.UTC), "0000000000000001", ""},
		{OIDText, formatText, "héllo", "héllo", ""},
		{OIDText, formatBinary, "héllo", "héllo", ""},
		{OIDText, formatText, int64(42), "42", ""},
		{OIDText, formatText, 1e20, "1e+20", ""},
		{OIDText, formatText, false, "false", ""},
		{OIDText, formatText, []byte("b"), "b", ""},
		{OIDText, formatText, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "2026-01-01 00:00:00+00", ""},
		{OIDText, formatText, struct{}{}, "", codeInternal},
		{OIDVarchar, formatText, "v", "v", ""},
		{OIDUnknown, formatBinary, "u", "u", ""},
		{1700, formatText, "1.50", "1.50", ""}, // numeric: text passes through
		{1700, formatBinary, "1.50", "", codeFeatureNotSupported},
	}
	for _, tt := range tests {
		got, err := appendValue(nil, tt.oid, tt.format, tt.v)
		name := fmt.Sprintf("appendValue(%d, %d, %#v)", tt.oid, tt.format, tt.v)
		if tt.code != "" {
			if code := sqlState(err); code != tt.code {
				t.Errorf("%s: err = %v (%s), want %s", name, err, code, tt.code)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		s := string(got)
		if tt.format == formatBinary && !isTextLike(tt.oid) {
			s = fmt.Sprintf("%x", got)
		}
		if s != tt.want {
			t.Errorf("%s = %q, want %q", name, s, tt.want)
		}
	}
}

func TestDecodeParam(t *testing.T) {
	tests := []struct {
		raw    []byte
		format int16
		oid    uint32
		want   string
		code   string
	}{
		{[]byte("abc"), formatText, OIDInt8, "abc", ""}, // text is passed as is
		{[]byte{0xff, 0xfe}, formatBinary, OIDInt2, "-2", ""},
		{[]byte{0, 0, 0, 1}, formatBinary, OIDInt8, "", codeInvalidBinaryRepr},
		{[]byte{0x3f, 0x80, 0, 0}, formatBinary, OIDFloat4, "1", ""},
		{[]byte{0x7f, 0xf0, 0, 0, 0, 0, 0, 0}, formatBinary, OIDFloat8, "Infinity", ""},
		{[]byte{0}, formatBinary, OIDBool, "f", ""},
		{[]byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, formatBinary, OIDTimestampTZ, "infinity", ""},
		{[]byte{0x80, 0, 0, 0, 0, 0, 0, 0}, formatBinary, OIDTimestamp, "-infinity", ""},
		{[]byte{0, 0, 0, 0, 0, 0, 0, 0}, formatBinary, OIDTimestamp, "2000-01-01 00:00:00", ""},
		{[]byte("x"), formatBinary, OIDVarchar, "x", ""},
		{[]byte{1}, formatBinary, 17, "", codeFeatureNotSupported},
		{[]byte{1}, 2, OIDText, "", codeProtocolViolation},
	}
	for _, tt := range tests {
		got, err := decodeParam(tt.raw, tt.format, tt.oid, 0)
		if tt.code != "" {
			if code := sqlState(err); code != tt.code {
				t.Errorf("decodeParam(%x, %d, %d): err = %v, want %s", tt.raw, tt.format, tt.oid, err, tt.code)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("decodeParam(%x, %d, %d) = %q, %v; want %q", tt.raw, tt.format, tt.oid, got, err, tt.want)
		}
	}

	// Bind's buffer is reused by the next Receive: the value must be a copy.
	raw := []byte("abc")
	got, _ := decodeParam(raw, formatText, OIDText, 0)
	raw[0] = 'X'
	if string(got) != "abc" {
		t.Errorf("text parameter aliases the message buffer: %q", got)
	}
	if got, err := decodeParam([]byte{}, formatText, OIDText, 0); err != nil || got == nil {
		t.Errorf("empty parameter = %#v, %v; want non-nil empty", got, err)
	}
	if got, err := decodeParam(nil, formatBinary, OIDInt8, 0); err != nil || got != nil {
		t.Errorf("NULL parameter = %#v, %v; want nil", got, err)
	}
}

type hintedError struct{ error }

func (hintedError) SQLState() string { return "42P01" }
func (hintedError) Hint() string     { return "try again" }
func (hintedError) Position() int    { return 7 }

type badCodeError struct{ error }

func (badCodeError) SQLState() string { return "oops" }
func (badCodeError) Position() int    { return -1 }

func TestErrorResponse(t *testing.T) {
	wrapped := fmt.Errorf("outer: %w", hintedError{errors.New("inner")})
	r := errorResponse(severityError, wrapped)
	if r.Severity != "ERROR" || r.Code != "42P01" || r.Message != "outer: inner" || r.Hint != "try again" || r.Position != 7 {
		t.Errorf("wrapped: %+v", r)
	}
	r = errorResponse(severityError, errors.New("plain\x00text"))
	if r.Code != "XX000" || r.Message != "plaintext" || r.Hint != "" || r.Position != 0 {
		t.Errorf("plain: %+v", r)
	}
	r = errorResponse(severityFatal, badCodeError{errors.New("x")})
	if r.Code != "XX000" || r.Severity != "FATAL" || r.Position != 0 {
		t.Errorf("bad code: %+v", r)
	}
}
