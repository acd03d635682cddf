// Package pgwire serves the PostgreSQL wire protocol (v3) on top of pgproto3.
// It knows nothing of streams or Kafka: it turns protocol messages into calls
// on a Backend and encodes the answers. SQLSTATE codes come from errors that
// implement SQLState() string; anything else is reported as XX000.
package pgwire

import "context"

// Backend is what the wire server needs from the engine. One Backend serves
// every connection; per-connection state lives in the Session it returns.
type Backend interface {
	// NewSession is called once per connection after the startup message.
	NewSession(user, database string) Session
}

// Session executes statements for one connection. Calls on one Session are
// never concurrent.
type Session interface {
	// Split cuts a simple-query string into statements (quotes and comments
	// respected). Empty statements are dropped. Parse uses it too: a
	// prepared statement must hold at most one statement.
	Split(sql string) []string
	// Describe plans one statement without running it: how many parameters
	// ($1..$n) it takes and which columns it would return (nil when it
	// returns no rows).
	Describe(ctx context.Context, sql string) (*Description, error)
	// Execute runs one statement with its parameters bound (text form, nil
	// for NULL).
	Execute(ctx context.Context, sql string, params []Param) (*Result, error)
	// Close is called when the connection ends.
	Close()
}

// Description is the shape of a prepared statement.
type Description struct {
	// ParamOIDs has one type per $n; OIDText when unknown. Unknown ones are
	// reported to clients as 0 (unspecified) so that drivers such as pgx
	// send any Go value in text form; they still arrive as OIDText.
	ParamOIDs []uint32
	Columns   []Column // nil: the statement returns no rows
}

// Param is one bound parameter in text form. Binary parameters are decoded
// into text by the wire layer using the parameter's OID.
type Param struct {
	Value []byte // nil means NULL
	OID   uint32
}

// Column names one result column and its PostgreSQL type.
type Column struct {
	Name string
	OID  uint32
}

// Result of one statement. Rows hold Go values: nil (NULL), int64, float64,
// string, bool, time.Time (UTC); the wire layer encodes them per Column.OID in
// the format the client asked for.
type Result struct {
	Columns []Column // nil: no row description is sent
	Rows    [][]any
	Tag     string // CommandComplete tag, e.g. "CREATE SOURCE", "SELECT 3"
	// Notices are sent before the rows, one NoticeResponse each.
	Notices []Notice
	// Stream, when set, gives the rows instead of Rows, as they come
	// (SUBSCRIBE); the wire layer closes it. Copy sends them as COPY TO
	// STDOUT does (text format, one CopyData per row).
	Stream RowStream
	Copy   bool
	// CopyIn, when set, makes the statement a COPY ... FROM STDIN: the
	// client's data goes to it, and its Done gives the tag.
	CopyIn CopyIn
}

// Type OIDs used by the engine. OIDInt2 and OIDFloat4 only occur as parameter
// types a client declared in Parse; the wire layer decodes them like the others.
// OIDChar, OIDName and OIDOid are the types of pg_catalog columns, for the
// catalog queries clients send.
const (
	OIDBool        uint32 = 16
	OIDChar        uint32 = 18
	OIDName        uint32 = 19
	OIDOid         uint32 = 26
	OIDInt8        uint32 = 20
	OIDInt2        uint32 = 21
	OIDInt4        uint32 = 23
	OIDText        uint32 = 25
	OIDFloat4      uint32 = 700
	OIDFloat8      uint32 = 701
	OIDVarchar     uint32 = 1043
	OIDTimestamp   uint32 = 1114
	OIDTimestampTZ uint32 = 1184
	OIDUnknown     uint32 = 705
)
