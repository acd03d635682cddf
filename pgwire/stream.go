package pgwire

import (
	"context"
	"errors"
	"io"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"
)

// RowStream is a result whose rows are not known when the statement
// starts (SUBSCRIBE): the wire layer pulls them one at a time and sends
// each as soon as it comes, until the stream ends (io.EOF), fails, or the
// statement is cancelled (a CancelRequest, statement_timeout, the client
// going away, the server closing), which ends Next through its context.
type RowStream interface {
	// Next waits for the next row; io.EOF ends the result.
	Next(ctx context.Context) ([]any, error)
	// Close frees what the stream holds. It is called once, however the
	// result ended.
	Close()
}

// Buffered is implemented by RowStreams that can say how many rows they
// hold ready: the wire layer flushes the socket once none is left, rather
// than after every row of a burst.
type Buffered interface {
	Buffered() int
}

// sendStream sends res.Stream's rows as they come: as COPY text-format
// CopyData messages when res.Copy is set, else as DataRows. It runs inside
// the statement's context and returns the error that ended it; nil when
// the stream ended and CommandComplete was sent.
func (c *conn) sendStream(ctx context.Context, res *Result, cols []Column, formats []int16) error {
	if res.Copy {
		c.be.Send(&pgproto3.CopyOutResponse{OverallFormat: 0, ColumnFormatCodes: make([]uint16, len(cols))})
	}
	if err := c.flush(); err != nil {
		return err
	}
	buffered, _ := res.Stream.(Buffered)
	n := 0
	var line []byte
	for {
		row, err := res.Stream.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if res.Copy {
			if line, err = appendCopyRow(line[:0], row, cols); err != nil {
				return err
			}
			c.be.Send(&pgproto3.CopyData{Data: line})
		} else if err := c.sendDataRow(row, cols, formats); err != nil {
			return err
		}
		n++
		if buffered == nil || buffered.Buffered() == 0 {
			// Each row reaches the client as soon as it is there: a
			// subscriber waits for it.
			if err := c.flush(); err != nil {
				return err
			}
		}
	}
	tag := res.Tag
	if res.Copy {
		c.be.Send(&pgproto3.CopyDone{})
		tag = "COPY " + strconv.Itoa(n)
	} else {
		tag = selectTag(tag, n)
	}
	c.be.Send(&pgproto3.CommandComplete{CommandTag: []byte(cstring(tag))})
	return nil
}

// appendCopyRow appends one row in COPY's text format: values
// tab-separated, NULL as \N, backslash, tab, newline and carriage return
// escaped, the line ended by a newline.
func appendCopyRow(buf []byte, row []any, cols []Column) ([]byte, error) {
	if len(row) != len(cols) {
		return nil, newWireError(codeInternal, "result row has %d values, but the result has %d columns", len(row), len(cols))
	}
	var val []byte
	for i, v := range row {
		if i > 0 {
			buf = append(buf, '\t')
		}
		if v == nil {
			buf = append(buf, '\\', 'N')
			continue
		}
		var err error
		if val, err = appendValue(val[:0], cols[i].OID, formatText, v); err != nil {
			return nil, err
		}
		for _, b := range val {
			switch b {
			case '\\':
				buf = append(buf, '\\', '\\')
			case '\t':
				buf = append(buf, '\\', 't')
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			default:
				buf = append(buf, b)
			}
		}
	}
	return append(buf, '\n'), nil
}
