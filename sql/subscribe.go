package sql

import (
	"strconv"
	"strings"
)

// Subscribe is SUBSCRIBE [TO] name [WITH (snapshot = true|false)]: the
// relation's rows as they are committed, its current contents first
// unless snapshot = false.
type Subscribe struct {
	Name     string
	NamePos  int // 1-based character position of the name
	Snapshot bool
}

// CopyOut is COPY (SUBSCRIBE ...) TO STDOUT: the subscription's rows in
// COPY text format, one CopyData message each.
type CopyOut struct{ Query *Subscribe }

// DeclareCursor is DECLARE name CURSOR FOR SUBSCRIBE ...
type DeclareCursor struct {
	Name  string
	Query *Subscribe
}

// Fetch is FETCH [FORWARD] [n | ALL | NEXT] [FROM | IN] cursor
// [WITH (timeout = ...)]. Count < 0 means ALL.
type Fetch struct {
	Cursor string
	Count  int
	// TimeoutMs bounds the wait for a first row (-1: wait until one
	// comes or the statement is cancelled; 0: only rows already there);
	// when it runs out the FETCH returns no rows.
	TimeoutMs int64
}

// CloseCursor is CLOSE name | CLOSE ALL.
type CloseCursor struct {
	Name string
	All  bool
}

func (*Subscribe) statement()     {}
func (*CopyOut) statement()       {}
func (*DeclareCursor) statement() {}
func (*Fetch) statement()         {}
func (*CloseCursor) statement()   {}

// Bool reads a boolean option (true/false, on/off, 1/0, quoted or not);
// def when absent, a 22023 error otherwise.
func (o Options) Bool(key string, def bool) (bool, error) {
	v, ok := o[key]
	if !ok {
		return def, nil
	}
	if b, ok := parseBool(v.Value); ok {
		return b, nil
	}
	return false, Errorf(CodeInvalidParameter, "option %s must be true or false, got %q", key, v.Value).WithPos(v.Pos)
}

// subscribe parses what follows the SUBSCRIBE keyword.
func (p *stmtParser) subscribe() (*Subscribe, error) {
	p.accept("TO")
	nt := p.peek()
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	st := &Subscribe{Name: name, NamePos: charPos(p.src, nt.Start), Snapshot: true}
	opts, err := p.withOptions()
	if err != nil {
		return nil, err
	}
	if err := opts.Check("SUBSCRIBE", "snapshot"); err != nil {
		return nil, err
	}
	if st.Snapshot, err = opts.Bool("snapshot", true); err != nil {
		return nil, err
	}
	return st, nil
}

// copyOut parses what follows COPY when a parenthesis does: (SUBSCRIBE
// ...) TO STDOUT [WITH (format text)], the one COPY TO there is.
func (p *stmtParser) copyOut(start Token) (Statement, error) {
	if !p.accept("(") || !p.accept("SUBSCRIBE") {
		return nil, Errorf(CodeNotSupported, "only COPY (SUBSCRIBE TO name) TO STDOUT is supported").WithPos(charPos(p.src, start.Start)).
			WithHint("read a relation with SELECT or SUBSCRIBE, write one with INSERT or COPY name FROM STDIN")
	}
	sub, err := p.subscribe()
	if err != nil {
		return nil, err
	}
	if err := p.expect(")"); err != nil {
		return nil, err
	}
	if err := p.expect("TO"); err != nil {
		return nil, err
	}
	if t := p.peek(); !t.Is("STDOUT") {
		return nil, Errorf(CodeNotSupported, "COPY (SUBSCRIBE ...) writes only TO STDOUT").WithPos(charPos(p.src, t.Start))
	}
	p.next()
	if p.accept("WITH") || p.peek().Is("(") {
		// PostgreSQL's COPY options: (name value, ...), no '='.
		if err := p.expect("("); err != nil {
			return nil, err
		}
		for {
			nt := p.next()
			if !nt.Is("FORMAT") {
				return nil, Errorf(CodeNotSupported, "COPY option %s is not supported", nt.Text).WithPos(charPos(p.src, nt.Start)).
					WithHint("the only option is FORMAT text")
			}
			p.accept("=")
			vt := p.next()
			if !strings.EqualFold(vt.Text, "text") {
				return nil, Errorf(CodeNotSupported, "COPY format %s is not supported", vt.Text).WithPos(charPos(p.src, vt.Start)).
					WithHint("the format is text")
			}
			if !p.accept(",") {
				break
			}
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
	}
	return &CopyOut{Query: sub}, p.atEnd()
}

// declare parses DECLARE name [NO SCROLL] CURSOR [WITHOUT HOLD] FOR
// SUBSCRIBE ...
func (p *stmtParser) declare() (Statement, error) {
	p.next() // DECLARE
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	p.accept("BINARY")
	p.accept("NO", "SCROLL")
	if err := p.expect("CURSOR"); err != nil {
		return nil, err
	}
	if t := p.peek(); t.Is("WITH") && p.i+1 < len(p.toks) && p.toks[p.i+1].Is("HOLD") {
		return nil, Errorf(CodeNotSupported, "WITH HOLD cursors are not supported").WithPos(charPos(p.src, t.Start)).
			WithHint("a cursor lives until CLOSE, the end of its transaction block, or the end of the session")
	}
	p.accept("WITHOUT", "HOLD")
	if err := p.expect("FOR"); err != nil {
		return nil, err
	}
	if t := p.peek(); !t.Is("SUBSCRIBE") {
		return nil, Errorf(CodeNotSupported, "cursors are only supported over SUBSCRIBE").WithPos(charPos(p.src, t.Start)).
			WithHint("run the SELECT directly; drivers fetch a large result in pieces through the extended protocol")
	}
	p.next()
	sub, err := p.subscribe()
	if err != nil {
		return nil, err
	}
	return &DeclareCursor{Name: name, Query: sub}, p.atEnd()
}

// fetch parses FETCH [FORWARD] [n | ALL | NEXT] [FROM | IN] cursor
// [WITH (timeout = ...)].
func (p *stmtParser) fetch() (Statement, error) {
	p.next() // FETCH
	f := &Fetch{Count: 1}
	p.accept("FORWARD")
	switch t := p.peek(); {
	case t.Is("ALL"):
		p.next()
		f.Count = -1
	case t.Is("NEXT"):
		p.next()
	case t.Kind == TokNumber:
		p.next()
		n, err := strconv.Atoi(t.Text)
		if err != nil || n < 0 {
			return nil, Errorf(CodeSyntax, "FETCH count must be a whole number, got %s", t.Text).WithPos(charPos(p.src, t.Start))
		}
		f.Count = n
	case t.Is("BACKWARD"), t.Is("PRIOR"), t.Is("FIRST"), t.Is("LAST"), t.Is("ABSOLUTE"), t.Is("RELATIVE"), t.Is("-"):
		return nil, Errorf(CodeNotSupported, "a SUBSCRIBE cursor only moves forward").WithPos(charPos(p.src, t.Start))
	}
	if !p.accept("FROM") {
		p.accept("IN")
	}
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	f.Cursor = name
	opts, err := p.withOptions()
	if err != nil {
		return nil, err
	}
	if err := opts.Check("FETCH", "timeout"); err != nil {
		return nil, err
	}
	if f.TimeoutMs, err = opts.Millis("timeout", -1); err != nil {
		return nil, err
	}
	if _, given := opts["timeout"]; given && f.TimeoutMs < 0 {
		return nil, Errorf(CodeInvalidParameter, "timeout must not be negative").WithPos(opts["timeout"].Pos)
	}
	return f, p.atEnd()
}

// closeCursor parses CLOSE name | CLOSE ALL.
func (p *stmtParser) closeCursor() (Statement, error) {
	p.next() // CLOSE
	if p.accept("ALL") {
		return &CloseCursor{All: true}, p.atEnd()
	}
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	return &CloseCursor{Name: name}, p.atEnd()
}
