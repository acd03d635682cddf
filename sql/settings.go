package sql

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Set is SET [SESSION | LOCAL] name { = | TO } value | DEFAULT, or
// RESET name | RESET ALL. Settings the engine does not act on are still
// parsed into a Set; the session decides what to do with each.
type Set struct {
	Name    string // lower case
	Value   string // a string literal's content, a number or a word, as written
	Default bool   // DEFAULT or RESET: back to the server's value
	Local   bool   // SET LOCAL: until the end of the transaction
	All     bool   // RESET ALL
	Reset   bool   // written as RESET (its command tag)
	Pos     int    // 1-based position of the value, for errors
}

func (*Set) statement() {}

// set parses what follows SET or RESET. Forms it does not read (SET TIME
// ZONE ..., SET NAMES ..., SET TRANSACTION ...) are accepted as no-ops, as
// before settings existed.
func (p *stmtParser) set() (Statement, error) {
	kw := p.next()
	noop := &Noop{Tag: strings.ToUpper(kw.Text)}
	if kw.Is("RESET") {
		if p.accept("ALL") {
			return &Set{All: true, Default: true, Reset: true}, p.atEnd()
		}
		t := p.next()
		if t.Kind != TokIdent && t.Kind != TokQIdent {
			return noop, nil
		}
		return &Set{Name: strings.ToLower(t.Text), Default: true, Reset: true}, p.atEnd()
	}
	s := &Set{}
	switch {
	case p.accept("LOCAL"):
		s.Local = true
	case p.accept("SESSION"):
		if p.peek().Is("CHARACTERISTICS") || p.peek().Is("AUTHORIZATION") {
			return noop, nil
		}
	}
	name := p.next()
	if name.Kind != TokIdent && name.Kind != TokQIdent || !(p.accept("=") || p.accept("TO")) {
		return noop, nil
	}
	s.Name = strings.ToLower(name.Text)
	v := p.peek()
	s.Pos = charPos(p.src, v.Start)
	switch {
	case v.Is("DEFAULT"):
		p.next()
		s.Default = true
	case v.Kind == TokString, v.Kind == TokNumber, v.Kind == TokIdent, v.Kind == TokQIdent:
		p.next()
		s.Value = v.Text
	case v.Is("-") || v.Is("+"):
		p.next()
		n := p.next()
		if n.Kind != TokNumber {
			return nil, p.errAt(n, "expected a number")
		}
		s.Value = v.Text + n.Text
	default:
		return nil, p.errAt(v, "expected a value for %s", s.Name)
	}
	if p.peek().Is(",") { // a list (search_path = a, b): not one we act on
		return noop, nil
	}
	return s, p.atEnd()
}

// timeUnits are PostgreSQL's units of time settings, case-sensitive as
// there, in milliseconds.
var timeUnits = []struct {
	name string
	ms   float64
}{{"us", 0.001}, {"ms", 1}, {"s", 1000}, {"min", 60_000}, {"h", 3_600_000}, {"d", 86_400_000}}

// ParseMillisSetting reads the value of a time setting counted in
// milliseconds, as PostgreSQL's statement_timeout takes it: a number
// (milliseconds) or a number and a unit (us, ms, s, min, h, d), such as
// 5000, '5s', '1.5 min' or '250ms'. 0 means off. Errors are 22023 naming
// the setting.
func ParseMillisSetting(name, value string) (time.Duration, error) {
	v := strings.TrimSpace(value)
	end := 0
	for end < len(v) && (v[end] >= '0' && v[end] <= '9' || v[end] == '.' || (end == 0 && (v[end] == '-' || v[end] == '+'))) {
		end++
	}
	num, err := strconv.ParseFloat(v[:end], 64)
	unit := strings.TrimSpace(v[end:])
	scale := 1.0
	if unit != "" {
		scale = 0
		for _, u := range timeUnits {
			if u.name == unit {
				scale = u.ms
			}
		}
	}
	if err != nil || scale == 0 || math.IsNaN(num) {
		e := Errorf(CodeInvalidParameter, "invalid value for parameter %q: %q", name, value)
		if err == nil {
			e = e.WithHint(`Valid units for this parameter are "us", "ms", "s", "min", "h", and "d".`)
		}
		return 0, e
	}
	ms := math.Round(num * scale)
	if num > 0 && ms == 0 {
		ms = 1 // a positive timeout never rounds to "off"
	}
	if ms < 0 || ms > math.MaxInt32 {
		return 0, Errorf(CodeInvalidParameter, "%s is outside the valid range for parameter %q (0 .. %d)",
			strings.TrimSpace(value), name, math.MaxInt32)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// FormatMillisSetting shows a time setting as PostgreSQL's SHOW does: 0,
// or the largest unit that holds it exactly (1500ms, 5s, 2min, 1h, 1d).
func FormatMillisSetting(d time.Duration) string {
	ms := d.Milliseconds()
	if ms == 0 {
		return "0"
	}
	unit := "ms"
	for _, u := range []struct {
		name string
		div  int64
	}{{"s", 1000}, {"min", 60}, {"h", 60}, {"d", 24}} {
		if ms%u.div != 0 {
			break
		}
		ms /= u.div
		unit = u.name
	}
	return strconv.FormatInt(ms, 10) + unit
}
