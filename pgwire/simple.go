package pgwire

import (
	"context"

	"github.com/jackc/pgx/v5/pgproto3"
)

// simpleQuery runs a Query message: every statement in turn, results in
// text format, stopping at the first error. The caller sends ReadyForQuery.
func (c *conn) simpleQuery(sql string) {
	// A simple query ends the unnamed statement and portal, as in
	// PostgreSQL.
	delete(c.stmts, "")
	delete(c.portals, "")

	stmts := c.sess.Split(sql)
	if len(stmts) == 0 {
		c.be.Send(&pgproto3.EmptyQueryResponse{})
		return
	}
	for _, stmt := range stmts {
		if tag, ok, err := c.deallocate(stmt); ok {
			if err != nil {
				c.sendError(err)
				return
			}
			c.sendCommandComplete(&Result{Tag: tag}, 0)
			continue
		}
		if tag, ok, err := c.prepareSQL(stmt); ok {
			if err != nil {
				c.sendError(err)
				return
			}
			c.sendCommandComplete(&Result{Tag: tag}, 0)
			continue
		}
		if ok, err := c.executeSQL(stmt); ok {
			if err != nil {
				c.sendError(err)
				return
			}
			continue
		}
		var res *Result
		streamed := false
		err := c.runStatement(func(ctx context.Context) (err error) {
			res, err = c.sess.Execute(ctx, stmt, nil)
			if err != nil || res == nil || res.Stream == nil {
				return err
			}
			// The rows come while the statement runs, under its context.
			defer res.Stream.Close()
			streamed = true
			c.sendNotices(res)
			if res.Columns != nil && !res.Copy {
				c.sendRowDescription(res.Columns, nil)
			}
			return c.sendStream(ctx, res, res.Columns, nil)
		})
		if err == nil && res == nil {
			err = newWireError(codeInternal, "backend returned no result")
		}
		if err != nil {
			c.sendError(err)
			return
		}
		if streamed {
			continue
		}
		c.sendNotices(res)
		if res.CopyIn != nil {
			if err := c.copyIn(res); err != nil {
				c.sendError(err)
				return
			}
			continue
		}
		if res.Columns != nil {
			c.sendRowDescription(res.Columns, nil)
		}
		for _, row := range res.Rows {
			if err := c.sendDataRow(row, res.Columns, nil); err != nil {
				// Rows already sent stay sent; PostgreSQL does the same
				// when a statement fails halfway through its output.
				c.sendError(err)
				return
			}
		}
		c.sendCommandComplete(res, len(res.Rows))
	}
}
