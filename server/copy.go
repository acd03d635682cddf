package server

import (
	"context"
	"strconv"

	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/sql"
)

// copyIn starts COPY name [(columns)] FROM STDIN: the target is checked
// now, before the client sends anything (an unknown source or column
// fails the statement as INSERT's would), and the rows go through the
// sourceWriter INSERT uses, so they are keyed and placed as INSERT places
// them. PostgreSQL's COPY is all or nothing: every row is decoded and
// checked as it arrives, and only at CopyDone is anything written.
func (s *Server) copyIn(ctx context.Context, st *sql.CopyIn) (*pgwire.Result, error) {
	w, err := s.newSourceWriter(ctx, "COPY", st.Table, st.TablePos, st.Columns, st.ColumnPos)
	if err != nil {
		return nil, err
	}
	c := &sourceCopy{w: w, dec: exec.NewCopyDecoder(w.src.Name, st.Format, w.columns)}
	return &pgwire.Result{CopyIn: c}, nil
}

// sourceCopy is one COPY FROM STDIN into a source: the client's data,
// decoded into rows and kept by the writer until Done.
type sourceCopy struct {
	w   *sourceWriter
	dec *exec.CopyDecoder
}

var _ pgwire.CopyIn = (*sourceCopy)(nil)

func (c *sourceCopy) Columns() int { return len(c.w.cols) }

func (c *sourceCopy) Write(data []byte) error { return c.dec.Write(data, c.row) }

func (c *sourceCopy) row(r *exec.CopyRow) error {
	if err := c.w.add(r.Values); err != nil {
		return err.WithContext("%s", c.dec.Where(r))
	}
	return nil
}

func (c *sourceCopy) Done(ctx context.Context) (string, error) {
	if err := c.dec.Finish(c.row); err != nil {
		return "", err
	}
	n, err := c.w.write(ctx)
	if err != nil {
		return "", err
	}
	return "COPY " + strconv.Itoa(n), nil
}
