package sql

import (
	"regexp"
	"strings"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/mysql"
	_ "github.com/pingcap/tidb/pkg/parser/test_driver" // value-expression driver the parser needs
	"github.com/turbinesql/turbinesql/types"
)

// sqlMode makes "col" an identifier and a backslash in a string literal an
// ordinary character, as in PostgreSQL (standard_conforming_strings; our own
// lexer reads strings the same way). ANSI_QUOTES must be named: the ANSI
// shorthand is not expanded. || never reaches the parser (rewriteBody).
var sqlMode = func() mysql.SQLMode {
	m, err := mysql.GetSQLMode("ANSI_QUOTES,PIPES_AS_CONCAT,NO_BACKSLASH_ESCAPES")
	if err != nil {
		panic(err) // a constant string: cannot fail at run time
	}
	return m
}()

// Parse parses one statement.
func Parse(src string) (Statement, error) {
	if err := CheckNesting(src); err != nil {
		return nil, err
	}
	toks, err := Lex(src)
	if err != nil {
		return nil, err
	}
	p := &stmtParser{src: src, toks: toks}
	return p.statement()
}

type stmtParser struct {
	src  string
	toks []Token
	i    int
}

func (p *stmtParser) peek() Token {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return Token{Kind: TokEOF, Start: len(p.src), End: len(p.src)}
}

func (p *stmtParser) next() Token {
	t := p.peek()
	if p.i < len(p.toks) {
		p.i++
	}
	return t
}

func (p *stmtParser) accept(words ...string) bool {
	for k, w := range words {
		if p.i+k >= len(p.toks) || !p.toks[p.i+k].Is(w) {
			return false
		}
	}
	p.i += len(words)
	return true
}

func (p *stmtParser) expect(word string) error {
	if p.accept(word) {
		return nil
	}
	t := p.peek()
	return p.errAt(t, "expected %s", word)
}

func (p *stmtParser) errAt(t Token, format string, args ...any) *Error {
	near := "end of input"
	if t.Kind != TokEOF {
		near = "\"" + p.src[t.Start:t.End] + "\""
	}
	return syntaxAt(p.src, t.Start, format+" at or near "+near, args...)
}

func (p *stmtParser) ident() (string, error) {
	t := p.next()
	switch t.Kind {
	case TokIdent:
		return strings.ToLower(t.Text), nil
	case TokQIdent:
		return t.Text, nil
	}
	return "", p.errAt(t, "expected a name")
}

func (p *stmtParser) atEnd() error {
	if t := p.peek(); t.Kind != TokEOF && !t.Is(";") {
		return p.errAt(t, "unexpected input")
	}
	return nil
}

func (p *stmtParser) statement() (Statement, error) {
	t := p.peek()
	switch {
	case t.Kind == TokEOF:
		return nil, Errorf(CodeSyntax, "empty statement")
	case t.Is("CREATE"):
		p.next()
		switch {
		case p.accept("SOURCE"), p.accept("TABLE"):
			return p.createSource()
		case p.accept("STREAM"), p.accept("MATERIALIZED", "VIEW"):
			return p.createStream()
		case p.accept("USER"), p.accept("ROLE"):
			return p.createUser()
		}
		return nil, p.errAt(p.peek(), "expected SOURCE, STREAM or USER after CREATE")
	case t.Is("ALTER"):
		p.next()
		switch {
		case p.accept("USER"), p.accept("ROLE"):
			return p.alterUser()
		case p.accept("STREAM"), p.accept("MATERIALIZED", "VIEW"):
			name, err := p.ident()
			if err != nil {
				return nil, err
			}
			for _, a := range []AlterAction{AlterRestart, AlterStop, AlterStart} {
				if p.accept(string(a)) {
					return &AlterStream{Name: name, Action: a}, p.atEnd()
				}
			}
			if p.accept(string(AlterSet)) {
				opts, err := p.optionList()
				if err != nil {
					return nil, err
				}
				return &AlterStream{Name: name, Action: AlterSet, Options: opts}, p.atEnd()
			}
			return nil, p.errAt(p.peek(), "expected RESTART, STOP, START or SET (option = value, ...) after ALTER STREAM %s", name)
		case p.accept("SOURCE"), p.accept("TABLE"):
			name, err := p.ident()
			if err != nil {
				return nil, err
			}
			if !p.accept("SET") {
				return nil, p.errAt(p.peek(), "expected SET (option = value, ...) after ALTER SOURCE %s", name)
			}
			opts, err := p.optionList()
			if err != nil {
				return nil, err
			}
			return &AlterSource{Name: name, Options: opts}, p.atEnd()
		}
		return nil, p.errAt(p.peek(), "expected STREAM, SOURCE or USER after ALTER")
	case t.Is("INSERT"):
		return p.insert()
	case t.Is("SELECT"), t.Is("WITH"), t.Is("("):
		n, err := p.tidb(t.Start)
		if err != nil {
			return nil, err
		}
		switch x := n.(type) {
		case *ast.SelectStmt:
			return &Select{Stmt: x}, nil
		case *ast.SetOprStmt:
			return &Select{SetOpr: x}, nil
		}
		return nil, Errorf(CodeNotSupported, "only SELECT queries are supported here (no WITH)").WithPos(charPos(p.src, t.Start))
	case t.Is("FLUSH"):
		p.next()
		return &Flush{}, p.atEnd()
	case t.Is("SUBSCRIBE"):
		p.next()
		st, err := p.subscribe()
		if err != nil {
			return nil, err
		}
		return st, p.atEnd()
	case t.Is("COPY"):
		return p.copyStatement()
	case t.Is("DECLARE"):
		return p.declare()
	case t.Is("FETCH"):
		return p.fetch()
	case t.Is("CLOSE"):
		return p.closeCursor()
	case t.Is("SHOW"):
		p.next()
		switch {
		case p.accept("SIZING"):
			return p.showSizing()
		case p.accept("SKEW"):
			return p.showSkew()
		case p.accept("PARTITIONS"):
			name, err := p.ident()
			if err != nil {
				return nil, err
			}
			return &ShowPartitions{Stream: name}, p.atEnd()
		case p.accept("CREATE"):
			return p.showCreate()
		case p.accept("TASKS"):
			name, err := p.ident()
			if err != nil {
				return nil, err
			}
			return &ShowTasks{Stream: name}, p.atEnd()
		}
		w := p.next()
		if w.Kind != TokIdent && w.Kind != TokQIdent {
			return nil, p.errAt(w, "expected SOURCES, STREAMS or a setting name after SHOW")
		}
		what := strings.ToUpper(w.Text)
		if what == "TRANSACTION" && p.accept("ISOLATION", "LEVEL") {
			what = "TRANSACTION_ISOLATION"
		}
		return &Show{What: what}, p.atEnd()
	case t.Is("DESCRIBE"), t.Is("DESC"):
		p.next()
		name, err := p.ident()
		if err != nil {
			return nil, err
		}
		return &Describe{Name: name}, p.atEnd()
	case t.Is("DROP"):
		p.next()
		if p.accept("USER") || p.accept("ROLE") {
			return p.dropUser()
		}
		k := p.next()
		kind := strings.ToUpper(k.Text)
		switch kind {
		case "TABLE":
			kind = "SOURCE"
		case "MATERIALIZED":
			if err := p.expect("VIEW"); err != nil {
				return nil, err
			}
			kind = "STREAM"
		case "STREAM", "SOURCE":
		default:
			return nil, p.errAt(k, "expected STREAM, SOURCE or USER after DROP")
		}
		d := &Drop{Kind: kind}
		d.IfExists = p.accept("IF", "EXISTS")
		name, err := p.ident()
		if err != nil {
			return nil, err
		}
		d.Name = name
		// [CASCADE | RESTRICT] and [DELETE TOPIC], in either order.
		for range 2 {
			switch {
			case !d.DeleteTopic && p.accept("DELETE", "TOPIC"):
				d.DeleteTopic = true
			case !d.Cascade && p.accept("CASCADE"):
				d.Cascade = true
			case p.accept("RESTRICT"):
			}
		}
		return d, p.atEnd()
	case t.Is("EXPLAIN"):
		p.next()
		p.accept("ANALYZE")
		inner, err := p.statement()
		if err != nil {
			return nil, err
		}
		return &Explain{Stmt: inner}, nil
	case t.Is("BEGIN"), t.Is("START"):
		return &Noop{Tag: "BEGIN"}, nil
	case t.Is("COMMIT"), t.Is("END"):
		return &Noop{Tag: "COMMIT"}, nil
	case t.Is("ROLLBACK"), t.Is("ABORT"):
		return &Noop{Tag: "ROLLBACK"}, nil
	case t.Is("SAVEPOINT"), t.Is("RELEASE"):
		// Transactions are accepted and have no effect; so do savepoints
		// (psycopg and SQLAlchemy open them around reflection).
		return &Noop{Tag: strings.ToUpper(t.Text)}, nil
	case t.Is("SET"), t.Is("RESET"):
		return p.set()
	case t.Is("DISCARD"), t.Is("DEALLOCATE"):
		return &Noop{Tag: strings.ToUpper(t.Text)}, nil
	}
	return nil, p.errAt(t, "unknown statement")
}

func (p *stmtParser) createSource() (Statement, error) {
	cs := &CreateSource{}
	cs.IfNotExists = p.accept("IF", "NOT", "EXISTS")
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	cs.Name = name
	if err := p.expect("("); err != nil {
		return nil, err
	}
	for {
		if p.accept("WATERMARK") {
			if err := p.expect("FOR"); err != nil {
				return nil, err
			}
			ct := p.peek()
			col, err := p.ident()
			if err != nil {
				return nil, err
			}
			if err := p.expect("AS"); err != nil {
				return nil, err
			}
			wm := &Watermark{Column: col, Pos: charPos(p.src, ct.Start)}
			et := p.peek()
			col2, err := p.ident()
			if err != nil {
				return nil, err
			}
			if col2 != col {
				return nil, Errorf(CodeNotSupported, "WATERMARK FOR %s must be %s or %s - INTERVAL ..., not an expression over %s", col, col, col, col2).WithPos(charPos(p.src, et.Start))
			}
			if p.accept("-") {
				if !p.peek().Is("INTERVAL") {
					return nil, p.errAt(p.peek(), "expected INTERVAL")
				}
				ms, next, err := parseInterval(p.src, p.toks, p.i)
				if err != nil {
					return nil, err
				}
				p.i = next
				wm.DelayMs = ms
			}
			cs.Watermark = wm
		} else {
			ct := p.peek()
			col, err := p.ident()
			if err != nil {
				return nil, err
			}
			tt := p.next()
			typName := tt.Text
			if strings.EqualFold(typName, "DOUBLE") && p.accept("PRECISION") {
				typName = "DOUBLE PRECISION"
			}
			if strings.EqualFold(typName, "CHARACTER") && p.accept("VARYING") {
				typName = "VARCHAR"
			}
			if strings.EqualFold(typName, "TIMESTAMP") && p.accept("WITHOUT", "TIME", "ZONE") {
				typName = "TIMESTAMP"
			}
			typ, ok := types.Parse(typName)
			if !ok || (tt.Kind != TokIdent) {
				return nil, Errorf(CodeNotSupported, "type %q of column %s is not supported", p.src[tt.Start:tt.End], col).
					WithHint("use TEXT, BIGINT, DOUBLE, BOOLEAN or TIMESTAMP").WithPos(charPos(p.src, tt.Start))
			}
			declEnd := tt.End
			if p.accept("(") { // VARCHAR(20), NUMERIC(10,2): the length is not enforced
				for !p.accept(")") {
					if p.next().Kind == TokEOF {
						return nil, p.errAt(p.peek(), "expected )")
					}
				}
				declEnd = p.toks[p.i-1].End
			}
			p.accept("NOT", "NULL")
			p.accept("NULL")
			cs.Columns = append(cs.Columns, ColumnDef{Name: col, Type: typ, Pos: charPos(p.src, ct.Start), Declared: p.src[tt.Start:declEnd]})
		}
		if p.accept(",") {
			continue
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		break
	}
	opts, err := p.withOptions()
	if err != nil {
		return nil, err
	}
	cs.Options = opts
	return cs, p.atEnd()
}

// withOptions parses an optional WITH (k = v, ...).
func (p *stmtParser) withOptions() (Options, error) {
	if !p.accept("WITH") {
		return Options{}, nil
	}
	return p.optionList()
}

// optionList reads "(key = value, ...)".
func (p *stmtParser) optionList() (Options, error) {
	opts := Options{}
	if err := p.expect("("); err != nil {
		return nil, err
	}
	for {
		kt := p.peek()
		key, err := p.ident()
		if err != nil {
			return nil, err
		}
		key = strings.ToLower(key)
		if _, dup := opts[key]; dup {
			return nil, Errorf(CodeInvalidParameter, "option %s given twice", key).WithPos(charPos(p.src, kt.Start))
		}
		if err := p.expect("="); err != nil {
			return nil, err
		}
		vt := p.peek()
		o := Option{Pos: charPos(p.src, vt.Start)}
		switch {
		case vt.Is("INTERVAL"):
			ms, next, err := parseInterval(p.src, p.toks, p.i)
			if err != nil {
				return nil, err
			}
			p.i = next
			o.Interval, o.Millis, o.Value = true, ms, p.src[vt.Start:p.toks[next-1].End]
		case vt.Kind == TokString:
			p.next()
			o.Value, o.IsString = vt.Text, true
		case vt.Kind == TokNumber, vt.Kind == TokIdent:
			p.next()
			o.Value = vt.Text
		case vt.Is("-"):
			p.next()
			n := p.next()
			if n.Kind != TokNumber {
				return nil, p.errAt(n, "expected a number")
			}
			o.Value = "-" + n.Text
		default:
			return nil, p.errAt(vt, "expected an option value")
		}
		opts[key] = o
		if p.accept(",") {
			continue
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		return opts, nil
	}
}

func (p *stmtParser) createStream() (Statement, error) {
	cs := &CreateStream{}
	cs.IfNotExists = p.accept("IF", "NOT", "EXISTS")
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	cs.Name = name
	opts, err := p.withOptions()
	if err != nil {
		return nil, err
	}
	cs.Options = opts
	if err := p.expect("AS"); err != nil {
		return nil, err
	}
	start := p.peek()
	if !start.Is("SELECT") {
		return nil, p.errAt(start, "expected SELECT")
	}
	body, err := p.emitClause(cs)
	if err != nil {
		return nil, err
	}
	sel, err := body.selectBody(start.Start)
	if err != nil {
		return nil, err
	}
	cs.Query = sel
	cs.QueryPos = start.Start
	cs.QueryText = strings.TrimRight(strings.TrimSpace(body.src[start.Start:]), ";")
	return cs, nil
}

// emitClause reads a trailing EMIT EVERY <interval> (early fires, which the
// TiDB parser does not know) into cs, and returns a parser over the SELECT
// without it.
func (p *stmtParser) emitClause(cs *CreateStream) (*stmtParser, error) {
	depth := 0
	for i := p.i; i < len(p.toks); i++ {
		t := p.toks[i]
		switch {
		case t.Is("("):
			depth++
		case t.Is(")"):
			depth--
		case depth == 0 && t.Is("EMIT"):
			if i+2 >= len(p.toks) || !p.toks[i+1].Is("EVERY") || !p.toks[i+2].Is("INTERVAL") {
				return nil, p.errAt(t, "expected EMIT EVERY INTERVAL '...'")
			}
			ms, next, err := parseInterval(p.src, p.toks, i+2)
			if err != nil {
				return nil, err
			}
			for _, rest := range p.toks[next:] {
				if !rest.Is(";") {
					return nil, p.errAt(rest, "EMIT EVERY must end the statement")
				}
			}
			if ms <= 0 {
				return nil, Errorf(CodeInvalidParameter, "EMIT EVERY needs a positive interval").WithPos(charPos(p.src, t.Start))
			}
			cs.EmitEveryMs = ms
			return &stmtParser{src: p.src[:t.Start], toks: p.toks[:i], i: p.i}, nil
		}
	}
	return p, nil
}

// selectBody hands src[start:] to the TiDB parser after rewriting what it
// cannot read; syntax errors are mapped back to the user's text.
func (p *stmtParser) selectBody(start int) (*ast.SelectStmt, error) {
	n, err := p.tidb(start)
	if err != nil {
		return nil, err
	}
	sel, ok := n.(*ast.SelectStmt)
	if !ok {
		return nil, Errorf(CodeNotSupported, "only a plain SELECT is supported here (no UNION, WITH or VALUES)").WithPos(charPos(p.src, start))
	}
	return sel, nil
}

func (p *stmtParser) insert() (Statement, error) {
	n, err := p.tidb(p.peek().Start)
	if err != nil {
		return nil, err
	}
	ins, ok := n.(*ast.InsertStmt)
	if !ok || ins.Table == nil || ins.Select != nil || ins.IsReplace {
		return nil, Errorf(CodeNotSupported, "only INSERT INTO name [(columns)] VALUES (...), ... is supported")
	}
	src, ok := ins.Table.TableRefs.Left.(*ast.TableSource)
	if !ok {
		return nil, Errorf(CodeNotSupported, "INSERT needs a single target relation")
	}
	tn, ok := src.Source.(*ast.TableName)
	if !ok {
		return nil, Errorf(CodeNotSupported, "INSERT needs a single target relation")
	}
	out := &Insert{Table: tn.Name.L, Rows: ins.Lists}
	for _, c := range ins.Columns {
		out.Columns = append(out.Columns, c.Name.L)
	}
	return out, nil
}

var tidbNear = regexp.MustCompile(`near "((?s).*)"\s*$`)

func (p *stmtParser) tidb(start int) (ast.StmtNode, error) {
	rw, err := rewriteBody(p.src, p.toks, start)
	if err != nil {
		return nil, err
	}
	ps := parser.New()
	ps.SetSQLMode(sqlMode)
	text := strings.TrimRight(strings.TrimSpace(rw.text), ";")
	n, err := ps.ParseOneStmt(text, "", "")
	if err != nil {
		if ferr := starCallError(p.src, p.toks); ferr != nil {
			return nil, ferr
		}
		off := len(text)
		msg := err.Error()
		if m := tidbNear.FindStringSubmatch(msg); m != nil {
			if k := strings.LastIndex(text, m[1]); k >= 0 && m[1] != "" {
				off = k
			}
		}
		orig := rw.origOffset(off)
		near := "end of input"
		if rest := strings.TrimSpace(p.src[min(orig, len(p.src)):]); rest != "" {
			tok := rest
			if ts, lerr := Lex(rest); lerr == nil && len(ts) > 0 {
				tok = rest[ts[0].Start:ts[0].End]
			}
			near = "\"" + tok + "\""
		}
		return nil, &Error{Code: CodeSyntax, Message: "syntax error at or near " + near, Pos: charPos(p.src, orig), Err: err}
	}
	if err := checkDepth(n); err != nil {
		return nil, err
	}
	// Statement text positions inside the AST refer to the rewritten text;
	// callers that report positions use FindPos on the original instead.
	return n, nil
}

// FindPos returns the 1-based character position of the first whole-word,
// case-insensitive occurrence of name in src, or 0. Semantic errors use it
// to point at the column or relation they name.
func FindPos(src, name string) int {
	toks, err := Lex(src)
	if err != nil {
		return 0
	}
	for _, t := range toks {
		if (t.Kind == TokIdent || t.Kind == TokQIdent) && strings.EqualFold(t.Text, name) {
			return charPos(src, t.Start)
		}
	}
	return 0
}

// showCreate parses the rest of SHOW CREATE STREAM|SOURCE|TABLE|MATERIALIZED
// VIEW name (TABLE and MATERIALIZED VIEW name a source and a stream, as
// DROP reads them).
func (p *stmtParser) showCreate() (Statement, error) {
	k := p.next()
	var kind string
	switch strings.ToUpper(k.Text) {
	case "STREAM":
		kind = "STREAM"
	case "SOURCE", "TABLE":
		kind = "SOURCE"
	case "MATERIALIZED":
		if err := p.expect("VIEW"); err != nil {
			return nil, err
		}
		kind = "STREAM"
	default:
		return nil, p.errAt(k, "expected STREAM or SOURCE after SHOW CREATE")
	}
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	return &ShowCreate{Kind: kind, Name: name}, p.atEnd()
}
