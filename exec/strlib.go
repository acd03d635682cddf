package exec

import (
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// String functions of the PostgreSQL library (lengths and positions in
// characters, as with UTF-8 in PostgreSQL). Arrays (string_to_array,
// regexp_match) are carried as their text form, '{a,b}'; bytea (decode)
// as its hex output, '\x6869'.

func init() {
	txt, i64, b := types.Text, types.Int, types.Bool
	def("SPLIT_PART", splitPart, sig(txt, txt, txt, i64))
	def("LEFT", leftRight(true), sig(txt, txt, i64))
	def("RIGHT", leftRight(false), sig(txt, txt, i64))
	def("LPAD", pad(true), sig(txt, txt, i64), sig(txt, txt, i64, txt))
	def("RPAD", pad(false), sig(txt, txt, i64), sig(txt, txt, i64, txt))
	def("INITCAP", mapText(initcap), sig(txt, txt))
	def("REVERSE", mapText(reverse), sig(txt, txt))
	def("MD5", mapText(func(s string) string { h := md5.Sum([]byte(s)); return hex.EncodeToString(h[:]) }), sig(txt, txt))
	def("REPEAT", repeatText, sig(txt, txt, i64))
	def("STARTS_WITH", startsWith, sig(b, txt, txt))
	def("TRANSLATE", translate, sig(txt, txt, txt, txt))
	def("CHR", chr, sig(txt, i64))
	def("ASCII", ascii, sig(i64, txt))
	def("TO_HEX", toHex, sig(txt, i64))
	def("OVERLAY", overlay, sig(txt, txt, txt, i64), sig(txt, txt, txt, i64, i64))
	def("ENCODE", encode, Sig{Args: []types.Type{txt, txt}, Ret: txt})
	def("DECODE", decode, Sig{Args: []types.Type{txt, txt}, Ret: txt, RetOID: OIDBytea})
	defLenient("CONCAT_WS", concatWS, variadic(txt, txt, types.Unknown))
	defLenient("FORMAT", format, sig(txt, txt), variadic(txt, txt, types.Unknown))
	defLenient("STRING_TO_ARRAY", stringToArray, Sig{Args: []types.Type{txt, txt}, Ret: txt, RetOID: OIDTextArray},
		Sig{Args: []types.Type{txt, txt, txt}, Ret: txt, RetOID: OIDTextArray})
}

// mapText applies f to every non-NULL row.
func mapText(f func(string) string) kernel {
	return func(out *Vec, args []*Vec) error {
		for i, s := range args[0].S {
			if !out.rowNull(i) {
				out.S[i] = f(s)
			}
		}
		return nil
	}
}

func splitPart(out *Vec, args []*Vec) error {
	for i, s := range args[0].S {
		if out.rowNull(i) {
			continue
		}
		d, n := args[1].S[i], args[2].I[i]
		if n == 0 {
			return sql.Errorf(sql.CodeInvalidParameter, "field position must not be zero")
		}
		var parts []string
		if d == "" {
			parts = []string{s}
		} else {
			parts = strings.Split(s, d)
		}
		if s == "" {
			parts = nil
		}
		if n < 0 { // from the end (PostgreSQL 14)
			n += int64(len(parts)) + 1
		}
		if n >= 1 && n <= int64(len(parts)) {
			out.S[i] = parts[n-1]
		}
	}
	return nil
}

// leftRight is left(s, n) / right(s, n): the first (last) n characters; a
// negative n drops |n| from the other end.
func leftRight(left bool) kernel {
	return func(out *Vec, args []*Vec) error {
		for i, s := range args[0].S {
			if out.rowNull(i) {
				continue
			}
			n := args[1].I[i]
			chars := int64(utf8.RuneCountInString(s))
			if n < 0 {
				n = max(chars+n, 0)
			}
			n = min(n, chars)
			if left {
				out.S[i] = s[:runeOffset(s, n)]
			} else {
				out.S[i] = s[runeOffset(s, chars-n):]
			}
		}
		return nil
	}
}

// pad is lpad / rpad(s, length [, fill]): fill repeated to length
// characters, s cut to length when longer.
func pad(left bool) kernel {
	return func(out *Vec, args []*Vec) error {
		for i, s := range args[0].S {
			if out.rowNull(i) {
				continue
			}
			n := args[1].I[i]
			fill := " "
			if len(args) > 2 {
				fill = args[2].S[i]
			}
			if n <= 0 {
				out.S[i] = ""
				continue
			}
			if n > maxTextChars {
				return textTooLong()
			}
			chars := int64(utf8.RuneCountInString(s))
			if chars >= n || fill == "" {
				out.S[i] = s[:runeOffset(s, min(n, chars))]
				continue
			}
			need := n - chars
			f := []rune(fill)
			var b strings.Builder
			if !left {
				b.WriteString(s)
			}
			for k := int64(0); k < need; k++ {
				b.WriteRune(f[k%int64(len(f))])
			}
			if left {
				b.WriteString(s)
			}
			out.S[i] = b.String()
		}
		return nil
	}
}

// maxTextChars bounds a result PostgreSQL would refuse as too long (its
// 1 GB limit on a value).
const maxTextChars = 1 << 28

func textTooLong() error {
	return sql.Errorf(sql.CodeProgramLimitExceeded, "requested length too large")
}

// initcap upper-cases the first letter of each word and lower-cases the
// rest; words are runs of letters and digits.
func initcap(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	inWord := false
	for _, r := range s {
		alnum := unicode.IsLetter(r) || unicode.IsDigit(r)
		switch {
		case alnum && !inWord:
			b.WriteRune(unicode.ToUpper(r))
		case alnum:
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
		inWord = alnum
	}
	return b.String()
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

func repeatText(out *Vec, args []*Vec) error {
	for i, s := range args[0].S {
		if out.rowNull(i) {
			continue
		}
		n := args[1].I[i]
		if n <= 0 {
			out.S[i] = ""
			continue
		}
		if n > maxTextChars || int64(len(s))*n > maxTextChars {
			return textTooLong()
		}
		out.S[i] = strings.Repeat(s, int(n))
	}
	return nil
}

func startsWith(out *Vec, args []*Vec) error {
	for i, s := range args[0].S {
		out.B[i] = strings.HasPrefix(s, args[1].S[i])
	}
	return nil
}

// translate replaces each character of s found in from by the character
// at the same place in to, or drops it when to is shorter.
func translate(out *Vec, args []*Vec) error {
	for i, s := range args[0].S {
		if out.rowNull(i) {
			continue
		}
		from, to := []rune(args[1].S[i]), []rune(args[2].S[i])
		var b strings.Builder
		for _, r := range s {
			k := -1
			for j, f := range from {
				if f == r {
					k = j
					break
				}
			}
			switch {
			case k < 0:
				b.WriteRune(r)
			case k < len(to):
				b.WriteRune(to[k])
			}
		}
		out.S[i] = b.String()
	}
	return nil
}

func chr(out *Vec, args []*Vec) error {
	for i, c := range args[0].I {
		if out.rowNull(i) {
			continue
		}
		switch {
		case c == 0:
			return sql.Errorf(sql.CodeProgramLimitExceeded, "null character not permitted")
		case c < 0:
			return sql.Errorf(sql.CodeInvalidParameter, "character number must be positive")
		case c > unicode.MaxRune:
			return sql.Errorf(sql.CodeProgramLimitExceeded, "requested character too large for encoding: %d", c)
		case c >= 0xD800 && c <= 0xDFFF:
			return sql.Errorf(sql.CodeProgramLimitExceeded, "requested character not valid for encoding: %d", c)
		}
		out.S[i] = string(rune(c))
	}
	return nil
}

func ascii(out *Vec, args []*Vec) error {
	for i, s := range args[0].S {
		if s != "" {
			r, _ := utf8.DecodeRuneInString(s)
			out.I[i] = int64(r)
		}
	}
	return nil
}

func toHex(out *Vec, args []*Vec) error {
	for i, v := range args[0].I {
		out.S[i] = strconv.FormatUint(uint64(v), 16)
	}
	return nil
}

// overlay is overlay(s placing r from start [for count]): characters
// [start, start+count) of s replaced by r; count defaults to r's length.
func overlay(out *Vec, args []*Vec) error {
	for i, s := range args[0].S {
		if out.rowNull(i) {
			continue
		}
		r, start := args[1].S[i], args[2].I[i]
		count := int64(utf8.RuneCountInString(r))
		if len(args) > 3 {
			count = args[3].I[i]
		}
		if start < 1 || count < 0 {
			return sql.Errorf(sql.CodeSubstringError, "negative substring length not allowed")
		}
		end, ok := addInt(start, count)
		if !ok {
			return sql.Errorf(sql.CodeNumericOutOfRange, "integer out of range")
		}
		out.S[i] = substr(s, 1, start-1) + r + substr(s, end, -1)
	}
	return nil
}

// concatWS is concat_ws(sep, ...): the non-NULL arguments joined by sep;
// NULL when sep is.
func concatWS(out *Vec, args []*Vec) error {
	sep := args[0]
	texts, err := outputTexts(args[1:])
	if err != nil {
		return err
	}
	var b strings.Builder
	for i := range out.S {
		if sep.IsNull(i) || !sep.typed() {
			out.ensureNull()[i] = true
			continue
		}
		b.Reset()
		first := true
		for _, t := range texts {
			if t == nil || t.IsNull(i) {
				continue
			}
			if !first {
				b.WriteString(sep.S[i])
			}
			b.WriteString(t.S[i])
			first = false
		}
		out.S[i] = b.String()
	}
	return nil
}

// outputTexts prints each argument with its type's output function, as
// concat and format do (a boolean is t or f, unlike a cast to text); nil
// for an argument that is NULL throughout.
func outputTexts(args []*Vec) ([]*Vec, error) {
	out := make([]*Vec, len(args))
	for k, a := range args {
		if !a.typed() {
			continue
		}
		if a.T == types.Bool {
			t := newVec(types.Text, a.N)
			t.Null = a.copyNulls()
			for i, v := range a.B {
				t.S[i] = "f"
				if v {
					t.S[i] = "t"
				}
			}
			out[k] = t
			continue
		}
		t, err := castVec(a, types.Text)
		if err != nil {
			return nil, err
		}
		out[k] = t
	}
	return out, nil
}

// format is PostgreSQL's format(fmt, ...): %s (a value, NULL as
// nothing), %I (an identifier, quoted when needed), %L (a literal,
// NULL as NULL), %%; with an argument position (%2$s), a width and the
// - flag.
func format(out *Vec, args []*Vec) error {
	texts, err := outputTexts(args[1:])
	if err != nil {
		return err
	}
	f := args[0]
	var b strings.Builder
	for i := range out.S {
		if !f.typed() || f.IsNull(i) {
			out.ensureNull()[i] = true
			continue
		}
		b.Reset()
		if err := formatRow(&b, f.S[i], texts, i); err != nil {
			return err
		}
		out.S[i] = b.String()
	}
	return nil
}

func formatRow(b *strings.Builder, f string, args []*Vec, row int) error {
	next := 0
	for p := 0; p < len(f); p++ {
		c := f[p]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		p++
		if p >= len(f) {
			return sql.Errorf(sql.CodeInvalidParameter, "unterminated format() type specifier").
				WithHint("For a single \"%%\" use \"%%%%\".")
		}
		if f[p] == '%' {
			b.WriteByte('%')
			continue
		}
		// [position$][-][width]type
		argN := -1
		q := p
		for q < len(f) && f[q] >= '0' && f[q] <= '9' {
			q++
		}
		if q < len(f) && f[q] == '$' && q > p {
			n, _ := strconv.Atoi(f[p:q])
			if n == 0 {
				return sql.Errorf(sql.CodeInvalidParameter, "format specifies argument 0, but arguments are numbered from 1")
			}
			argN = n - 1
			p = q + 1
		}
		leftAlign := false
		if p < len(f) && f[p] == '-' {
			leftAlign = true
			p++
		}
		width := 0
		for p < len(f) && f[p] >= '0' && f[p] <= '9' {
			width = width*10 + int(f[p]-'0')
			p++
		}
		if p >= len(f) {
			return sql.Errorf(sql.CodeInvalidParameter, "unterminated format() type specifier").
				WithHint("For a single \"%%\" use \"%%%%\".")
		}
		typ := f[p]
		if typ != 's' && typ != 'I' && typ != 'L' {
			return sql.Errorf(sql.CodeInvalidParameter, "unrecognized format() type specifier %q", string(typ)).
				WithHint("For a single \"%%\" use \"%%%%\".")
		}
		if argN < 0 {
			argN = next
		}
		next = argN + 1
		if argN >= len(args) {
			return sql.Errorf(sql.CodeInvalidParameter, "too few arguments for format()")
		}
		a := args[argN]
		null := a == nil || a.IsNull(row)
		var v string
		switch typ {
		case 's':
			if !null {
				v = a.S[row]
			}
		case 'I':
			if null {
				return sql.Errorf(sql.CodeNullNotAllowed, "null values cannot be formatted as an SQL identifier")
			}
			v = quoteIdent(a.S[row])
		case 'L':
			if null {
				v = "NULL"
			} else {
				v = quoteLiteral(a.S[row])
			}
		}
		if n := utf8.RuneCountInString(v); n < width {
			if leftAlign {
				v += strings.Repeat(" ", width-n)
			} else {
				v = strings.Repeat(" ", width-n) + v
			}
		}
		b.WriteString(v)
	}
	return nil
}

// quoteIdent quotes an identifier unless it is a plain lower-case name,
// as quote_ident does.
func quoteIdent(s string) string {
	plain := s != "" && !(s[0] >= '0' && s[0] <= '9')
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'
	}
	if plain && !reservedWords[s] {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// reservedWords are PostgreSQL's reserved key words, which quote_ident
// quotes.
var reservedWords = map[string]bool{
	"all": true, "analyse": true, "analyze": true, "and": true, "any": true, "array": true, "as": true, "asc": true,
	"asymmetric": true, "both": true, "case": true, "cast": true, "check": true, "collate": true, "column": true,
	"constraint": true, "create": true, "current_catalog": true, "current_date": true, "current_role": true,
	"current_time": true, "current_timestamp": true, "current_user": true, "default": true, "deferrable": true,
	"desc": true, "distinct": true, "do": true, "else": true, "end": true, "except": true, "false": true,
	"fetch": true, "for": true, "foreign": true, "from": true, "grant": true, "group": true, "having": true,
	"in": true, "initially": true, "intersect": true, "into": true, "lateral": true, "leading": true,
	"limit": true, "localtime": true, "localtimestamp": true, "not": true, "null": true, "offset": true,
	"on": true, "only": true, "or": true, "order": true, "placing": true, "primary": true, "references": true,
	"returning": true, "select": true, "session_user": true, "some": true, "symmetric": true, "table": true,
	"then": true, "to": true, "trailing": true, "true": true, "union": true, "unique": true, "user": true,
	"using": true, "variadic": true, "when": true, "where": true, "window": true, "with": true,
}

// quoteLiteral quotes a string literal as quote_literal does: quotes
// doubled, and E'...' with doubled backslashes when it has any.
func quoteLiteral(s string) string {
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		q = "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}

// stringToArray is string_to_array(s, delimiter [, null_string]): a NULL
// delimiter splits into characters, an empty one gives s whole.
func stringToArray(out *Vec, args []*Vec) error {
	s, d := args[0], args[1]
	var nullStr *Vec
	if len(args) > 2 && args[2].typed() {
		nullStr = args[2]
	}
	vals := []any{}
	for i := range out.S {
		if !s.typed() || s.IsNull(i) {
			out.ensureNull()[i] = true
			continue
		}
		var parts []string
		switch {
		case s.S[i] == "":
		case !d.typed() || d.IsNull(i):
			for _, r := range s.S[i] {
				parts = append(parts, string(r))
			}
		case d.S[i] == "":
			parts = []string{s.S[i]}
		default:
			parts = strings.Split(s.S[i], d.S[i])
		}
		vals = vals[:0]
		for _, p := range parts {
			if nullStr != nil && !nullStr.IsNull(i) && p == nullStr.S[i] {
				vals = append(vals, nil)
			} else {
				vals = append(vals, p)
			}
		}
		out.S[i] = formatTextArray(vals)
	}
	return nil
}

// formatTextArray prints a text[] as PostgreSQL does: elements quoted
// when empty, NULL-like or holding a delimiter, quote, backslash or space.
func formatTextArray(vals []any) string {
	var b strings.Builder
	b.WriteByte('{')
	for k, v := range vals {
		if k > 0 {
			b.WriteByte(',')
		}
		s, ok := v.(string)
		if !ok {
			b.WriteString("NULL")
			continue
		}
		if s == "" || strings.EqualFold(s, "null") || strings.ContainsAny(s, "{},\"\\ \t\n\r\v\f") {
			b.WriteString(`"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`)
			continue
		}
		b.WriteString(s)
	}
	b.WriteByte('}')
	return b.String()
}

// ---- bytea: encode / decode

// byteaIn reads text as bytea input does: '\x' and hex digits, or the
// escape format ('\\' a backslash, '\ooo' an octal byte).
func byteaIn(s string) ([]byte, error) {
	if strings.HasPrefix(s, `\x`) {
		return hexIn(s[2:])
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		switch {
		case i+1 < len(s) && s[i+1] == '\\':
			out = append(out, '\\')
			i++
		case i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) && s[i+1] <= '3':
			out = append(out, (s[i+1]-'0')<<6|(s[i+2]-'0')<<3|(s[i+3]-'0'))
			i += 3
		default:
			return nil, sql.Errorf(sql.CodeInvalidTextRepr, "invalid input syntax for type bytea")
		}
	}
	return out, nil
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// hexIn reads hex digits, skipping whitespace between byte pairs.
func hexIn(s string) ([]byte, error) {
	out := make([]byte, 0, len(s)/2)
	for i := 0; i < len(s); {
		c := s[i]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			i++
			continue
		}
		hi := hexVal(c)
		if hi < 0 {
			return nil, sql.Errorf(sql.CodeInvalidParameter, "invalid hexadecimal digit: %q", string(c))
		}
		if i+1 >= len(s) {
			return nil, sql.Errorf(sql.CodeInvalidParameter, "invalid hexadecimal data: odd number of digits")
		}
		lo := hexVal(s[i+1])
		if lo < 0 {
			return nil, sql.Errorf(sql.CodeInvalidParameter, "invalid hexadecimal digit: %q", string(s[i+1]))
		}
		out = append(out, byte(hi<<4|lo))
		i += 2
	}
	return out, nil
}

// byteaOut is bytea's text output (bytea_output = hex).
func byteaOut(b []byte) string { return `\x` + hex.EncodeToString(b) }

func encodingOf(name string) (string, error) {
	switch n := strings.ToLower(name); n {
	case "base64", "hex", "escape":
		return n, nil
	}
	return "", sql.Errorf(sql.CodeInvalidParameter, "unrecognized encoding: %q", name)
}

// encode is encode(bytea, format): the bytes as base64 (lines of 76
// characters), hex or escape text.
func encode(out *Vec, args []*Vec) error {
	for i, s := range args[0].S {
		if out.rowNull(i) {
			continue
		}
		enc, err := encodingOf(args[1].S[i])
		if err != nil {
			return err
		}
		data, err := byteaIn(s)
		if err != nil {
			return err
		}
		switch enc {
		case "hex":
			out.S[i] = hex.EncodeToString(data)
		case "base64":
			e := base64.StdEncoding.EncodeToString(data)
			var b strings.Builder
			for len(e) > 76 {
				b.WriteString(e[:76])
				b.WriteByte('\n')
				e = e[76:]
			}
			b.WriteString(e)
			out.S[i] = b.String()
		case "escape":
			var b strings.Builder
			for _, c := range data {
				switch {
				case c == '\\':
					b.WriteString(`\\`)
				case c == 0 || c >= 0x80:
					b.WriteString(`\` + leftPad(strconv.FormatUint(uint64(c), 8), 3))
				default:
					b.WriteByte(c)
				}
			}
			out.S[i] = b.String()
		}
	}
	return nil
}

// decode is decode(text, format): the bytes, as bytea's text output.
func decode(out *Vec, args []*Vec) error {
	for i, s := range args[0].S {
		if out.rowNull(i) {
			continue
		}
		enc, err := encodingOf(args[1].S[i])
		if err != nil {
			return err
		}
		var data []byte
		switch enc {
		case "hex":
			data, err = hexIn(s)
		case "base64":
			clean := strings.Map(func(r rune) rune {
				if r == ' ' || r == '\n' || r == '\r' || r == '\t' {
					return -1
				}
				return r
			}, s)
			data, err = base64.StdEncoding.DecodeString(clean)
			if err != nil {
				err = sql.Errorf(sql.CodeInvalidParameter, "invalid base64 sequence: %v", err)
			}
		case "escape":
			data, err = byteaIn(s)
		}
		if err != nil {
			return err
		}
		out.S[i] = byteaOut(data)
	}
	return nil
}
