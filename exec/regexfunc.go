package exec

import (
	"regexp"
	"strings"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// Regular expressions: ~ and ~* (and their negations), regexp_replace and
// regexp_match, with PostgreSQL's flags. Patterns are read by Go's RE2,
// which has PostgreSQL's common syntax (classes, \w \d \s, bounds,
// non-greedy quantifiers, (?i)) but no back-references or lookaround: such
// a pattern is refused with 2201B. As in PostgreSQL, '.' matches a newline
// and ^ $ anchor the whole string unless the 'n' flag is given.

func init() {
	txt := types.Text
	def("~", regexMatchOp(false), sig(types.Bool, txt, txt))
	def("~*", regexMatchOp(true), sig(types.Bool, txt, txt))
	def("REGEXP_REPLACE", regexpReplace, sig(txt, txt, txt, txt), sig(txt, txt, txt, txt, txt))
	def("REGEXP_MATCH", regexpMatch, Sig{Args: []types.Type{txt, txt}, Ret: txt, RetOID: OIDTextArray},
		Sig{Args: []types.Type{txt, txt, txt}, Ret: txt, RetOID: OIDTextArray})
}

// regexCache compiles each distinct (pattern, flags) of a batch once.
type regexCache map[[2]string]*compiledRegex

type compiledRegex struct {
	re     *regexp.Regexp
	global bool
}

func (c regexCache) get(pattern, flags, fn string) (*compiledRegex, error) {
	key := [2]string{pattern, flags}
	if r, ok := c[key]; ok {
		return r, nil
	}
	prefix, global, err := regexFlags(flags, fn)
	if err != nil {
		return nil, err
	}
	p := pattern
	if strings.Contains(flags, "x") {
		p = expandedPattern(p)
	}
	if strings.Contains(flags, "q") {
		p = regexp.QuoteMeta(p)
	} else {
		p = unicodeClasses(p)
	}
	re, err := regexp.Compile(prefix + p)
	if err != nil {
		return nil, sql.Errorf(sql.CodeInvalidRegex, "invalid regular expression: %v", strings.TrimPrefix(err.Error(), "error parsing regexp: ")).
			WithHint("patterns are read as RE2 (no back-references or lookaround)")
	}
	r := &compiledRegex{re: re, global: global}
	c[key] = r
	return r, nil
}

// regexFlags turns PostgreSQL's flag letters into an RE2 prefix.
func regexFlags(flags, fn string) (prefix string, global bool, err error) {
	ci, newline := false, false
	for _, f := range flags {
		switch f {
		case 'g':
			if fn == "regexp_match" {
				return "", false, sql.Errorf(sql.CodeInvalidParameter, "regexp_match() does not support the \"global\" option").
					WithHint("Use the regexp_matches function instead.")
			}
			global = true
		case 'i':
			ci = true
		case 'c':
			ci = false
		case 'n', 'm': // newline-sensitive
			newline = true
		case 's':
			newline = false
		case 'p', 'w', 'x', 'q', 't', 'e', 'b':
			// partial newline sensitivity, expanded syntax, quoted: handled
			// by the caller or no different in RE2
		default:
			return "", false, sql.Errorf(sql.CodeInvalidParameter, "invalid regular expression option: %q", string(f))
		}
	}
	switch {
	case newline:
		prefix = "(?m)"
	default:
		prefix = "(?s)"
	}
	if ci {
		prefix = prefix[:len(prefix)-1] + "i)"
	}
	return prefix, global, nil
}

// unicodeClasses makes \w and \W match letters and digits of any script,
// as PostgreSQL's do (RE2's are ASCII).
func unicodeClasses(p string) string {
	if !strings.Contains(p, `\w`) && !strings.Contains(p, `\W`) {
		return p
	}
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '\\' && i+1 < len(p) {
			switch n := p[i+1]; {
			case n == 'w' && inClass:
				b.WriteString(`\p{L}\p{N}_`)
			case n == 'w':
				b.WriteString(`[\p{L}\p{N}_]`)
			case n == 'W' && !inClass:
				b.WriteString(`[^\p{L}\p{N}_]`)
			default:
				b.WriteByte(c)
				b.WriteByte(n)
			}
			i++
			continue
		}
		switch {
		case c == '[' && !inClass:
			inClass = true
		case c == ']' && inClass:
			inClass = false
		}
		b.WriteByte(c)
	}
	return b.String()
}

// expandedPattern drops white space and #-comments outside brackets, as
// the 'x' flag asks.
func expandedPattern(p string) string {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			b.WriteByte(c)
			b.WriteByte(p[i+1])
			i++
			continue
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		case c == '#':
			for i < len(p) && p[i] != '\n' {
				i++
			}
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func regexMatchOp(ci bool) kernel {
	flags := ""
	if ci {
		flags = "i"
	}
	return func(out *Vec, args []*Vec) error {
		cache := regexCache{}
		for i, s := range args[0].S {
			if out.rowNull(i) {
				continue
			}
			r, err := cache.get(args[1].S[i], flags, "~")
			if err != nil {
				return err
			}
			out.B[i] = r.re.MatchString(s)
		}
		return nil
	}
}

func regexpReplace(out *Vec, args []*Vec) error {
	cache := regexCache{}
	for i, s := range args[0].S {
		if out.rowNull(i) {
			continue
		}
		flags := ""
		if len(args) > 3 {
			flags = args[3].S[i]
		}
		r, err := cache.get(args[1].S[i], flags, "regexp_replace")
		if err != nil {
			return err
		}
		repl := args[2].S[i]
		n := 1
		if r.global {
			n = -1
		}
		matches := r.re.FindAllStringSubmatchIndex(s, n)
		if len(matches) == 0 {
			out.S[i] = s
			continue
		}
		var b strings.Builder
		last := 0
		for _, m := range matches {
			b.WriteString(s[last:m[0]])
			expandReplacement(&b, repl, s, m)
			last = m[1]
		}
		b.WriteString(s[last:])
		out.S[i] = b.String()
	}
	return nil
}

// expandReplacement writes repl with \1..\9 (a group), \& (the match) and
// \\ (a backslash) filled in from match m of s.
func expandReplacement(b *strings.Builder, repl, s string, m []int) {
	for k := 0; k < len(repl); k++ {
		c := repl[k]
		if c != '\\' || k+1 >= len(repl) {
			b.WriteByte(c)
			continue
		}
		n := repl[k+1]
		switch {
		case n >= '1' && n <= '9':
			g := int(n - '0')
			if 2*g+1 < len(m) && m[2*g] >= 0 {
				b.WriteString(s[m[2*g]:m[2*g+1]])
			}
			k++
		case n == '&':
			b.WriteString(s[m[0]:m[1]])
			k++
		case n == '\\':
			b.WriteByte('\\')
			k++
		default:
			b.WriteByte(c)
		}
	}
}

// regexpMatch is regexp_match(s, pattern [, flags]): the first match's
// groups as a text[] (the whole match when the pattern has none), NULL
// when nothing matches.
func regexpMatch(out *Vec, args []*Vec) error {
	cache := regexCache{}
	var vals []any
	for i, s := range args[0].S {
		if out.rowNull(i) {
			continue
		}
		flags := ""
		if len(args) > 2 {
			flags = args[2].S[i]
		}
		r, err := cache.get(args[1].S[i], flags, "regexp_match")
		if err != nil {
			return err
		}
		m := r.re.FindStringSubmatchIndex(s)
		if m == nil {
			out.ensureNull()[i] = true
			continue
		}
		vals = vals[:0]
		if len(m) == 2 {
			vals = append(vals, s[m[0]:m[1]])
		}
		for g := 1; 2*g < len(m); g++ {
			if m[2*g] < 0 {
				vals = append(vals, nil)
			} else {
				vals = append(vals, s[m[2*g]:m[2*g+1]])
			}
		}
		out.S[i] = formatTextArray(vals)
	}
	return nil
}
