package sql

import (
	"strconv"
	"strings"
)

// BindValue is one parameter value in text form; Null for SQL NULL.
type BindValue struct {
	Text    string
	Null    bool
	Numeric bool // the client declared a numeric type: bind unquoted
	Bool    bool // the client declared a boolean: bind as TRUE/FALSE
}

// ParamCount returns the highest $n in src.
func ParamCount(src string) int {
	toks, err := Lex(src)
	if err != nil {
		return 0
	}
	n := 0
	for _, t := range toks {
		if t.Kind == TokParam {
			if k, err := strconv.Atoi(t.Text[1:]); err == nil && k > n {
				n = k
			}
		}
	}
	return n
}

// Bind substitutes $n placeholders with SQL literals. Text values become
// string literals, which the planner coerces to the type they are compared
// with, as PostgreSQL does with unknown-typed literals.
func Bind(src string, params []BindValue) (string, error) {
	toks, err := Lex(src)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	last := 0
	for _, t := range toks {
		if t.Kind != TokParam {
			continue
		}
		k, _ := strconv.Atoi(t.Text[1:])
		if k < 1 || k > len(params) {
			return "", Errorf("08P01", "statement has parameter %s but %d were bound", t.Text, len(params)).WithPos(charPos(src, t.Start))
		}
		b.WriteString(src[last:t.Start])
		v := params[k-1]
		switch {
		case v.Null:
			b.WriteString("NULL")
		case v.Numeric:
			if _, err := strconv.ParseFloat(v.Text, 64); err != nil {
				return "", Errorf(CodeDatatypeMismatch, "parameter %s: %q is not a number", t.Text, v.Text)
			}
			b.WriteString(v.Text)
		case v.Bool:
			if strings.HasPrefix(strings.ToLower(v.Text), "t") {
				b.WriteString("TRUE")
			} else {
				b.WriteString("FALSE")
			}
		default:
			b.WriteString("'" + strings.ReplaceAll(v.Text, "'", "''") + "'")
		}
		last = t.End
	}
	b.WriteString(src[last:])
	return b.String(), nil
}
