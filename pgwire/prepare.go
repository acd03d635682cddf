package pgwire

import (
	"context"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// PREPARE and EXECUTE are the SQL spelling of Parse and Bind/Execute. They
// matter to clients without protocol-level parameters: psql before 16 has
// no \bind, so PREPARE/EXECUTE is how a psql script runs a parameterised
// query. As in PostgreSQL, both kinds of prepared statement share one
// namespace (DEALLOCATE drops either), and the Backend sees the statement
// and its parameters exactly as if they had come through Parse and Bind.

var (
	prepareRe = regexp.MustCompile(`(?is)^\s*prepare\s+(` + identPattern + `)\s*(?:\(([^)]*)\))?\s+as\s+(.+?)\s*;?\s*$`)
	executeRe = regexp.MustCompile(`(?is)^\s*execute\s+(` + identPattern + `)\s*(?:\((.*)\))?\s*;?\s*$`)
)

const identPattern = `"(?:[^"]|"")+"|[a-z_][a-z0-9_$]*`

// identName folds an identifier as PostgreSQL does: quoted ones as
// written, others to lower case.
func identName(s string) string {
	if strings.HasPrefix(s, `"`) {
		return strings.ReplaceAll(s[1:len(s)-1], `""`, `"`)
	}
	return strings.ToLower(s)
}

// typeOIDs maps the type names PREPARE accepts to OIDs.
var typeOIDs = map[string]uint32{
	"bool": OIDBool, "boolean": OIDBool,
	"int2": OIDInt2, "smallint": OIDInt2,
	"int4": OIDInt4, "int": OIDInt4, "integer": OIDInt4,
	"int8": OIDInt8, "bigint": OIDInt8,
	"float4": OIDFloat4, "real": OIDFloat4,
	"float8": OIDFloat8, "double precision": OIDFloat8, "double": OIDFloat8,
	"text": OIDText, "varchar": OIDVarchar, "character varying": OIDVarchar,
	"timestamp": OIDTimestamp, "timestamp without time zone": OIDTimestamp,
	"timestamptz": OIDTimestampTZ, "timestamp with time zone": OIDTimestampTZ,
	"unknown": 0,
}

// prepareSQL runs stmt if it is a PREPARE and reports whether it was.
func (c *conn) prepareSQL(stmt string) (tag string, handled bool, err error) {
	m := prepareRe.FindStringSubmatch(stmt)
	if m == nil {
		return "", false, nil
	}
	name := identName(m[1])
	if _, ok := c.stmts[name]; ok {
		return "", true, newWireError(codeDuplicatePreparedStmt, "prepared statement %q already exists", name)
	}
	var oids []uint32
	if strings.TrimSpace(m[2]) != "" {
		for _, t := range strings.Split(m[2], ",") {
			t = strings.Join(strings.Fields(strings.ToLower(t)), " ")
			t = strings.TrimPrefix(t, "pg_catalog.")
			if i := strings.IndexByte(t, '('); i >= 0 { // varchar(20)
				t = strings.TrimSpace(t[:i])
			}
			oid, ok := typeOIDs[t]
			if !ok {
				return "", true, newWireError(codeUndefinedObject, "type %q does not exist", t)
			}
			oids = append(oids, oid)
		}
	}
	st, err := c.newStatement(m[3], oids)
	if err != nil {
		return "", true, err
	}
	c.stmts[name] = st
	return "PREPARE", true, nil
}

// executeSQL runs stmt if it is an EXECUTE of a prepared statement and
// reports whether it was. The statement's rows are sent in text format.
func (c *conn) executeSQL(stmt string) (handled bool, err error) {
	m := executeRe.FindStringSubmatch(stmt)
	if m == nil {
		return false, nil
	}
	name := identName(m[1])
	st, ok := c.stmts[name]
	if !ok {
		return true, newWireError(codeInvalidSQLStatementName, "prepared statement %q does not exist", name)
	}
	var args [][]byte
	if strings.TrimSpace(m[2]) != "" {
		if args, err = parseArgs(m[2]); err != nil {
			return true, err
		}
	}
	if len(args) != len(st.paramTypes) {
		return true, newWireError(codeSyntaxError, "wrong number of parameters for prepared statement %q: expected %d, got %d",
			name, len(st.paramTypes), len(args))
	}
	if st.empty {
		c.be.Send(&pgproto3.EmptyQueryResponse{})
		return true, nil
	}
	params := make([]Param, len(args))
	for i, a := range args {
		params[i] = Param{Value: a, OID: st.paramTypes[i]}
	}
	var res *Result
	err = c.runStatement(func(ctx context.Context) (err error) {
		res, err = c.sess.Execute(ctx, st.sql, params)
		return err
	})
	if err == nil && res == nil {
		err = newWireError(codeInternal, "backend returned no result")
	}
	if err == nil {
		err = checkShape(st, res)
	}
	if err != nil {
		return true, err
	}
	c.sendNotices(res)
	if st.columns != nil {
		c.sendRowDescription(st.columns, nil)
	}
	for _, row := range res.Rows {
		if err := c.sendDataRow(row, st.columns, nil); err != nil {
			return true, err
		}
	}
	c.sendCommandComplete(res, len(res.Rows))
	return true, nil
}

// parseArgs reads EXECUTE's parameter list: constants ('text', numbers,
// TRUE, FALSE, NULL), each optionally cast (::type) or written as a typed
// literal (TIMESTAMP '...'). Values are returned in text form, nil for NULL.
func parseArgs(s string) ([][]byte, error) {
	var out [][]byte
	for _, arg := range splitArgs(s) {
		a := strings.TrimSpace(arg)
		if i := strings.LastIndex(a, "::"); i >= 0 && !strings.Contains(a[i:], "'") {
			a = strings.TrimSpace(a[:i])
		}
		if q := strings.IndexByte(a, '\''); q > 0 {
			// A typed literal: TIMESTAMP '...', or E'...'.
			prefix := strings.ToLower(strings.TrimSpace(a[:q]))
			if prefix == "e" {
				return nil, newWireError(codeFeatureNotSupported, "escape string constants are not supported in EXECUTE parameters")
			}
			a = a[q:]
		}
		switch {
		case len(a) >= 2 && a[0] == '\'' && a[len(a)-1] == '\'':
			body := a[1 : len(a)-1]
			if strings.Contains(strings.ReplaceAll(body, "''", ""), "'") {
				return nil, newWireError(codeSyntaxError, "syntax error in EXECUTE parameter %s", arg)
			}
			out = append(out, []byte(strings.ReplaceAll(body, "''", "'")))
		case strings.EqualFold(a, "null"):
			out = append(out, nil)
		case strings.EqualFold(a, "true"):
			out = append(out, []byte("t"))
		case strings.EqualFold(a, "false"):
			out = append(out, []byte("f"))
		case numberRe.MatchString(a):
			out = append(out, []byte(a))
		default:
			return nil, newWireError(codeFeatureNotSupported, "EXECUTE parameters must be constants, not %s", strings.TrimSpace(arg))
		}
	}
	return out, nil
}

var numberRe = regexp.MustCompile(`^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$`)

// splitArgs splits at commas outside quotes and parentheses.
func splitArgs(s string) []string {
	var out []string
	depth, start, quoted := 0, 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'':
			quoted = !quoted // a doubled quote toggles twice
		case quoted:
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
