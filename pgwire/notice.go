package pgwire

import "github.com/jackc/pgx/v5/pgproto3"

// Notice is a message a statement sends the client beside its result, as
// PostgreSQL's RAISE NOTICE does: psql prints it, drivers hand it to a
// notice handler. It carries no SQLSTATE of its own (00000).
type Notice struct {
	Message string
	Detail  string // optional
	Hint    string // optional
	// Severity is NOTICE when empty; WARNING for what PostgreSQL warns
	// about. Code is its SQLSTATE, 00000 when empty.
	Severity string
	Code     string
}

// severityNotice is a NoticeResponse's severity.
const severityNotice = "NOTICE"

// sendNotices queues a NoticeResponse for each notice of res. A statement's
// notices go before its rows, as PostgreSQL sends those raised while a
// statement runs: a client reading the result has seen them already.
func (c *conn) sendNotices(res *Result) {
	for _, n := range res.Notices {
		sev, code := severityNotice, "00000"
		if n.Severity != "" {
			sev = n.Severity
		}
		if validSQLState(n.Code) {
			code = n.Code
		}
		c.be.Send(&pgproto3.NoticeResponse{
			Severity:            sev,
			SeverityUnlocalized: sev,
			Code:                code,
			Message:             cstring(n.Message),
			Detail:              cstring(n.Detail),
			Hint:                cstring(n.Hint),
		})
	}
}
