package sql

import (
	"strings"
	"unicode/utf8"

	"github.com/pingcap/tidb/pkg/parser/ast"
)

// ShowSizing is SHOW SIZING [FOR source] WITH (...): the partition
// calculator, on given inputs or on what it measures from a source's topic.
type ShowSizing struct {
	Source  string // empty: every input is given
	Options Options
}

// ShowSkew is SHOW SKEW FOR source [BY expr] [WITH (...)]: the load a key
// puts on each partition under murmur2.
type ShowSkew struct {
	Source string
	// By is `SELECT expr FROM source` when BY expr is given (nil: the
	// source's partition key); ByText is expr as written.
	By      *ast.SelectStmt
	ByText  string
	Options Options
}

func (*ShowSizing) statement() {}
func (*ShowSkew) statement()   {}

// showSizing parses what follows SHOW SIZING.
func (p *stmtParser) showSizing() (Statement, error) {
	st := &ShowSizing{}
	if p.accept("FOR") {
		name, err := p.ident()
		if err != nil {
			return nil, err
		}
		st.Source = name
	}
	opts, err := p.withOptions()
	if err != nil {
		return nil, err
	}
	st.Options = opts
	return st, p.atEnd()
}

// showSkew parses what follows SHOW SKEW.
func (p *stmtParser) showSkew() (Statement, error) {
	if err := p.expect("FOR"); err != nil {
		return nil, err
	}
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	st := &ShowSkew{Source: name}
	if p.accept("BY") {
		if err := p.skewBy(st); err != nil {
			return nil, err
		}
	}
	opts, err := p.withOptions()
	if err != nil {
		return nil, err
	}
	st.Options = opts
	return st, p.atEnd()
}

// skewBy reads BY's expression, up to a top-level WITH ( or the end, and
// parses it as the select list of `SELECT expr FROM source`, so that it
// means what it would in a query. Syntax errors point into the user's text.
func (p *stmtParser) skewBy(st *ShowSkew) error {
	first := p.peek()
	depth, end := 0, p.i
	for ; end < len(p.toks); end++ {
		t := p.toks[end]
		if t.Is("(") {
			depth++
		} else if t.Is(")") {
			depth--
		}
		if depth <= 0 && (t.Is(";") || (t.Is("WITH") && end+1 < len(p.toks) && p.toks[end+1].Is("("))) {
			break
		}
	}
	if end == p.i {
		return p.errAt(first, "expected an expression after BY")
	}
	exprStart, exprEnd := first.Start, p.toks[end-1].End
	p.i = end
	st.ByText = p.src[exprStart:exprEnd]
	const prefix = "SELECT "
	text := prefix + st.ByText + " FROM " + quoteIdent(st.Source)
	stmt, err := Parse(text)
	if err != nil {
		if e, ok := err.(*Error); ok && e.Pos > 0 {
			// Position in text → position in the statement.
			off := e.Pos - 1 - utf8.RuneCountInString(prefix)
			off = max(0, min(off, utf8.RuneCountInString(st.ByText)))
			e.Pos = charPos(p.src, exprStart) + off
		}
		return err
	}
	sel, ok := stmt.(*Select)
	if !ok || sel.Stmt.Fields == nil || len(sel.Stmt.Fields.Fields) != 1 || sel.Stmt.Fields.Fields[0].WildCard != nil ||
		sel.Stmt.Where != nil || sel.Stmt.GroupBy != nil || sel.Stmt.OrderBy != nil || sel.Stmt.Limit != nil {
		return Errorf(CodeSyntax, "BY takes one expression over the source's columns").
			WithHint("to key on several columns, concatenate them: a || ':' || b").WithPos(charPos(p.src, exprStart))
	}
	st.By = sel.Stmt
	return nil
}

// quoteIdent quotes a name as a double-quoted identifier.
func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}
