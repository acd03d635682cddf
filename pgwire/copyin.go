package pgwire

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgproto3"
)

// CopyIn takes the data of COPY ... FROM STDIN. The wire layer answers the
// statement with CopyInResponse, gives Write the bytes of every CopyData
// message in order (they may cut rows anywhere), and at CopyDone calls
// Done, whose tag ("COPY n") completes the statement. After an error from
// Write, a CopyFail or any other message, Done is not called and the
// statement fails: a COPY that keeps what it received only in Done writes
// nothing of a refused one.
type CopyIn interface {
	// Columns is how many columns each row has.
	Columns() int
	Write(data []byte) error
	Done(ctx context.Context) (tag string, err error)
}

// copyIn runs the copy-in sub-protocol for res.CopyIn, in either query
// protocol, and sends CommandComplete when it succeeds. The error it
// returns is the statement's, for the caller to send; a connection that
// failed meanwhile is left in c.writeErr, which ends the message loop.
func (c *conn) copyIn(res *Result) error {
	// Text format: the only one a Backend accepts (binary is refused
	// before a CopyIn is made).
	c.be.Send(&pgproto3.CopyInResponse{OverallFormat: byte(formatText), ColumnFormatCodes: make([]uint16, res.CopyIn.Columns())})
	if err := c.flush(); err != nil {
		c.writeErr = err
		return err
	}
	// The first bad row fails the COPY, but the client is still sending:
	// its data is read and dropped until CopyDone, when the error is
	// reported. Reporting it earlier would have the client's CopyData
	// arrive after ReadyForQuery.
	var bad error
	for {
		msg, err := c.be.Receive()
		if err != nil {
			c.writeErr = fmt.Errorf("receive during COPY from stdin: %w", err)
			return c.writeErr
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if bad == nil {
				bad = res.CopyIn.Write(m.Data)
			}
		case *pgproto3.CopyDone:
			if bad != nil {
				return bad
			}
			var tag string
			err := c.runStatement(func(ctx context.Context) (err error) {
				tag, err = res.CopyIn.Done(ctx)
				return err
			})
			if err != nil {
				return err
			}
			c.sendCommandComplete(&Result{Tag: tag}, 0)
			return nil
		case *pgproto3.CopyFail:
			return newWireError(codeQueryCanceled, "COPY from stdin failed: %s", m.Message)
		case *pgproto3.Flush, *pgproto3.Sync:
			// libpq sends a Sync right after an extended-protocol Execute,
			// not knowing the statement was a COPY, and another after
			// CopyDone: PostgreSQL ignores them during the copy, and the
			// second one gets the ReadyForQuery.
		case *pgproto3.Terminate:
			c.writeErr = io.EOF // the client left: end the connection quietly
			return newWireError(codeQueryCanceled, "COPY from stdin failed: the client terminated the connection")
		default:
			return newWireError(codeProtocolViolation, "unexpected message %T during COPY from stdin", msg)
		}
	}
}
