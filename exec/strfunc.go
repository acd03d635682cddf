package exec

import (
	"math"
	"strings"
	"unicode/utf8"

	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// String functions. Lengths and positions count characters (runes), not
// bytes, as PostgreSQL does with UTF-8.

// textFunc runs a one-argument text function over s into out.
func textFunc(name string, s []string, out *Vec) {
	switch name {
	case "LOWER":
		for i, v := range s {
			out.S[i] = strings.ToLower(v)
		}
	case "UPPER":
		for i, v := range s {
			out.S[i] = strings.ToUpper(v)
		}
	case "LENGTH", "CHAR_LENGTH", "CHARACTER_LENGTH":
		for i, v := range s {
			out.I[i] = int64(utf8.RuneCountInString(v))
		}
	case "OCTET_LENGTH":
		for i, v := range s {
			out.I[i] = int64(len(v))
		}
	}
}

// substring is SUBSTRING(s FROM start [FOR count]) with PostgreSQL's rules:
// positions are 1-based; a start before 1 still counts toward count (so
// SUBSTRING('abc' FROM 0 FOR 2) is 'a'); a negative count is an error.
func substring(out *Vec, args []*Vec) error {
	if err := wantTypes("substring", args, types.Text, types.Int, types.Int); err != nil {
		return err
	}
	s, from := args[0].S, args[1].I
	if len(args) == 2 {
		for i, v := range s {
			out.S[i] = substr(v, from[i], -1)
		}
		return nil
	}
	count := args[2].I
	for i, v := range s {
		if out.Null != nil && out.Null[i] {
			continue
		}
		if count[i] < 0 {
			return sql.Errorf("22011", "negative substring length not allowed")
		}
		out.S[i] = substr(v, from[i], count[i])
	}
	return nil
}

// substr returns characters [start, start+count) of s (1-based; count < 0:
// to the end), clamped to the string.
func substr(s string, start, count int64) string {
	if count < 0 {
		return s[runeOffset(s, max(start, 1)-1):]
	}
	end := start + count // exclusive
	if end < start {     // overflow: past the end of any string
		end = math.MaxInt64
	}
	start = max(start, 1)
	if end <= start {
		return ""
	}
	b := runeOffset(s, start-1)
	return s[b : b+runeOffset(s[b:], end-start)]
}

// runeOffset is the byte offset of the k-th character (0-based) of s, or
// len(s) if s is shorter.
func runeOffset(s string, k int64) int {
	if k <= 0 {
		return 0
	}
	if k >= int64(len(s)) {
		return len(s)
	}
	// ASCII prefix: one byte per character.
	i := 0
	for i < len(s) && int64(i) < k && s[i] < utf8.RuneSelf {
		i++
	}
	if int64(i) == k {
		return i
	}
	n := int64(i)
	for i < len(s) && n < k {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		n++
	}
	return i
}

// trim is TRIM / BTRIM / LTRIM / RTRIM (s [, characters]): removes the
// longest run of the given characters (default a space) from both ends, the
// start or the end.
func trim(name string, out *Vec, args []*Vec) error {
	if err := wantTypes(name, args, types.Text, types.Text); err != nil {
		return err
	}
	s := args[0].S
	var set []string
	if len(args) > 1 {
		set = args[1].S
	}
	for i, v := range s {
		cut := " "
		if set != nil {
			cut = set[i]
		}
		switch name {
		case "LTRIM":
			out.S[i] = strings.TrimLeft(v, cut)
		case "RTRIM":
			out.S[i] = strings.TrimRight(v, cut)
		default:
			out.S[i] = strings.Trim(v, cut)
		}
	}
	return nil
}

// strpos is the 1-based character position of sub in s, 0 if absent.
func strpos(s, sub string) int64 {
	k := strings.Index(s, sub)
	if k < 0 {
		return 0
	}
	return int64(utf8.RuneCountInString(s[:k])) + 1
}
