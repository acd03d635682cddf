package exec

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// Like is x [NOT] LIKE pattern [ESCAPE e], and x [NOT] ILIKE pattern when
// Fold. % matches any run of characters, _ exactly one character (not one
// byte); the escape character (backslash by default; 0 for none) makes the
// next character literal. A constant pattern is compiled once, by NewLike.
type Like struct {
	X, Pattern Expr
	Escape     rune
	Not        bool
	Fold       bool

	m *likePattern // compiled constant pattern; nil: compile per row
}

// NewLike builds a Like, compiling a constant pattern now so that a bad
// pattern is an error before any row is read.
func NewLike(x, pattern Expr, escape rune, not, fold bool) (*Like, error) {
	l := &Like{X: x, Pattern: pattern, Escape: escape, Not: not, Fold: fold}
	if lit, ok := pattern.(*Literal); ok {
		if s, ok := lit.V.(string); ok {
			m, err := compileLike(s, escape, fold)
			if err != nil {
				return nil, err
			}
			l.m = m
		}
	}
	return l, nil
}

func (l *Like) Type() types.Type { return types.Bool }
func (l *Like) String() string {
	op := "LIKE"
	if l.Fold {
		op = "ILIKE"
	}
	if l.Not {
		op = "NOT " + op
	}
	s := fmt.Sprintf("(%s %s %s", l.X, op, l.Pattern)
	if l.Escape != '\\' {
		s += fmt.Sprintf(" ESCAPE '%s'", escapeText(l.Escape))
	}
	return s + ")"
}

func escapeText(r rune) string {
	if r == 0 {
		return ""
	}
	return strings.ReplaceAll(string(r), "'", "''")
}

func (l *Like) Eval(b *Batch) (*Vec, error) {
	x, err := l.X.Eval(b)
	if err != nil {
		return nil, err
	}
	if !x.typed() || x.T != types.Text {
		return allNull(types.Bool, b.N), nil
	}
	out := newVec(types.Bool, b.N)
	if m := l.m; m != nil {
		out.Null = x.copyNulls()
		ss := x.S
		if l.Fold {
			ss = make([]string, len(x.S))
			for i, s := range x.S {
				ss[i] = strings.ToLower(s)
			}
		}
		m.matchAll(ss, out.B, l.Not)
		return out, nil
	}
	p, err := l.Pattern.Eval(b)
	if err != nil {
		return nil, err
	}
	if !p.typed() || p.T != types.Text {
		return allNull(types.Bool, b.N), nil
	}
	out.Null = orNulls(x.Null, p.Null, b.N)
	// A pattern column: compile each distinct run of equal patterns once.
	var m *likePattern
	last := ""
	for i, s := range x.S {
		if out.Null != nil && out.Null[i] {
			continue
		}
		if m == nil || p.S[i] != last {
			if m, err = compileLike(p.S[i], l.Escape, l.Fold); err != nil {
				return nil, err
			}
			last = p.S[i]
		}
		if l.Fold {
			s = strings.ToLower(s)
		}
		out.B[i] = m.match(s) != l.Not
	}
	return out, nil
}

// likePattern is a compiled LIKE pattern: the segments between %s. Each
// segment matches a fixed number of characters.
type likePattern struct {
	kind int // likeExact, likePrefix, likeSuffix, likeContains, likeGeneral
	lit  string
	segs [][]likePart // likeGeneral; len(segs) >= 1, the first and last anchored
}

// likePart is a literal run, or (lit == "") n characters matched by _.
type likePart struct {
	lit string
	any int
}

const (
	likeExact = iota
	likePrefix
	likeSuffix
	likeContains
	likeAll
	likeGeneral
)

func compileLike(p string, esc rune, fold bool) (*likePattern, error) {
	segs := [][]likePart{nil}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			s := lit.String()
			if fold {
				s = strings.ToLower(s)
			}
			n := len(segs) - 1
			segs[n] = append(segs[n], likePart{lit: s})
			lit.Reset()
		}
	}
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRuneInString(p[i:])
		i += n
		switch {
		case esc != 0 && r == esc:
			if i >= len(p) {
				return nil, sql.Errorf("22025", "LIKE pattern must not end with escape character")
			}
			r2, n2 := utf8.DecodeRuneInString(p[i:])
			i += n2
			lit.WriteRune(r2)
		case r == '%':
			flush()
			segs = append(segs, nil)
		case r == '_':
			flush()
			k := len(segs) - 1
			if m := len(segs[k]); m > 0 && segs[k][m-1].lit == "" {
				segs[k][m-1].any++
			} else {
				segs[k] = append(segs[k], likePart{any: 1})
			}
		default:
			lit.WriteRune(r)
		}
	}
	flush()
	// Collapse %%: empty middle segments match anything, as one % does.
	out := [][]likePart{segs[0]}
	for k := 1; k < len(segs); k++ {
		if len(segs[k]) == 0 && k != len(segs)-1 {
			continue
		}
		out = append(out, segs[k])
	}
	segs = out
	m := &likePattern{kind: likeGeneral, segs: segs}
	pure := func(s []likePart) (string, bool) {
		switch {
		case len(s) == 0:
			return "", true
		case len(s) == 1 && s[0].lit != "":
			return s[0].lit, true
		}
		return "", false
	}
	switch len(segs) {
	case 1:
		if s, ok := pure(segs[0]); ok {
			m.kind, m.lit = likeExact, s
		}
	case 2:
		a, aok := pure(segs[0])
		c, cok := pure(segs[1])
		switch {
		case aok && cok && a == "" && c == "":
			m.kind = likeAll
		case aok && cok && c == "":
			m.kind, m.lit = likePrefix, a
		case aok && cok && a == "":
			m.kind, m.lit = likeSuffix, c
		}
	case 3:
		a, aok := pure(segs[0])
		c, cok := pure(segs[1])
		e, eok := pure(segs[2])
		if aok && cok && eok && a == "" && e == "" {
			m.kind, m.lit = likeContains, c
		}
	}
	return m, nil
}

// matchAll sets out[i] to whether ss[i] matches (negated when not), with
// one loop per kind of pattern.
func (m *likePattern) matchAll(ss []string, out []bool, not bool) {
	lit := m.lit
	switch m.kind {
	case likeExact:
		for i, s := range ss {
			out[i] = (s == lit) != not
		}
	case likePrefix:
		for i, s := range ss {
			out[i] = strings.HasPrefix(s, lit) != not
		}
	case likeSuffix:
		for i, s := range ss {
			out[i] = strings.HasSuffix(s, lit) != not
		}
	case likeContains:
		for i, s := range ss {
			out[i] = strings.Contains(s, lit) != not
		}
	case likeAll:
		for i := range ss {
			out[i] = !not
		}
	default:
		for i, s := range ss {
			out[i] = m.matchGeneral(s) != not
		}
	}
}

func (m *likePattern) match(s string) bool {
	switch m.kind {
	case likeExact:
		return s == m.lit
	case likePrefix:
		return strings.HasPrefix(s, m.lit)
	case likeSuffix:
		return strings.HasSuffix(s, m.lit)
	case likeContains:
		return strings.Contains(s, m.lit)
	case likeAll:
		return true
	}
	return m.matchGeneral(s)
}

func (m *likePattern) matchGeneral(s string) bool {
	segs := m.segs
	if len(segs) == 1 {
		end, ok := matchSeg(s, 0, segs[0])
		return ok && end == len(s)
	}
	pos, ok := matchSeg(s, 0, segs[0])
	if !ok {
		return false
	}
	// Middle segments: the leftmost match leaves the most room for the rest.
	for _, seg := range segs[1 : len(segs)-1] {
		if pos, ok = findSeg(s, pos, seg); !ok {
			return false
		}
	}
	// The last segment is anchored at the end: it starts segLen characters
	// before it.
	last := segs[len(segs)-1]
	start := len(s)
	for n := segRunes(last); n > 0; n-- {
		if start <= pos {
			return false
		}
		_, size := utf8.DecodeLastRuneInString(s[:start])
		start -= size
	}
	if start < pos {
		return false
	}
	end, ok := matchSeg(s, start, last)
	return ok && end == len(s)
}

// matchSeg matches seg at byte offset pos of s and returns the offset after it.
func matchSeg(s string, pos int, seg []likePart) (int, bool) {
	for _, p := range seg {
		if p.lit != "" {
			if !strings.HasPrefix(s[pos:], p.lit) {
				return 0, false
			}
			pos += len(p.lit)
			continue
		}
		for n := p.any; n > 0; n-- {
			if pos >= len(s) {
				return 0, false
			}
			_, size := utf8.DecodeRuneInString(s[pos:])
			pos += size
		}
	}
	return pos, true
}

// findSeg finds the leftmost match of seg at or after pos and returns the
// offset after it.
func findSeg(s string, pos int, seg []likePart) (int, bool) {
	for pos <= len(s) {
		if seg[0].lit != "" {
			k := strings.Index(s[pos:], seg[0].lit)
			if k < 0 {
				return 0, false
			}
			pos += k
		}
		if end, ok := matchSeg(s, pos, seg); ok {
			return end, true
		}
		if pos == len(s) {
			break
		}
		_, size := utf8.DecodeRuneInString(s[pos:])
		pos += size
	}
	return 0, false
}

func segRunes(seg []likePart) int {
	n := 0
	for _, p := range seg {
		if p.lit != "" {
			n += utf8.RuneCountInString(p.lit)
		} else {
			n += p.any
		}
	}
	return n
}
