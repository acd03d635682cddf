package sql

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// TokenKind classifies a token of the statement front end.
type TokenKind uint8

const (
	TokEOF    TokenKind = iota
	TokIdent            // bare identifier or keyword
	TokQIdent           // "quoted identifier"
	TokString           // 'string literal' (Text holds the unquoted value)
	TokNumber
	TokParam // $1
	TokPunct // operators and punctuation
)

// Token is one lexeme with its byte offsets in the statement.
type Token struct {
	Kind  TokenKind
	Text  string // for TokString the decoded value; otherwise the raw text
	Start int    // byte offset of the first byte
	End   int    // byte offset past the last byte
}

// Is reports whether t is the (case-insensitive) keyword or punctuation s.
func (t Token) Is(s string) bool {
	if countSteps {
		steps++
	}
	return (t.Kind == TokIdent || t.Kind == TokPunct) && strings.EqualFold(t.Text, s)
}

// countSteps makes Is count its calls in steps: the rewriting passes look
// at tokens through Is, so steps is the work a parse did, which a test
// compares across input sizes without timing anything. Only a test sets
// it, with no other parse running.
var (
	countSteps bool
	steps      int
)

// Lex splits src into tokens. Comments and whitespace are dropped. An
// unterminated quote is a syntax error at the quote.
func Lex(src string) ([]Token, error) {
	// Tokens average several bytes; sizing once saves the copies of
	// growing a multi-MB statement's slice step by step.
	toks := make([]Token, 0, len(src)/4+1)
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(src) && src[i+1] == '-':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				return toks, syntaxAt(src, i, "unterminated comment")
			}
			i += end + 4
		case (c == 'E' || c == 'e') && i+1 < len(src) && src[i+1] == '\'' && (i == 0 || !isIdentByte(src[i-1])):
			// E'...': PostgreSQL's escape string; Text holds the decoded value.
			start := i
			text, end, err := lexEscapeString(src, i+1)
			if err != nil {
				return toks, err
			}
			i = end
			toks = append(toks, Token{Kind: TokString, Text: text, Start: start, End: i})
		case c == '\'':
			start := i
			var b strings.Builder
			i++
			closed := false
			for i < len(src) {
				if src[i] == '\'' {
					if i+1 < len(src) && src[i+1] == '\'' {
						b.WriteByte('\'')
						i += 2
						continue
					}
					i++
					closed = true
					break
				}
				b.WriteByte(src[i])
				i++
			}
			if !closed {
				return toks, syntaxAt(src, start, "unterminated string literal")
			}
			toks = append(toks, Token{Kind: TokString, Text: b.String(), Start: start, End: i})
		case c == '"':
			start := i
			i++
			var b strings.Builder
			closed := false
			for i < len(src) {
				if src[i] == '"' {
					if i+1 < len(src) && src[i+1] == '"' {
						b.WriteByte('"')
						i += 2
						continue
					}
					i++
					closed = true
					break
				}
				b.WriteByte(src[i])
				i++
			}
			if !closed {
				return toks, syntaxAt(src, start, "unterminated quoted identifier")
			}
			toks = append(toks, Token{Kind: TokQIdent, Text: b.String(), Start: start, End: i})
		case c == '$' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9':
			start := i
			i++
			for i < len(src) && src[i] >= '0' && src[i] <= '9' {
				i++
			}
			toks = append(toks, Token{Kind: TokParam, Text: src[start:i], Start: start, End: i})
		case c >= '0' && c <= '9' || (c == '.' && i+1 < len(src) && src[i+1] >= '0' && src[i+1] <= '9'):
			start := i
			for i < len(src) && (src[i] >= '0' && src[i] <= '9' || src[i] == '.') {
				i++
			}
			if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
				j := i + 1
				if j < len(src) && (src[j] == '+' || src[j] == '-') {
					j++
				}
				if j < len(src) && src[j] >= '0' && src[j] <= '9' {
					i = j
					for i < len(src) && src[i] >= '0' && src[i] <= '9' {
						i++
					}
				}
			}
			toks = append(toks, Token{Kind: TokNumber, Text: src[start:i], Start: start, End: i})
		case isIdentStart(c) || c >= utf8.RuneSelf:
			start := i
			for i < len(src) {
				r, n := utf8.DecodeRuneInString(src[i:])
				if r == '_' || r == '$' || unicode.IsLetter(r) || unicode.IsDigit(r) {
					i += n
					continue
				}
				break
			}
			if i == start { // a non-letter multi-byte rune
				_, n := utf8.DecodeRuneInString(src[i:])
				i += n
				toks = append(toks, Token{Kind: TokPunct, Text: src[start:i], Start: start, End: i})
				continue
			}
			toks = append(toks, Token{Kind: TokIdent, Text: src[start:i], Start: start, End: i})
		default:
			start := i
			two := ""
			if i+1 < len(src) {
				two = src[i : i+2]
			}
			switch two {
			case "<=", ">=", "<>", "!=", "||", "::":
				i += 2
			default:
				i++
			}
			toks = append(toks, Token{Kind: TokPunct, Text: src[start:i], Start: start, End: i})
		}
	}
	return toks, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// syntaxAt builds a 42601 error pointing at byte offset off of src.
func syntaxAt(src string, off int, format string, args ...any) *Error {
	return Errorf(CodeSyntax, "syntax error: "+format, args...).WithPos(charPos(src, off))
}

// charPos converts a byte offset into PostgreSQL's 1-based character position.
func charPos(src string, off int) int {
	if off > len(src) {
		off = len(src)
	}
	if off < 0 {
		off = 0
	}
	return utf8.RuneCountInString(src[:off]) + 1
}

// Split cuts a script into statements at top-level semicolons, respecting
// quotes and comments. Empty statements are dropped.
func Split(src string) []string {
	var out []string
	start := 0
	i := 0
	for i < len(src) {
		c := src[i]
		switch {
		case c == '\'' || c == '"':
			i = skipQuoted(src, i)
		case c == '-' && i+1 < len(src) && src[i+1] == '-':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				i = len(src)
			} else {
				i += end + 4
			}
		case c == ';':
			if s := strings.TrimSpace(src[start:i]); s != "" && !onlyComments(s) {
				out = append(out, s)
			}
			i++
			start = i
		default:
			i++
		}
	}
	if start < len(src) {
		if s := strings.TrimSpace(src[start:]); s != "" && !onlyComments(s) {
			out = append(out, s)
		}
	}
	return out
}

// onlyComments reports whether s holds nothing but comments and blanks.
// It stops at the first other byte rather than lexing all of s: Split
// runs it on every statement, megabytes long or not.
func onlyComments(s string) bool {
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return false // unterminated: Lex reports it
			}
			i += end + 4
		default:
			return false
		}
	}
	return true
}

// skipQuoted returns the index just past the quoted text (a string or a
// quoted name; a doubled quote is one quote character) that starts at
// src[i], or len(src) when it does not end.
func skipQuoted(src string, i int) int {
	c := src[i]
	i++
	for i < len(src) {
		if src[i] == c {
			if i+1 < len(src) && src[i+1] == c {
				i += 2
				continue
			}
			return i + 1
		}
		i++
	}
	return i + 1
}
