package exec

import (
	"strconv"
	"strings"
)

const msPerDay = 86_400_000

// FormatInterval prints an INTERVAL (milliseconds) as PostgreSQL's default
// output (IntervalStyle postgres) prints the interval TIMESTAMP - TIMESTAMP
// gives: whole days, then a signed time of day: "00:01:30", "1 day 02:00:00",
// "-3 days -00:00:00.5", "2 days". An INTERVAL here is a plain number of
// milliseconds, so '25 hours' prints as "1 day 01:00:00".
func FormatInterval(ms int64) string {
	days := ms / msPerDay
	rest := ms % msPerDay
	var b strings.Builder
	if days != 0 {
		b.WriteString(strconv.FormatInt(days, 10))
		if days == 1 {
			b.WriteString(" day")
		} else {
			b.WriteString(" days")
		}
	}
	if rest == 0 && days != 0 {
		return b.String()
	}
	if days != 0 {
		b.WriteByte(' ')
	}
	if rest < 0 {
		b.WriteByte('-')
		rest = -rest
	}
	h, m, s, frac := rest/3_600_000, rest/60_000%60, rest/1000%60, rest%1000
	two := func(v int64) {
		if v < 10 {
			b.WriteByte('0')
		}
		b.WriteString(strconv.FormatInt(v, 10))
	}
	two(h)
	b.WriteByte(':')
	two(m)
	b.WriteByte(':')
	two(s)
	if frac != 0 {
		f := strconv.FormatInt(1000+frac, 10)[1:] // three digits
		b.WriteByte('.')
		b.WriteString(strings.TrimRight(f, "0"))
	}
	return b.String()
}
