package exec

import (
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// Date/time functions over TIMESTAMP (epoch milliseconds, UTC) and
// INTERVAL (milliseconds). Fields and their numbers are PostgreSQL's:
// dow 0 = Sunday, isodow 7 = Sunday, week and isoyear by ISO 8601, the
// 21st century starting in 2001.

func init() {
	ts, iv, txt, dbl, i64 := types.Timestamp, types.Interval, types.Text, types.Double, types.Int
	def("DATE_TRUNC", dateTrunc, sig(ts, txt, ts))
	def("DATE_PART", datePart, sig(dbl, txt, ts), sig(dbl, txt, iv))
	def("TO_TIMESTAMP", toTimestamp, sig(ts, dbl), sig(ts, txt, txt))
	def("TO_CHAR", toChar, sig(txt, ts, txt))
	def("DATE_BIN", dateBin, sig(ts, iv, ts, ts))
	def("MAKE_TIMESTAMP", makeTimestamp, sig(ts, i64, i64, i64, i64, i64, dbl))
}

// timeUnit is a field name as date_trunc and date_part read it.
type timeUnit uint8

const (
	unitNone timeUnit = iota
	unitMicroseconds
	unitMilliseconds
	unitSecond
	unitMinute
	unitHour
	unitDay
	unitWeek
	unitMonth
	unitQuarter
	unitYear
	unitDecade
	unitCentury
	unitMillennium
	unitEpoch
	unitDow
	unitIsodow
	unitDoy
	unitIsoyear
	unitJulian
	unitTimezone // timezone, timezone_h, timezone_m: only TIMESTAMPTZ has them
)

// timeUnits are the spellings PostgreSQL accepts (its deltatktbl and
// datetktbl), lower case.
var timeUnits = map[string]timeUnit{
	"microsecond": unitMicroseconds, "microseconds": unitMicroseconds, "us": unitMicroseconds, "usec": unitMicroseconds, "usecs": unitMicroseconds, "useconds": unitMicroseconds,
	"millisecond": unitMilliseconds, "milliseconds": unitMilliseconds, "ms": unitMilliseconds, "msec": unitMilliseconds, "msecs": unitMilliseconds, "mseconds": unitMilliseconds,
	"second": unitSecond, "seconds": unitSecond, "s": unitSecond, "sec": unitSecond, "secs": unitSecond,
	"minute": unitMinute, "minutes": unitMinute, "m": unitMinute, "min": unitMinute, "mins": unitMinute,
	"hour": unitHour, "hours": unitHour, "h": unitHour, "hr": unitHour, "hrs": unitHour,
	"day": unitDay, "days": unitDay, "d": unitDay,
	"week": unitWeek, "weeks": unitWeek, "w": unitWeek,
	"month": unitMonth, "months": unitMonth, "mon": unitMonth, "mons": unitMonth,
	"quarter": unitQuarter, "qtr": unitQuarter,
	"year": unitYear, "years": unitYear, "y": unitYear, "yr": unitYear, "yrs": unitYear,
	"decade": unitDecade, "decades": unitDecade, "dec": unitDecade, "decs": unitDecade,
	"century": unitCentury, "centuries": unitCentury, "c": unitCentury, "cent": unitCentury,
	"millennium": unitMillennium, "millennia": unitMillennium, "mil": unitMillennium, "mils": unitMillennium, "millenniums": unitMillennium,
	"epoch": unitEpoch, "dow": unitDow, "isodow": unitIsodow, "doy": unitDoy, "isoyear": unitIsoyear,
	"julian": unitJulian, "j": unitJulian,
	"timezone": unitTimezone, "timezone_h": unitTimezone, "timezone_m": unitTimezone,
}

// unitOf reads a field name; what names the type for the errors
// ("timestamp without time zone", "interval"), ok says which units the
// caller takes (date_trunc fewer than date_part): an unknown name is
// 22023, a known one the caller does not take 0A000, as in PostgreSQL.
func unitOf(name, what string, ok func(timeUnit) bool) (timeUnit, error) {
	u, known := timeUnits[strings.ToLower(strings.TrimSpace(name))]
	if !known {
		return 0, sql.Errorf(sql.CodeInvalidParameter, "unit %q not recognized for type %s", name, what)
	}
	if !ok(u) {
		return 0, sql.Errorf(sql.CodeNotSupported, "unit %q not supported for type %s", name, what)
	}
	return u, nil
}

const tsName = "timestamp without time zone"

// unitCache reads each distinct field name of a column once.
type unitCache struct {
	what string
	ok   func(timeUnit) bool
	last string
	u    timeUnit
	set  bool
}

func (c *unitCache) get(name string) (timeUnit, error) {
	if c.set && name == c.last {
		return c.u, nil
	}
	u, err := unitOf(name, c.what, c.ok)
	if err != nil {
		return 0, err
	}
	c.last, c.u, c.set = name, u, true
	return u, nil
}

func dateTrunc(out *Vec, args []*Vec) error {
	units := unitCache{what: tsName, ok: func(u timeUnit) bool { return u >= unitMicroseconds && u <= unitMillennium }}
	return units.each(out, args, func(i int, ms int64, u timeUnit) { out.I[i] = truncMillis(ms, u) })
}

// each calls set for every row of out that is not NULL, with its time
// value (args[1]) and its unit, read from its text (args[0]) through the
// cache: the loop of every kernel that takes a unit by name.
func (c *unitCache) each(out *Vec, args []*Vec, set func(i int, ms int64, u timeUnit)) error {
	for i, ms := range args[1].I {
		if out.rowNull(i) {
			continue
		}
		u, err := c.get(args[0].S[i])
		if err != nil {
			return err
		}
		set(i, ms, u)
	}
	return nil
}

// truncMillis truncates a timestamp to the start of its unit.
func truncMillis(ms int64, u timeUnit) int64 {
	switch u {
	case unitMicroseconds, unitMilliseconds:
		return ms
	case unitSecond:
		return floorTo(ms, 1000)
	case unitMinute:
		return floorTo(ms, 60_000)
	case unitHour:
		return floorTo(ms, 3_600_000)
	case unitDay:
		return floorTo(ms, msPerDay)
	}
	t := types.MillisTime(ms)
	y, m, d := t.Date()
	switch u {
	case unitWeek: // the Monday of its ISO week
		wd := (int(t.Weekday()) + 6) % 7
		d -= wd
	case unitMonth:
		d = 1
	case unitQuarter:
		m, d = time.Month((int(m)-1)/3*3+1), 1
	case unitYear:
		m, d = 1, 1
	case unitDecade: // PostgreSQL's timestamp_trunc
		if y > 0 {
			y = y / 10 * 10
		} else {
			y = -((8 - (y - 1)) / 10) * 10
		}
		m, d = 1, 1
	case unitCentury:
		if y > 0 {
			y = (y+99)/100*100 - 99
		} else {
			y = -((99-(y-1))/100)*100 + 1
		}
		m, d = 1, 1
	case unitMillennium:
		if y > 0 {
			y = (y+999)/1000*1000 - 999
		} else {
			y = -((999-(y-1))/1000)*1000 + 1
		}
		m, d = 1, 1
	}
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).UnixMilli()
}

func floorTo(ms, unit int64) int64 { return floorDiv64(ms, unit) * unit }

func floorDiv64(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func floorDiv(a, b int) int { return int(floorDiv64(int64(a), int64(b))) }

func datePart(out *Vec, args []*Vec) error {
	if args[1].T == types.Interval {
		units := unitCache{what: "interval", ok: func(u timeUnit) bool { return u >= unitMicroseconds && u <= unitEpoch && u != unitWeek }}
		return units.each(out, args, func(i int, ms int64, u timeUnit) { out.F[i] = intervalPart(ms, u) })
	}
	units := unitCache{what: tsName, ok: func(u timeUnit) bool { return u != unitTimezone }}
	return units.each(out, args, func(i int, ms int64, u timeUnit) { out.F[i] = timestampPart(ms, u) })
}

// timestampPart is one field of a timestamp. Fractions are an exact
// number of milliseconds divided once, so the DOUBLE is the one nearest
// PostgreSQL's exact NUMERIC (30.123, not 30 + 0.123).
func timestampPart(ms int64, u timeUnit) float64 {
	msOfMinute := float64(ms - floorTo(ms, 60_000))
	switch u {
	case unitMicroseconds:
		return msOfMinute * 1000
	case unitMilliseconds:
		return msOfMinute
	case unitSecond:
		return msOfMinute / 1000
	case unitEpoch:
		return float64(ms) / 1000
	}
	t := types.MillisTime(ms)
	y := t.Year()
	switch u {
	case unitMinute:
		return float64(t.Minute())
	case unitHour:
		return float64(t.Hour())
	case unitDay:
		return float64(t.Day())
	case unitMonth:
		return float64(t.Month())
	case unitQuarter:
		return float64((int(t.Month())-1)/3 + 1)
	case unitYear:
		if y <= 0 { // there is no year 0: 1 BC is -1
			return float64(y - 1)
		}
		return float64(y)
	case unitDecade:
		return float64(floorDiv(y, 10))
	case unitCentury:
		if y > 0 {
			return float64((y + 99) / 100)
		}
		return float64(-((99 - (y - 1)) / 100))
	case unitMillennium:
		if y > 0 {
			return float64((y + 999) / 1000)
		}
		return float64(-((999 - (y - 1)) / 1000))
	case unitWeek:
		_, w := t.ISOWeek()
		return float64(w)
	case unitIsoyear:
		iy, _ := t.ISOWeek()
		return float64(iy)
	case unitDow:
		return float64(t.Weekday())
	case unitIsodow:
		if t.Weekday() == time.Sunday {
			return 7
		}
		return float64(t.Weekday())
	case unitDoy:
		return float64(t.YearDay())
	case unitJulian:
		day := floorDiv64(ms, msPerDay)
		frac := ms - day*msPerDay
		return float64(day+julianEpochDay) + float64(frac)/float64(msPerDay)
	}
	return 0
}

// julianEpochDay is the Julian day number of 1970-01-01.
const julianEpochDay = 2440588

// intervalPart is one field of an interval of milliseconds: days, then
// the time of day (an INTERVAL here carries no months).
func intervalPart(ms int64, u timeUnit) float64 {
	days, rest := ms/msPerDay, ms%msPerDay
	msOfMinute := rest % 60_000
	switch u {
	case unitMicroseconds:
		return float64(msOfMinute) * 1000
	case unitMilliseconds:
		return float64(msOfMinute)
	case unitSecond:
		return float64(msOfMinute) / 1000
	case unitMinute:
		return float64(rest / 60_000 % 60)
	case unitHour:
		return float64(rest / 3_600_000)
	case unitDay:
		return float64(days)
	case unitEpoch:
		return float64(ms) / 1000
	}
	return 0 // month, quarter, year, decade, century, millennium
}

// toTimestamp is to_timestamp(epoch seconds) or to_timestamp(text, format).
func toTimestamp(out *Vec, args []*Vec) error {
	if len(args) == 1 {
		for i, s := range args[0].F {
			if out.rowNull(i) {
				continue
			}
			if math.IsNaN(s) {
				return sql.Errorf(sql.CodeDatetimeOutOfRange, "timestamp cannot be NaN")
			}
			ms := math.Round(s * 1000)
			if math.IsInf(s, 0) || ms < minTimestampMs || ms > maxTimestampMs {
				return sql.Errorf(sql.CodeDatetimeOutOfRange, "timestamp out of range: %q", FormatFloat(s))
			}
			out.I[i] = int64(ms)
		}
		return nil
	}
	var last string
	var nodes []fmtNode
	for i, s := range args[0].S {
		if out.rowNull(i) {
			continue
		}
		if f := args[1].S[i]; nodes == nil || f != last {
			nodes, last = parseDateFormat(f), f
		}
		ms, err := parseWithFormat(s, nodes)
		if err != nil {
			return err
		}
		out.I[i] = ms
	}
	return nil
}

// The TIMESTAMP range PostgreSQL accepts: 4713 BC to 294276 AD. Beyond
// Go's time.Time years (±292 billion) nothing in between overflows.
const (
	minTimestampMs = -210866803200000     // 4714-11-24 00:00:00 BC
	maxTimestampMs = 9224318016000000 - 1 // 294277-01-01 00:00:00
)

func toChar(out *Vec, args []*Vec) error {
	var last string
	var nodes []fmtNode
	var b strings.Builder
	for i, ms := range args[0].I {
		if out.rowNull(i) {
			continue
		}
		if f := args[1].S[i]; nodes == nil || f != last {
			nodes, last = parseDateFormat(f), f
		}
		b.Reset()
		formatDate(&b, types.MillisTime(ms), nodes)
		out.S[i] = b.String()
	}
	return nil
}

func dateBin(out *Vec, args []*Vec) error {
	stride, src, origin := args[0].I, args[1].I, args[2].I
	for i := range out.I {
		if out.rowNull(i) {
			continue
		}
		if stride[i] <= 0 {
			return sql.Errorf(sql.CodeDatetimeOutOfRange, "stride must be greater than zero")
		}
		diff, ok := subInt(src[i], origin[i])
		if !ok {
			return timestampRange()
		}
		// Toward minus infinity, not zero, before the origin.
		out.I[i] = origin[i] + floorDiv64(diff, stride[i])*stride[i]
	}
	return nil
}

func makeTimestamp(out *Vec, args []*Vec) error {
	for i := range out.I {
		if out.rowNull(i) {
			continue
		}
		y, mo, d, h, mi, s := args[0].I[i], args[1].I[i], args[2].I[i], args[3].I[i], args[4].I[i], args[5].F[i]
		if y == 0 || y < -4713 || y > 294276 || mo < 1 || mo > 12 || d < 1 || d > int64(daysIn(time.Month(mo), int(y))) {
			return sql.Errorf(sql.CodeDatetimeOutOfRange, "date field value out of range: %d-%02d-%02d", y, mo, d)
		}
		if h < 0 || h > 24 || mi < 0 || mi > 59 || !(s >= 0 && s <= 60) || (h == 24 && (mi > 0 || s > 0)) {
			return sql.Errorf(sql.CodeDatetimeOutOfRange, "time field value out of range: %d:%02d:%s", h, mi, FormatFloat(s))
		}
		if y < 0 { // 1 BC is year 0 in the proleptic calendar
			y++
		}
		base := time.Date(int(y), time.Month(mo), int(d), int(h), int(mi), 0, 0, time.UTC).UnixMilli()
		out.I[i] = base + int64(math.Round(s*1000))
	}
	return nil
}

func daysIn(m time.Month, y int) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// ---- to_char / to_timestamp format patterns

// fmtNode is one element of a format: a field (pattern) or literal text.
type fmtNode struct {
	field   string // upper-case pattern, "" for literal text
	lit     string
	fm      bool // FM: no padding
	th      int  // TH / th suffix: 1 upper, 2 lower
	style   int  // names: 0 upper (MONTH), 1 capitalised (Month), 2 lower (month)
	quoted  bool // literal from "..."
	isSpace bool
}

// dateFields are the patterns, longest first so that a prefix never wins.
var dateFields = []string{
	"Y,YYY", "YYYY", "YYY", "YY", "Y", "IYYY", "IYY", "IY", "IDDD", "ID", "IW", "I",
	"HH24", "HH12", "HH", "MI", "SSSSS", "SSSS", "SS", "MS", "US",
	"FF1", "FF2", "FF3", "FF4", "FF5", "FF6",
	"A.M.", "P.M.", "AM", "PM", "B.C.", "A.D.", "BC", "AD",
	"MONTH", "MON", "MM", "DAY", "DY", "DDD", "DD", "D",
	"WW", "W", "CC", "J", "Q", "RM",
}

func parseDateFormat(f string) []fmtNode {
	var out []fmtNode
	for i := 0; i < len(f); {
		if f[i] == '"' {
			j := i + 1
			var lit strings.Builder
			for j < len(f) && f[j] != '"' {
				if f[j] == '\\' && j+1 < len(f) {
					j++
				}
				lit.WriteByte(f[j])
				j++
			}
			out = append(out, fmtNode{lit: lit.String(), quoted: true})
			i = min(j+1, len(f))
			continue
		}
		fm := false
		rest := f[i:]
		for len(rest) >= 2 && (strings.EqualFold(rest[:2], "FM") || strings.EqualFold(rest[:2], "FX")) {
			fm = fm || strings.EqualFold(rest[:2], "FM")
			i += 2
			rest = f[i:]
		}
		matched := ""
		for _, p := range dateFields {
			if len(rest) >= len(p) && strings.EqualFold(rest[:len(p)], p) {
				matched = p
				break
			}
		}
		if matched == "" {
			if fm && len(rest) == 0 {
				break
			}
			r := rest[:1]
			if rest[0] >= utf8.RuneSelf { // a multi-byte character, whole
				_, size := utf8.DecodeRuneInString(rest)
				r = rest[:size]
			}
			out = append(out, fmtNode{lit: r, isSpace: r == " "})
			i += len(r)
			continue
		}
		n := fmtNode{field: matched, fm: fm}
		written := rest[:len(matched)]
		switch {
		case written == strings.ToUpper(written):
			n.style = 0
		case written == strings.ToLower(written):
			n.style = 2
		default:
			n.style = 1
		}
		i += len(matched)
		if rest := f[i:]; len(rest) >= 2 {
			switch rest[:2] {
			case "TH":
				n.th = 1
				i += 2
			case "th":
				n.th = 2
				i += 2
			}
		}
		out = append(out, n)
	}
	return out
}

var monthNames = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
var dayNames = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
var romanMonths = []string{"I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII"}

func styled(s string, style int) string {
	switch style {
	case 0:
		return strings.ToUpper(s)
	case 2:
		return strings.ToLower(s)
	}
	return s
}

// formatDate writes t as to_char does.
func formatDate(b *strings.Builder, t time.Time, nodes []fmtNode) {
	num := func(n fmtNode, v, width int) {
		s := strconv.Itoa(v)
		if !n.fm && len(s) < width && v >= 0 {
			s = strings.Repeat("0", width-len(s)) + s
		}
		b.WriteString(s)
		if n.th != 0 {
			b.WriteString(ordinal(v, n.th == 2))
		}
	}
	name := func(n fmtNode, s string, pad int) {
		s = styled(s, n.style)
		b.WriteString(s)
		if !n.fm && len(s) < pad {
			b.WriteString(strings.Repeat(" ", pad-len(s)))
		}
	}
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	ms := t.Nanosecond() / 1e6
	iy, iw := t.ISOWeek()
	for _, n := range nodes {
		if n.field == "" {
			b.WriteString(n.lit)
			continue
		}
		switch n.field {
		case "YYYY":
			num(n, y, 4)
		case "Y,YYY":
			b.WriteString(strconv.Itoa(y/1000) + "," + leftPad(strconv.Itoa(y%1000), 3))
		case "YYY":
			num(n, y%1000, 3)
		case "YY":
			num(n, y%100, 2)
		case "Y":
			num(n, y%10, 1)
		case "IYYY":
			num(n, iy, 4)
		case "IYY":
			num(n, iy%1000, 3)
		case "IY":
			num(n, iy%100, 2)
		case "I":
			num(n, iy%10, 1)
		case "HH24":
			num(n, h, 2)
		case "HH", "HH12":
			num(n, (h+11)%12+1, 2)
		case "MI":
			num(n, mi, 2)
		case "SS":
			num(n, s, 2)
		case "SSSS", "SSSSS":
			num(n, h*3600+mi*60+s, 0)
		case "MS":
			num(n, ms, 3)
		case "US":
			num(n, ms*1000, 6)
		case "FF1", "FF2", "FF3", "FF4", "FF5", "FF6":
			k := int(n.field[2] - '0')
			v := ms * 1000
			for j := 6; j > k; j-- {
				v /= 10
			}
			num(fmtNode{}, v, k)
		case "AM", "PM", "A.M.", "P.M.":
			v := "AM"
			if h >= 12 {
				v = "PM"
			}
			if strings.Contains(n.field, ".") {
				v = v[:1] + "." + v[1:] + "."
			}
			if n.style == 2 {
				v = strings.ToLower(v)
			}
			b.WriteString(v)
		case "BC", "AD", "B.C.", "A.D.":
			v := "AD"
			if y <= 0 {
				v = "BC"
			}
			if strings.Contains(n.field, ".") {
				v = v[:1] + "." + v[1:] + "."
			}
			if n.style == 2 {
				v = strings.ToLower(v)
			}
			b.WriteString(v)
		case "MONTH":
			name(n, monthNames[mo-1], 9)
		case "MON":
			name(n, monthNames[mo-1][:3], 0)
		case "MM":
			num(n, int(mo), 2)
		case "DAY":
			name(n, dayNames[t.Weekday()], 9)
		case "DY":
			name(n, dayNames[t.Weekday()][:3], 0)
		case "DDD":
			num(n, t.YearDay(), 3)
		case "IDDD":
			num(n, (iw-1)*7+(int(t.Weekday())+6)%7+1, 3)
		case "DD":
			num(n, d, 2)
		case "D":
			num(n, int(t.Weekday())+1, 1)
		case "ID":
			num(n, (int(t.Weekday())+6)%7+1, 1)
		case "WW":
			num(n, (t.YearDay()-1)/7+1, 2)
		case "W":
			num(n, (d-1)/7+1, 1)
		case "IW":
			num(n, iw, 2)
		case "CC":
			c := (y + 99) / 100
			num(n, c, 2)
		case "J":
			days := floorDiv64(t.UnixMilli(), msPerDay)
			num(n, int(days+julianEpochDay), 0)
		case "Q":
			num(n, (int(mo)-1)/3+1, 1)
		case "RM":
			v := romanMonths[mo-1]
			if n.style == 2 {
				v = strings.ToLower(v)
			}
			if !n.fm {
				v = v + strings.Repeat(" ", 4-len(v))
			}
			b.WriteString(v)
		}
	}
}

func leftPad(s string, w int) string {
	if len(s) >= w {
		return s
	}
	return strings.Repeat("0", w-len(s)) + s
}

// ordinal is the English suffix of n: st, nd, rd, th.
func ordinal(n int, lower bool) string {
	s := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			s = "st"
		case 2:
			s = "nd"
		case 3:
			s = "rd"
		}
	}
	if !lower {
		s = strings.ToUpper(s)
	}
	return s
}

// numericField reports whether a pattern reads digits.
func numericField(f string) bool {
	switch f {
	case "AM", "PM", "A.M.", "P.M.", "BC", "AD", "B.C.", "A.D.", "MONTH", "MON", "DAY", "DY", "RM", "":
		return false
	}
	return true
}

// fieldWidth is how many digits a numeric pattern reads when the next
// pattern is also a number (YYYYMMDD); 0: as many as there are.
func fieldWidth(f string) int {
	switch f {
	case "YYYY", "IYYY":
		return 4
	case "YYY", "IYY", "DDD", "IDDD", "MS":
		return 3
	case "YY", "IY", "HH", "HH12", "HH24", "MI", "SS", "MM", "DD", "WW", "IW", "CC":
		return 2
	case "Y", "I", "D", "ID", "W", "Q":
		return 1
	case "US":
		return 6
	case "SSSS", "SSSSS":
		return 5
	}
	if strings.HasPrefix(f, "FF") {
		return int(f[2] - '0')
	}
	return 0
}

// parseWithFormat reads text as to_timestamp(text, format) does (not in
// FX mode): a space in the format skips any spaces, any other literal
// skips one separator, fields skip leading spaces.
func parseWithFormat(s string, nodes []fmtNode) (int64, error) {
	year, month, day, hour, minute, sec, msec := 1, 1, 1, 0, 0, 0, 0
	haveYear, pm, am12, hour12, doy := false, false, false, false, 0
	bad := func(v, f string) *sql.Error {
		return sql.Errorf(sql.CodeInvalidDatetimeFmt, "invalid value %q for %q", v, f)
	}
	p := 0
	for k, n := range nodes {
		if n.field == "" {
			switch {
			case n.isSpace:
				for p < len(s) && s[p] == ' ' {
					p++
				}
			case n.quoted:
				p = min(p+len([]rune(n.lit)), len(s))
			default:
				if p < len(s) && !isAlnum(s[p]) {
					p++
				}
			}
			continue
		}
		for p < len(s) && s[p] == ' ' {
			p++
		}
		if !numericField(n.field) {
			rest := s[p:]
			var names []string
			switch n.field {
			case "MONTH":
				names = monthNames
			case "MON":
				names = abbrev(monthNames)
			case "DAY":
				names = dayNames
			case "DY":
				names = abbrev(dayNames)
			case "AM", "PM":
				names = []string{"AM", "PM"}
			case "A.M.", "P.M.":
				names = []string{"A.M.", "P.M."}
			case "BC", "AD":
				names = []string{"BC", "AD"}
			case "B.C.", "A.D.":
				names = []string{"B.C.", "A.D."}
			case "RM":
				names = romanMonths
			}
			hit := -1
			for j, nm := range names {
				if len(rest) >= len(nm) && strings.EqualFold(rest[:len(nm)], nm) && (hit < 0 || len(nm) > len(names[hit])) {
					hit = j
				}
			}
			if hit < 0 {
				word := rest
				if len(word) > 10 {
					word = word[:10]
				}
				return 0, bad(word, n.field).WithHint("the input must name a %s as the format says", strings.ToLower(n.field))
			}
			p += len(names[hit])
			switch n.field {
			case "MONTH", "MON":
				month = hit + 1
			case "AM", "PM", "A.M.", "P.M.":
				am12, pm = true, hit == 1
			case "RM":
				month = hit + 1
			}
			continue
		}
		// Digits: a fixed width when the next node is a number too.
		width := 0
		if k+1 < len(nodes) && numericField(nodes[k+1].field) && nodes[k+1].field != "" {
			width = fieldWidth(n.field)
		}
		start := p
		if p < len(s) && (s[p] == '-' || s[p] == '+') && (n.field == "YYYY" || n.field == "J") {
			p++
		}
		for p < len(s) && s[p] >= '0' && s[p] <= '9' && (width == 0 || p-start < width) {
			p++
		}
		digits := s[start:p]
		if digits == "" || digits == "-" || digits == "+" {
			word := s[start:]
			if len(word) > 10 {
				word = word[:10]
			}
			return 0, bad(word, n.field).WithHint("Value must be an integer.")
		}
		v, err := strconv.Atoi(digits)
		if err != nil {
			return 0, sql.Errorf(sql.CodeDatetimeOutOfRange, "value for %q in source string is out of range", n.field)
		}
		nd := len(strings.TrimLeft(digits, "+-"))
		switch n.field {
		case "YYYY", "IYYY", "Y,YYY":
			year, haveYear = v, true
		case "YYY", "IYY":
			year, haveYear = 2000+v, true
			if v >= 100 && nd == 3 {
				year = 1000 + v
			}
		case "YY", "IY":
			year, haveYear = 2000+v, true
			if v >= 70 {
				year = 1900 + v
			}
		case "Y", "I":
			year, haveYear = 2000+v, true
		case "MM":
			month = v
		case "DD":
			day = v
		case "DDD":
			doy = v
		case "HH", "HH12":
			hour, hour12 = v, true
		case "HH24":
			hour = v
		case "MI":
			minute = v
		case "SS":
			sec = v
		case "SSSS", "SSSSS":
			hour, minute, sec = v/3600, v/60%60, v%60
		case "MS":
			for ; nd < 3; nd++ {
				v *= 10
			}
			msec = v
		case "US", "FF1", "FF2", "FF3", "FF4", "FF5", "FF6":
			for ; nd < 6; nd++ {
				v *= 10
			}
			msec = (v + 500) / 1000
		case "J":
			t := time.UnixMilli((int64(v) - julianEpochDay) * msPerDay).UTC()
			y, m, d := t.Date()
			year, month, day, haveYear = y, int(m), d, true
		}
	}
	if hour12 || am12 {
		if hour12 && (hour < 1 || hour > 12) {
			return 0, sql.Errorf(sql.CodeDatetimeOutOfRange, "hour \"%d\" is invalid for the 12-hour clock", hour).
				WithHint("Use the 24-hour clock, or give an hour between 1 and 12.")
		}
		if pm && hour < 12 {
			hour += 12
		} else if !pm && hour == 12 {
			hour = 0
		}
	}
	_ = haveYear
	if doy > 0 {
		month, day = 1, doy
		if doy > 366 || (doy == 366 && daysIn(2, year) == 28) {
			return 0, sql.Errorf(sql.CodeDatetimeOutOfRange, "date/time field value out of range: %q", s)
		}
	} else if month < 1 || month > 12 || day < 1 || day > daysIn(time.Month(month), year) {
		return 0, sql.Errorf(sql.CodeDatetimeOutOfRange, "date/time field value out of range: %q", s)
	}
	if hour > 24 || minute > 59 || sec > 60 {
		return 0, sql.Errorf(sql.CodeDatetimeOutOfRange, "date/time field value out of range: %q", s)
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, 0, time.UTC).UnixMilli() + int64(msec), nil
}

func abbrev(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n[:3]
	}
	return out
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}
