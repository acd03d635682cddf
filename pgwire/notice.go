package pgwire

import "github.com/jackc/pgx/v5/pgproto3"

// Notice is a message a statement sends the client beside its result, as
// PostgreSQL's RAISE NOTICE does: psql prints it, drivers hand it to a
// notice handler. It carries no SQLSTATE of its own (00000).
type Notice struct {
	Message string
	Detail  string // optional
	Hint    string // optional
}

// severityNotice is a NoticeResponse's severity.
const severityNotice = "NOTICE"

// sendNotices queues a NoticeResponse for each notice of res. A statement's
// notices go before its rows, as PostgreSQL sends those raised while a
// statement runs: a client reading the result has seen them already.
func (c *conn) sendNotices(res *Result) {
	for _, n := range res.Notices {
		c.be.Send(&pgproto3.NoticeResponse{
			Severity:            severityNotice,
			SeverityUnlocalized: severityNotice,
			Code:                "00000",
			Message:             cstring(n.Message),
			Detail:              cstring(n.Detail),
			Hint:                cstring(n.Hint),
		})
	}
}
