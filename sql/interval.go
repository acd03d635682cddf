package sql

import (
	"strconv"
	"strings"
)

// IntervalFunc is the function name INTERVAL literals are rewritten to before
// the TiDB parser sees a SELECT body: it accepts no INTERVAL literal as a
// function argument, so `INTERVAL '1' MINUTE` becomes `__ivl(60000)`, a call
// whose argument is the interval in milliseconds.
const IntervalFunc = "__ivl"

// BoolFunc carries TRUE and FALSE through the TiDB parser, which would
// read them as 1 and 0.
const BoolFunc = "__bool"

// castTypes maps our type names to what MySQL's CAST accepts.
var castTypes = map[string]string{
	"TEXT": "CHAR", "VARCHAR": "CHAR", "STRING": "CHAR",
	"BIGINT": "SIGNED", "INT": "SIGNED", "INTEGER": "SIGNED", "INT8": "SIGNED",
	"DOUBLE": "DOUBLE", "REAL": "DOUBLE", "FLOAT": "DOUBLE", "FLOAT8": "DOUBLE",
	"TIMESTAMP": "DATETIME",
}

// SessionFunc replaces SESSION(...), a keyword in the TiDB grammar.
const SessionFunc = "__session"

var unitMillis = map[string]int64{
	"MILLISECOND": 1, "MILLISECONDS": 1, "MS": 1,
	"SECOND": 1000, "SECONDS": 1000, "S": 1000, "SEC": 1000, "SECS": 1000,
	"MINUTE": 60_000, "MINUTES": 60_000, "MIN": 60_000, "MINS": 60_000, "M": 60_000,
	"HOUR": 3_600_000, "HOURS": 3_600_000, "H": 3_600_000,
	"DAY": 86_400_000, "DAYS": 86_400_000, "D": 86_400_000,
}

// parseInterval reads an INTERVAL literal starting at toks[i] (the INTERVAL
// keyword) in any of the forms INTERVAL '1' MINUTE, INTERVAL '1 minute' and
// INTERVAL 1 MINUTE. It returns the length in milliseconds and the index of
// the first token after the literal.
func parseInterval(src string, toks []Token, i int) (int64, int, error) {
	kw := toks[i]
	if i+1 >= len(toks) {
		return 0, i, syntaxAt(src, kw.End, "INTERVAL needs a value, e.g. INTERVAL '1' MINUTE")
	}
	v := toks[i+1]
	var qty, unit string
	next := i + 2
	switch v.Kind {
	case TokString:
		fields := strings.Fields(v.Text)
		switch len(fields) {
		case 1:
			qty = fields[0]
		case 2:
			qty, unit = fields[0], fields[1]
		default:
			return 0, i, syntaxAt(src, v.Start, "cannot read interval %q: write INTERVAL '1' MINUTE or INTERVAL '1 minute'", v.Text)
		}
	case TokNumber:
		qty = v.Text
	default:
		return 0, i, syntaxAt(src, v.Start, "INTERVAL needs a value, e.g. INTERVAL '1' MINUTE")
	}
	if unit == "" {
		if next >= len(toks) || toks[next].Kind != TokIdent {
			return 0, i, syntaxAt(src, v.End, "INTERVAL needs a unit (MILLISECOND, SECOND, MINUTE, HOUR or DAY)")
		}
		unit = toks[next].Text
		next++
	}
	mul, ok := unitMillis[strings.ToUpper(unit)]
	if !ok {
		return 0, i, syntaxAt(src, v.Start, "unknown interval unit %q: use MILLISECOND, SECOND, MINUTE, HOUR or DAY", unit)
	}
	f, err := strconv.ParseFloat(qty, 64)
	if err != nil {
		return 0, i, syntaxAt(src, v.Start, "cannot read interval quantity %q", qty)
	}
	return int64(f * float64(mul)), next, nil
}

// rewrite is a SELECT/INSERT body rewritten for the TiDB parser, with a map
// from byte offsets in the rewritten text back to the original, so syntax
// errors point at what the user typed.
type rewrite struct {
	text  string
	orig  string
	base  int // byte offset of the body inside the whole statement
	edits []edit
}

type edit struct{ newStart, newEnd, origStart, origEnd int }

// origOffset maps an offset in r.text to an offset in the whole statement.
func (r *rewrite) origOffset(off int) int {
	delta := 0
	for _, e := range r.edits {
		if off < e.newStart {
			break
		}
		if off < e.newEnd {
			return r.base + e.origStart
		}
		delta = e.origEnd - e.newEnd
	}
	return r.base + off + delta
}

// rewriteBody rewrites src[start:] (tokens toks, already lexed from src) for
// the TiDB parser: INTERVAL literals and SESSION(.
func rewriteBody(src string, toks []Token, start int) (*rewrite, error) {
	r := &rewrite{orig: src, base: start}
	var b strings.Builder
	copied := start // next original byte not yet copied
	emit := func(origStart, origEnd int, repl string) {
		b.WriteString(src[copied:origStart])
		ns := b.Len()
		b.WriteString(repl)
		r.edits = append(r.edits, edit{newStart: ns, newEnd: b.Len(), origStart: origStart - start, origEnd: origEnd - start})
		copied = origEnd
	}
	var castDepth []int // paren depths at which a CAST( is open
	depth := 0
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if t.Start < start {
			continue
		}
		switch {
		case t.Is("("):
			depth++
			if i > 0 && toks[i-1].Is("CAST") {
				castDepth = append(castDepth, depth)
			}
		case t.Is(")"):
			if n := len(castDepth); n > 0 && castDepth[n-1] == depth {
				castDepth = castDepth[:n-1]
			}
			depth--
		case t.Is("AS") && len(castDepth) > 0 && castDepth[len(castDepth)-1] == depth && i+1 < len(toks):
			// CAST(x AS TEXT) in the MySQL dialect the TiDB parser reads.
			tt := toks[i+1]
			if repl, ok := castTypes[strings.ToUpper(tt.Text)]; ok && tt.Kind == TokIdent {
				end := tt.End
				if strings.EqualFold(tt.Text, "DOUBLE") && i+2 < len(toks) && toks[i+2].Is("PRECISION") {
					end = toks[i+2].End
					i++
				}
				emit(tt.Start, end, repl)
				i++
			}
		case t.Is("INTERVAL"):
			ms, next, err := parseInterval(src, toks, i)
			if err != nil {
				return nil, err
			}
			emit(t.Start, toks[next-1].End, IntervalFunc+"("+strconv.FormatInt(ms, 10)+")")
			i = next - 1
		case t.Is("SESSION") && i+1 < len(toks) && toks[i+1].Is("("):
			emit(t.Start, t.End, SessionFunc)
		case (t.Is("TRUE") || t.Is("FALSE")) && !(i > 0 && (toks[i-1].Is("IS") || toks[i-1].Is("NOT"))):
			// The TiDB parser reads TRUE as the integer 1; keep it boolean.
			v := "1"
			if t.Is("FALSE") {
				v = "0"
			}
			emit(t.Start, t.End, BoolFunc+"("+v+")")
		}
	}
	b.WriteString(src[copied:])
	r.text = b.String()
	return r, nil
}
