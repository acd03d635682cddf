package pgwire

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// sendRowDescription queues a RowDescription for cols; formats holds one
// format code per column, or is nil for all text.
func (c *conn) sendRowDescription(cols []Column, formats []int16) {
	fields := make([]pgproto3.FieldDescription, len(cols))
	for i, col := range cols {
		f := formatText
		if formats != nil {
			f = formats[i]
		}
		fields[i] = pgproto3.FieldDescription{
			Name:         []byte(cstring(col.Name)),
			DataTypeOID:  col.OID,
			DataTypeSize: typeSize(col.OID),
			TypeModifier: -1,
			Format:       f,
		}
	}
	c.be.Send(&pgproto3.RowDescription{Fields: fields})
}

// sendDataRow encodes one row per cols and formats (nil: all text) and
// queues it. Nothing is queued when encoding fails.
func (c *conn) sendDataRow(row []any, cols []Column, formats []int16) error {
	if len(row) != len(cols) {
		return newWireError(codeInternal, "result row has %d values, but the result has %d columns", len(row), len(cols))
	}
	// Values are appended to one scratch buffer and sliced afterwards: the
	// buffer may move while growing.
	buf := c.rowBuf[:0]
	ends := c.rowEnds[:0]
	for i, v := range row {
		if v == nil {
			ends = append(ends, -1)
			continue
		}
		f := formatText
		if formats != nil {
			f = formats[i]
		}
		var err error
		buf, err = appendValue(buf, cols[i].OID, f, v)
		if err != nil {
			c.rowBuf, c.rowEnds = buf, ends
			return err
		}
		ends = append(ends, len(buf))
	}
	vals := c.rowVals[:0]
	start := 0
	for _, end := range ends {
		if end < 0 {
			vals = append(vals, nil) // NULL
			continue
		}
		// buf is never nil, so an empty value stays non-nil (not NULL).
		vals = append(vals, buf[start:end:end])
		start = end
	}
	c.rowBuf, c.rowEnds, c.rowVals = buf, ends, vals

	// Send copies the values into pgproto3's buffer, so the scratch space
	// can be reused for the next row.
	c.be.Send(&pgproto3.DataRow{Values: vals})
	c.unflushed += len(buf) + 4*len(vals) + 7
	if c.unflushed >= flushThreshold && c.writeErr == nil {
		// A write failure is the connection's, not the statement's: it is
		// kept for the message loop, which ends the connection.
		c.writeErr = c.flush()
	}
	return nil
}

// sendCommandComplete queues the CommandComplete for a finished statement.
// Backends should always give a tag; for one that did not, a row-returning
// statement gets PostgreSQL's "SELECT n".
func (c *conn) sendCommandComplete(res *Result, rowsSent int) {
	tag := res.Tag
	if tag == "" && res.Columns != nil {
		tag = "SELECT " + strconv.Itoa(rowsSent)
	}
	c.be.Send(&pgproto3.CommandComplete{CommandTag: []byte(cstring(tag))})
	c.trackTx(tag)
}

// selectTag rewrites a "SELECT n" tag to count n rows: when a portal is
// fetched in pieces, each CommandComplete counts only its own piece.
func selectTag(tag string, n int) string {
	if verb, _, ok := strings.Cut(tag, " "); ok && strings.EqualFold(verb, "SELECT") {
		return verb + " " + strconv.Itoa(n)
	}
	return tag
}
