package sql

import (
	"strings"
)

// CopyFormatKind is the data format of COPY ... FROM STDIN.
type CopyFormatKind uint8

const (
	CopyText   CopyFormatKind = iota // tab-separated, \N for NULL, backslash escapes
	CopyCSV                          // quoted fields, unquoted empty for NULL
	CopyBinary                       // PostgreSQL's binary tuples: refused
)

func (k CopyFormatKind) String() string {
	switch k {
	case CopyCSV:
		return "csv"
	case CopyBinary:
		return "binary"
	}
	return "text"
}

// CopyHeader says what COPY does with the data's first line.
type CopyHeader uint8

const (
	CopyNoHeader    CopyHeader = iota
	CopyHeaderSkip             // HEADER true: the first line is skipped
	CopyHeaderMatch            // HEADER match: its names must be the columns'
)

// CopyFormat is how the rows of COPY FROM STDIN are written: PostgreSQL's
// options, checked and with their defaults filled in.
type CopyFormat struct {
	Kind      CopyFormatKind
	Delimiter byte
	Null      string
	Quote     byte // CSV only
	Escape    byte // CSV only
	Header    CopyHeader
}

// CopyIn is COPY name [(column, ...)] FROM STDIN [options]: rows the
// client sends, written to a source as INSERT writes them.
type CopyIn struct {
	Table    string
	TablePos int // 1-based character position of the name
	Columns  []string
	// ColumnPos holds each column's 1-based position in the statement.
	ColumnPos []int
	Format    CopyFormat
}

func (*CopyIn) statement() {}

// SQLSTATE codes of COPY's data errors, as PostgreSQL raises them.
const (
	CodeInvalidTextRepr = "22P02" // invalid input syntax for type ...
	CodeBadCopyFormat   = "22P04" // missing or extra columns, an unterminated quote
	CodeCharNotInRepert = "22021" // invalid byte sequence for encoding "UTF8"
	CodeQueryCanceled   = "57014" // CopyFail from the client
	CodeDuplicateColumn = "42701"
)

// copyStatement parses COPY: COPY (SUBSCRIBE ...) TO STDOUT, or COPY name
// [(columns)] FROM STDIN with PostgreSQL's options in either of its forms,
// WITH (FORMAT csv, HEADER true, ...) or the older bare words (CSV HEADER
// DELIMITER ',' ...), which is what psql's \copy passes on as written.
func (p *stmtParser) copyStatement() (Statement, error) {
	start := p.next() // COPY
	if p.peek().Is("(") {
		return p.copyOut(start)
	}
	nt := p.peek()
	name, err := p.ident()
	if err != nil {
		return nil, err
	}
	if p.accept(".") {
		// A schema-qualified name (drivers write "public"."t"): every
		// relation lives in the one schema.
		nt = p.peek()
		if name, err = p.ident(); err != nil {
			return nil, err
		}
	}
	st := &CopyIn{Table: name, TablePos: charPos(p.src, nt.Start)}
	if p.accept("(") {
		for {
			ct := p.peek()
			col, err := p.ident()
			if err != nil {
				return nil, err
			}
			for _, c := range st.Columns {
				if c == col {
					return nil, Errorf(CodeDuplicateColumn, "column %q specified more than once", col).WithPos(charPos(p.src, ct.Start))
				}
			}
			st.Columns = append(st.Columns, col)
			st.ColumnPos = append(st.ColumnPos, charPos(p.src, ct.Start))
			if !p.accept(",") {
				break
			}
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
	}
	if t := p.peek(); t.Is("TO") {
		return nil, Errorf(CodeNotSupported, "COPY %s TO is not supported", name).WithPos(charPos(p.src, t.Start)).
			WithHint("COPY (SUBSCRIBE TO %s) TO STDOUT streams its rows; SELECT reads them", name)
	}
	if err := p.expect("FROM"); err != nil {
		return nil, err
	}
	if t := p.peek(); !t.Is("STDIN") {
		return nil, Errorf(CodeNotSupported, "COPY %s FROM reads only STDIN: the server reads no files or programs", name).WithPos(charPos(p.src, t.Start)).
			WithHint("psql's \\copy %s FROM 'file' sends a file of the client's", name)
	}
	p.next()
	opts, err := p.copyOptions()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.Is("WHERE") {
		return nil, Errorf(CodeNotSupported, "COPY FROM ... WHERE is not supported").WithPos(charPos(p.src, t.Start)).
			WithHint("filter the rows in the stream that reads the source")
	}
	if err := p.atEnd(); err != nil {
		return nil, err
	}
	if st.Format, err = copyFormat(opts); err != nil {
		return nil, err
	}
	return st, nil
}

// copyOpt is one COPY option as written, before it is checked.
type copyOpt struct {
	value string
	given bool // a value followed the name (HEADER alone is true)
	pos   int
}

// copyOptions reads COPY's options in either form into one map by
// lower-case name (the bare form's CSV and BINARY become format).
func (p *stmtParser) copyOptions() (map[string]copyOpt, error) {
	opts := map[string]copyOpt{}
	set := func(t Token, name string, o copyOpt) error {
		if _, dup := opts[name]; dup {
			return Errorf(CodeSyntax, "conflicting or redundant options").WithPos(charPos(p.src, t.Start)).
				WithHint("option %s is given twice", strings.ToUpper(name))
		}
		opts[name] = o
		return nil
	}
	with := p.accept("WITH")
	if p.accept("(") {
		for {
			nt := p.next()
			if nt.Kind != TokIdent && nt.Kind != TokQIdent {
				return nil, p.errAt(nt, "expected a COPY option")
			}
			name := strings.ToLower(nt.Text)
			o := copyOpt{pos: charPos(p.src, nt.Start)}
			switch vt := p.peek(); {
			case vt.Is(",") || vt.Is(")"):
			case vt.Is("("), vt.Is("*"):
				// A column list or * (FORCE_NOT_NULL ...): not supported,
				// refused by name below.
				for depth := 0; ; {
					t := p.next()
					if t.Kind == TokEOF {
						return nil, p.errAt(t, "expected )")
					}
					if t.Is("(") {
						depth++
					} else if t.Is(")") {
						depth--
					}
					if depth <= 0 {
						break
					}
				}
				o.given = true
			case vt.Kind == TokString, vt.Kind == TokIdent, vt.Kind == TokNumber, vt.Kind == TokQIdent:
				p.next()
				o.value, o.given = vt.Text, true
			default:
				return nil, p.errAt(vt, "expected a value for COPY option %s", nt.Text)
			}
			if err := set(nt, name, o); err != nil {
				return nil, err
			}
			if !p.accept(",") {
				break
			}
		}
		if err := p.expect(")"); err != nil {
			return nil, err
		}
		return opts, nil
	}
	// The bare form PostgreSQL kept from before 9.0: words in any order.
	str := func(nt Token, name string) error {
		p.accept("AS")
		vt := p.next()
		if vt.Kind != TokString {
			return p.errAt(vt, "expected a quoted string after %s", strings.ToUpper(nt.Text))
		}
		return set(nt, name, copyOpt{value: vt.Text, given: true, pos: charPos(p.src, nt.Start)})
	}
	for {
		nt := p.peek()
		var err error
		switch {
		case nt.Is("BINARY"), nt.Is("CSV"):
			p.next()
			err = set(nt, "format", copyOpt{value: strings.ToLower(nt.Text), given: true, pos: charPos(p.src, nt.Start)})
		case nt.Is("HEADER"), nt.Is("FREEZE"):
			p.next()
			err = set(nt, strings.ToLower(nt.Text), copyOpt{pos: charPos(p.src, nt.Start)})
		case nt.Is("DELIMITER"), nt.Is("NULL"), nt.Is("QUOTE"), nt.Is("ESCAPE"), nt.Is("ENCODING"):
			p.next()
			err = str(nt, strings.ToLower(nt.Text))
		case nt.Is("FORCE"):
			p.next()
			return nil, Errorf(CodeNotSupported, "COPY option FORCE %s is not supported", p.peek().Text).WithPos(charPos(p.src, nt.Start)).
				WithHint("NULL 'text' sets what reads as NULL; a quoted empty field in CSV is an empty string")
		default:
			if with && len(opts) == 0 {
				return nil, p.errAt(nt, "expected COPY options")
			}
			return opts, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// copyFormat checks COPY's options as PostgreSQL does (same SQLSTATEs and
// wording) and fills in the defaults of the chosen format.
func copyFormat(opts map[string]copyOpt) (CopyFormat, error) {
	f := CopyFormat{}
	for name, o := range opts {
		switch name {
		case "format", "delimiter", "null", "header", "quote", "escape", "encoding":
		case "freeze", "force_quote", "force_not_null", "force_null", "default", "on_error", "log_verbosity", "reject_limit":
			return f, Errorf(CodeNotSupported, "COPY option %s is not supported", strings.ToUpper(name)).WithPos(o.pos).
				WithHint("the options are FORMAT, DELIMITER, NULL, HEADER, QUOTE, ESCAPE and ENCODING 'UTF8'")
		default:
			return f, Errorf(CodeSyntax, "option %q not recognized", name).WithPos(o.pos).
				WithHint("the options are FORMAT, DELIMITER, NULL, HEADER, QUOTE, ESCAPE and ENCODING 'UTF8'")
		}
	}
	if o, ok := opts["format"]; ok {
		switch strings.ToLower(o.value) {
		case "text":
		case "csv":
			f.Kind = CopyCSV
		case "binary":
			f.Kind = CopyBinary
		default:
			return f, Errorf(CodeInvalidParameter, "COPY format %q not recognized", o.value).WithPos(o.pos).
				WithHint("the formats are text and csv")
		}
	}
	if f.Kind == CopyBinary {
		// Checked first: nothing else matters for a format not read.
		return f, Errorf(CodeNotSupported, "COPY FROM STDIN with FORMAT binary is not supported").WithPos(opts["format"].pos).
			WithHint("send FORMAT text or FORMAT csv (psql's \\copy, psycopg's copy); pgx's CopyFrom always sends binary: use a batch of INSERTs there")
	}
	csv := f.Kind == CopyCSV
	if o, ok := opts["encoding"]; ok {
		if e := strings.ToLower(strings.ReplaceAll(o.value, "-", "")); e != "utf8" && e != "unicode" {
			return f, Errorf(CodeNotSupported, "COPY encoding %q is not supported", o.value).WithPos(o.pos).
				WithHint("send UTF8; psql's \\encoding and client_encoding say what psql sends")
		}
	}
	if o, ok := opts["header"]; ok {
		switch v := strings.ToLower(o.value); {
		case !o.given:
			f.Header = CopyHeaderSkip
		case v == "match":
			f.Header = CopyHeaderMatch
		default:
			b, ok := parseBool(v)
			if !ok {
				return f, Errorf(CodeInvalidParameter, "header requires a Boolean value or \"match\"").WithPos(o.pos)
			}
			if b {
				f.Header = CopyHeaderSkip
			}
		}
	}

	f.Delimiter, f.Null, f.Quote = '\t', `\N`, '"'
	if csv {
		f.Delimiter, f.Null = ',', ""
	}
	if o, ok := opts["delimiter"]; ok {
		if len(o.value) != 1 {
			return f, Errorf(CodeNotSupported, "COPY delimiter must be a single one-byte character").WithPos(o.pos)
		}
		f.Delimiter = o.value[0]
	}
	if f.Delimiter == '\n' || f.Delimiter == '\r' {
		return f, Errorf(CodeInvalidParameter, "COPY delimiter cannot be newline or carriage return").WithPos(opts["delimiter"].pos)
	}
	if !csv && strings.IndexByte(`\.abcdefghijklmnopqrstuvwxyz0123456789`, f.Delimiter) >= 0 {
		// These would read as a backslash escape or the end marker.
		return f, Errorf(CodeInvalidParameter, "COPY delimiter cannot be %q", string(f.Delimiter)).WithPos(opts["delimiter"].pos)
	}
	if o, ok := opts["null"]; ok {
		if strings.ContainsAny(o.value, "\r\n") {
			return f, Errorf(CodeInvalidParameter, "COPY null representation cannot use newline or carriage return").WithPos(o.pos)
		}
		f.Null = o.value
	}
	if o, ok := opts["quote"]; ok {
		if !csv {
			return f, Errorf(CodeNotSupported, "COPY quote available only in CSV mode").WithPos(o.pos)
		}
		if len(o.value) != 1 {
			return f, Errorf(CodeNotSupported, "COPY quote must be a single one-byte character").WithPos(o.pos)
		}
		f.Quote = o.value[0]
	}
	f.Escape = f.Quote
	if o, ok := opts["escape"]; ok {
		if !csv {
			return f, Errorf(CodeNotSupported, "COPY escape available only in CSV mode").WithPos(o.pos)
		}
		if len(o.value) != 1 {
			return f, Errorf(CodeNotSupported, "COPY escape must be a single one-byte character").WithPos(o.pos)
		}
		f.Escape = o.value[0]
	}
	if !csv {
		f.Quote, f.Escape = 0, 0
	}
	if csv && f.Delimiter == f.Quote {
		return f, Errorf(CodeInvalidParameter, "COPY delimiter and quote must be different")
	}
	if strings.IndexByte(f.Null, f.Delimiter) >= 0 {
		return f, Errorf(CodeInvalidParameter, "COPY delimiter character must not appear in the NULL specification")
	}
	if csv && strings.IndexByte(f.Null, f.Quote) >= 0 {
		return f, Errorf(CodeInvalidParameter, "CSV quote character must not appear in the NULL specification")
	}
	return f, nil
}

// parseBool reads PostgreSQL's boolean option spellings.
func parseBool(v string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "on", "1", "yes", "t", "y":
		return true, true
	case "false", "off", "0", "no", "f", "n":
		return false, true
	}
	return false, false
}
