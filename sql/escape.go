package sql

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

func isIdentByte(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') || c == '$' }

// lexEscapeString reads the E'...' string whose opening quote is at
// src[q]: backslash escapes (\n, \t, \\, \', \ooo, \xhh, \uXXXX) as in
// PostgreSQL, and ” for a quote. It returns the decoded value and the
// offset past the closing quote.
func lexEscapeString(src string, q int) (string, int, error) {
	var b strings.Builder
	i := q + 1
	for i < len(src) {
		c := src[i]
		switch {
		case c == '\'' && i+1 < len(src) && src[i+1] == '\'':
			b.WriteByte('\'')
			i += 2
		case c == '\'':
			return b.String(), i + 1, nil
		case c == '\\' && i+1 < len(src):
			n, adv := escapeValue(src[i+1:])
			b.WriteString(n)
			i += 1 + adv
		default:
			b.WriteByte(c)
			i++
		}
	}
	return "", i, syntaxAt(src, q-1, "unterminated string literal")
}

// escapeValue decodes the escape after a backslash in s, returning the
// text it stands for and how many bytes of s it used.
func escapeValue(s string) (string, int) {
	switch s[0] {
	case 'b':
		return "\b", 1
	case 'f':
		return "\f", 1
	case 'n':
		return "\n", 1
	case 'r':
		return "\r", 1
	case 't':
		return "\t", 1
	case 'x':
		n := 1
		for n < 3 && n < len(s) && strings.IndexByte("0123456789abcdefABCDEF", s[n]) >= 0 {
			n++
		}
		if n > 1 {
			v, _ := strconv.ParseUint(s[1:n], 16, 8)
			return string([]byte{byte(v)}), n
		}
	case 'u', 'U':
		width := 4
		if s[0] == 'U' {
			width = 8
		}
		if len(s) > width {
			if v, err := strconv.ParseUint(s[1:1+width], 16, 32); err == nil && utf8.ValidRune(rune(v)) {
				return string(rune(v)), 1 + width
			}
		}
	}
	if s[0] >= '0' && s[0] <= '7' {
		n := 1
		for n < 3 && n < len(s) && s[n] >= '0' && s[n] <= '7' {
			n++
		}
		v, _ := strconv.ParseUint(s[:n], 8, 8)
		return string([]byte{byte(v)}), n
	}
	_, size := utf8.DecodeRuneInString(s)
	return s[:size], size
}

// quoteString writes v as a standard SQL string literal.
func quoteString(v string) string { return "'" + strings.ReplaceAll(v, "'", "''") + "'" }
