package pgwire

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5/pgproto3"
)

// statement is a prepared statement created by Parse.
type statement struct {
	empty bool   // the query string held no statement
	sql   string // the single statement, as Split returned it
	// paramOIDs are the parameter types reported in ParameterDescription;
	// paramTypes are the types binary parameters are decoded as and that
	// the Backend sees in Param.OID. They differ only for parameters whose
	// type nobody knows, see parameterDescriptionOID.
	paramOIDs  []uint32
	paramTypes []uint32
	columns    []Column // nil: no rows
}

// portal is a statement bound to parameters by Bind.
type portal struct {
	stmt    *statement
	params  []Param
	formats []int16 // result format per column

	// The statement runs at the first Execute; later Executes continue
	// sending its rows and never run it again.
	result *Result
	sent   int  // rows of result already sent
	done   bool // CommandComplete was sent (or the run failed)
}

// parameterDescriptionOID is the type reported to the client for a
// parameter of type oid. The Backend says OIDText when it does not know a
// parameter's type. Reporting that verbatim breaks pgx: its default mode
// encodes arguments by the described type, and its text codec refuses Go
// int64, float64 and bool ("unable to encode 42 into text format for text
// (OID 25): cannot find encode plan"); reporting 705 (unknown) fails the
// same way, as pgx maps unknown to the text codec too. Reporting 0,
// "unspecified", makes pgx pick the encoding from the Go value instead (text
// format for int64, float64, bool, string and time.Time), which is what the
// Backend wants for a parameter it could not type. Parameters the Backend or
// the client did type (int8, ...) are reported as they are, so their
// arguments arrive in the type's own, often binary, format. The tests pin
// this down for every pgx QueryExecMode.
func parameterDescriptionOID(oid uint32, clientTyped bool) uint32 {
	if oid == OIDText && !clientTyped {
		return 0
	}
	return oid
}

// parse handles Parse: the statement is planned by Session.Describe right
// away so that errors surface at Parse, as with PostgreSQL.
func (c *conn) parse(m *pgproto3.Parse) error {
	if m.Name != "" {
		if _, ok := c.stmts[m.Name]; ok {
			return newWireError(codeDuplicatePreparedStmt, "prepared statement %q already exists", m.Name)
		}
	}
	st, err := c.newStatement(m.Query, m.ParameterOIDs)
	if err != nil {
		return err
	}
	c.stmts[m.Name] = st
	c.be.Send(&pgproto3.ParseComplete{})
	return nil
}

// newStatement plans query for Parse or PREPARE; clientOIDs are the
// parameter types the client declared (0: unspecified).
func (c *conn) newStatement(query string, clientOIDs []uint32) (*statement, error) {
	st := &statement{}
	var desc *Description
	switch parts := c.sess.Split(query); len(parts) {
	case 0:
		st.empty = true
	case 1:
		st.sql = parts[0]
		var d *Description
		err := c.runStatement(func(ctx context.Context) (err error) {
			d, err = c.sess.Describe(ctx, st.sql)
			return err
		})
		if err != nil {
			return nil, err
		}
		desc = d
	default:
		return nil, newWireError(codeSyntaxError, "cannot insert multiple commands into a prepared statement")
	}
	if desc == nil {
		desc = &Description{}
	}

	n := max(len(clientOIDs), len(desc.ParamOIDs))
	st.paramOIDs = make([]uint32, n)
	st.paramTypes = make([]uint32, n)
	for i := range n {
		var client, backend uint32
		if i < len(clientOIDs) {
			client = clientOIDs[i]
		}
		if i < len(desc.ParamOIDs) {
			backend = desc.ParamOIDs[i]
		}
		switch {
		case client != 0:
			st.paramTypes[i] = client
		case backend != 0:
			st.paramTypes[i] = backend
		default:
			st.paramTypes[i] = OIDText
		}
		st.paramOIDs[i] = parameterDescriptionOID(st.paramTypes[i], client != 0)
	}
	// Cloning keeps nil (no rows) distinct from empty (rows of no columns).
	st.columns = slices.Clone(desc.Columns)
	return st, nil
}

// bind handles Bind: parameters are decoded to text now and result formats
// checked against the statement's columns, so that Execute cannot fail on
// either.
func (c *conn) bind(m *pgproto3.Bind) error {
	st, ok := c.stmts[m.PreparedStatement]
	if !ok {
		return newWireError(codeInvalidSQLStatementName, "prepared statement %q does not exist", m.PreparedStatement)
	}
	if m.DestinationPortal != "" {
		if _, ok := c.portals[m.DestinationPortal]; ok {
			return newWireError(codeDuplicateCursor, "portal %q already exists", m.DestinationPortal)
		}
	}

	n := len(st.paramTypes)
	if len(m.Parameters) != n {
		return newWireError(codeProtocolViolation, "bind message supplies %d parameters, but prepared statement %q requires %d",
			len(m.Parameters), m.PreparedStatement, n)
	}
	paramFormats, err := expandFormats(m.ParameterFormatCodes, n, "parameter formats", "parameters")
	if err != nil {
		return err
	}
	params := make([]Param, n)
	for i, raw := range m.Parameters {
		v, err := decodeParam(raw, paramFormats[i], st.paramTypes[i], i)
		if err != nil {
			return err
		}
		params[i] = Param{Value: v, OID: st.paramTypes[i]}
	}

	formats, err := expandFormats(m.ResultFormatCodes, len(st.columns), "result formats", "columns")
	if err != nil {
		return err
	}
	for i, f := range formats {
		if f == formatBinary && !binaryResultSupported(st.columns[i].OID) {
			return newWireError(codeFeatureNotSupported, "binary format is not supported for column %q of type OID %d",
				st.columns[i].Name, st.columns[i].OID)
		}
	}

	c.portals[m.DestinationPortal] = &portal{stmt: st, params: params, formats: formats}
	c.be.Send(&pgproto3.BindComplete{})
	return nil
}

// expandFormats applies the Bind rule for format codes: none means all
// text, one applies to all n items, otherwise there must be one per item.
// The result is a fresh slice: Bind's own is reused by the next Receive.
func expandFormats(codes []int16, n int, what, items string) ([]int16, error) {
	out := make([]int16, n)
	switch len(codes) {
	case 0:
	case 1:
		for i := range out {
			out[i] = codes[0]
		}
	case n:
		copy(out, codes)
	default:
		return nil, newWireError(codeProtocolViolation, "bind message has %d %s but %d %s", len(codes), what, n, items)
	}
	for _, f := range out {
		if f != formatText && f != formatBinary {
			return nil, newWireError(codeInvalidParameterValue, "unsupported format code: %d", f)
		}
	}
	return out, nil
}

// describe handles Describe of a statement ('S') or portal ('P'). Neither
// runs anything: the shape comes from Parse.
func (c *conn) describe(m *pgproto3.Describe) error {
	switch m.ObjectType {
	case 'S':
		st, ok := c.stmts[m.Name]
		if !ok {
			return newWireError(codeInvalidSQLStatementName, "prepared statement %q does not exist", m.Name)
		}
		c.be.Send(&pgproto3.ParameterDescription{ParameterOIDs: st.paramOIDs})
		if st.columns == nil {
			c.be.Send(&pgproto3.NoData{})
		} else {
			// Formats are not chosen before Bind; the protocol says zero.
			c.sendRowDescription(st.columns, nil)
		}
	case 'P':
		p, ok := c.portals[m.Name]
		if !ok {
			return newWireError(codeInvalidCursorName, "portal %q does not exist", m.Name)
		}
		if p.stmt.columns == nil {
			c.be.Send(&pgproto3.NoData{})
		} else {
			c.sendRowDescription(p.stmt.columns, p.formats)
		}
	default:
		return newWireError(codeProtocolViolation, "invalid DESCRIBE message subtype %d", m.ObjectType)
	}
	return nil
}

// execute handles Execute. The statement runs once per portal; a row limit
// suspends the portal and a later Execute continues where it stopped.
func (c *conn) execute(m *pgproto3.Execute) error {
	p, ok := c.portals[m.Portal]
	if !ok {
		return newWireError(codeInvalidCursorName, "portal %q does not exist", m.Portal)
	}
	st := p.stmt
	if st.empty {
		c.be.Send(&pgproto3.EmptyQueryResponse{})
		return nil
	}
	if p.done {
		// Running the statement again would repeat its side effects.
		// PostgreSQL answers an exhausted portal with an empty completion,
		// and one whose run failed with an error.
		if p.result == nil {
			return newWireError(codeObjectNotInPrerequisiteState, "portal %q cannot be run", m.Portal)
		}
		c.be.Send(&pgproto3.CommandComplete{CommandTag: []byte(cstring(selectTag(p.result.Tag, 0)))})
		return nil
	}

	if p.result == nil {
		var res *Result
		streamed := false
		err := c.runStatement(func(ctx context.Context) (err error) {
			res, err = c.sess.Execute(ctx, st.sql, p.params)
			if err != nil || res == nil || res.Stream == nil {
				return err
			}
			// A stream runs to its end in this one Execute, whatever its
			// row limit: its rows are not there to be fetched later.
			defer res.Stream.Close()
			if err = checkShape(st, res); err != nil {
				return err
			}
			streamed = true
			c.sendNotices(res)
			cols := st.columns
			if res.Copy {
				cols = res.Columns
			}
			return c.sendStream(ctx, res, cols, p.formats)
		})
		if streamed {
			p.done = true
			return err
		}
		if err == nil && res == nil {
			err = newWireError(codeInternal, "backend returned no result")
		}
		if err == nil {
			err = checkShape(st, res)
		}
		if err != nil {
			p.done = true
			return err
		}
		p.result = res
		// Once per run, however many Executes fetch the rows.
		c.sendNotices(res)
		if res.CopyIn != nil {
			p.done = true
			return c.copyIn(res)
		}
	}

	res := p.result
	rows := res.Rows[p.sent:]
	suspend := m.MaxRows > 0 && uint64(len(rows)) > uint64(m.MaxRows)
	if suspend {
		rows = rows[:m.MaxRows]
	}
	for _, row := range rows {
		// The client was told the statement's columns (at Parse, or at
		// Describe of this portal), so encode by those.
		if err := c.sendDataRow(row, st.columns, p.formats); err != nil {
			p.done = true
			return err
		}
		p.sent++
	}
	if suspend {
		c.be.Send(&pgproto3.PortalSuspended{})
		return nil
	}
	p.done = true
	if p.sent > len(rows) {
		// Earlier Executes sent part of the rows: count only this batch.
		r := *res
		r.Tag = selectTag(res.Tag, len(rows))
		res = &r
	}
	c.sendCommandComplete(res, len(rows))
	return nil
}

// checkShape verifies that a result fits what Describe promised: the
// client decodes rows by the description it was given. A result without
// rows fits anything.
func checkShape(st *statement, res *Result) error {
	if st.columns == nil && len(res.Rows) > 0 {
		return newWireError(codeFeatureNotSupported, "statement returned rows, but its description has no result columns")
	}
	if st.columns != nil && res.Columns != nil && len(res.Columns) != len(st.columns) {
		// PostgreSQL's wording for the same situation.
		return newWireError(codeFeatureNotSupported, "cached plan must not change result type: described %d columns, result has %d",
			len(st.columns), len(res.Columns))
	}
	return nil
}

// closeObject handles Close of a statement or portal. Closing something
// that does not exist is not an error. Closing a statement drops the
// portals made from it, as in PostgreSQL.
func (c *conn) closeObject(m *pgproto3.Close) error {
	switch m.ObjectType {
	case 'S':
		if st, ok := c.stmts[m.Name]; ok {
			c.dropStatement(m.Name, st)
		}
	case 'P':
		delete(c.portals, m.Name)
	default:
		return newWireError(codeProtocolViolation, "invalid CLOSE message subtype %d", m.ObjectType)
	}
	c.be.Send(&pgproto3.CloseComplete{})
	return nil
}

// dropStatement removes a prepared statement and the portals made from it.
func (c *conn) dropStatement(name string, st *statement) {
	delete(c.stmts, name)
	for pname, p := range c.portals {
		if p.stmt == st {
			delete(c.portals, pname)
		}
	}
}
