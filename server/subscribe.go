package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/subscribe"
	"github.com/turbinesql/turbinesql/types"
)

// droppedCheck is how often a waiting subscription looks whether its
// relation was dropped (then it ends, as a finished COPY does).
const droppedCheck = time.Second

// subscription is one SUBSCRIBE of a session: read by a COPY, a bare
// SUBSCRIBE, or a cursor's FETCHes.
type subscription struct {
	srv  *Server
	name string
	sub  *subscribe.Subscription
	cols []pgwire.Column
	log  *slog.Logger
}

var (
	_ pgwire.RowStream = (*subscription)(nil)
	_ pgwire.Buffered  = (*subscription)(nil)
)

// openSubscription starts following the relation st names.
func (s *Server) openSubscription(ctx context.Context, st *sql.Subscribe, who string) (*subscription, error) {
	rel, ok := s.cat.Relation(st.Name)
	if !ok {
		return nil, sql.Errorf(sql.CodeUndefinedTable, "relation %q does not exist", st.Name).WithPos(st.NamePos).
			WithHint("SHOW STREAMS lists the streams, SHOW SOURCES the sources")
	}
	if err := s.needKafka(); err != nil {
		return nil, err
	}
	sub, err := subscribe.Open(ctx, s.kafka, rel, subscribe.Options{Snapshot: st.Snapshot})
	if err != nil {
		return nil, err
	}
	s.subscriptions.Inc()
	s.log.Info("subscription started", "relation", rel.Name, "topic", rel.Topic, "snapshot", st.Snapshot, "by", who)
	return &subscription{srv: s, name: rel.Name, sub: sub, cols: schemaColumns(sub.Schema()), log: s.log}, nil
}

func newSubscriptionsGauge(reg prometheus.Registerer) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "turbine_subscriptions", Help: "Open SUBSCRIBEs: COPY (SUBSCRIBE ...) TO STDOUT, bare SUBSCRIBE and cursors."})
	reg.MustRegister(g)
	return g
}

func schemaColumns(sc types.Schema) []pgwire.Column {
	cols := make([]pgwire.Column, len(sc))
	for i, f := range sc {
		cols[i] = pgwire.Column{Name: f.Name, OID: f.PGOID()}
	}
	return cols
}

// subscribeColumns is the row shape of SUBSCRIBE TO name, for Describe.
func (s *Server) subscribeColumns(name string) ([]pgwire.Column, error) {
	rel, ok := s.cat.Relation(name)
	if !ok {
		return nil, sql.Errorf(sql.CodeUndefinedTable, "relation %q does not exist", name)
	}
	return schemaColumns(subscribe.ShapeOf(rel)), nil
}

// Next waits for the next row. The relation being dropped ends the
// stream, checked every droppedCheck while nothing comes.
func (u *subscription) Next(ctx context.Context) ([]any, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, droppedCheck)
		row, err := u.sub.Next(wctx)
		cancel()
		if err == nil {
			return row, nil
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		if !u.exists() {
			return nil, io.EOF
		}
	}
}

// fetch is FETCH n, as Materialize's: without a timeout (timeoutMs < 0)
// it waits for rows (the whole snapshot, while that is being read) and
// returns up to n of those ready then; with one it keeps collecting until
// it has n rows, or no row has come for the timeout.
func (u *subscription) fetch(ctx context.Context, n int, timeoutMs int64) ([][]any, error) {
	if timeoutMs < 0 {
		for {
			rows, err := u.sub.Fetch(ctx, n, droppedCheck)
			if err != nil || len(rows) > 0 || n == 0 {
				return rows, err
			}
			if !u.exists() {
				return nil, nil // dropped: nothing will come
			}
		}
	}
	wait := time.Duration(timeoutMs) * time.Millisecond
	var out [][]any
	for n < 0 || len(out) < n {
		rest := -1
		if n >= 0 {
			rest = n - len(out)
		}
		rows, err := u.sub.Fetch(ctx, rest, wait)
		if err != nil {
			return nil, err
		}
		if len(rows) == 0 {
			break
		}
		out = append(out, rows...)
	}
	return out, nil
}

func (u *subscription) exists() bool {
	_, ok := u.srv.cat.Relation(u.name)
	return ok
}

func (u *subscription) Buffered() int { return u.sub.Buffered() }

func (u *subscription) Close() {
	u.sub.Close()
	u.srv.subscriptions.Dec()
	u.log.Info("subscription ended", "relation", u.name)
}

// cursor is a DECLAREd SUBSCRIBE of a session.
type cursor struct {
	sub  *subscription
	inTx bool // declared in a transaction block: COMMIT/ROLLBACK close it
}

// declareCursor opens a SUBSCRIBE under a cursor name of the session.
func (s *session) declareCursor(ctx context.Context, st *sql.DeclareCursor) (*pgwire.Result, error) {
	if _, dup := s.cursors[st.Name]; dup {
		return nil, sql.Errorf("42P03", "cursor %q already exists", st.Name).WithHint("CLOSE %s first", st.Name)
	}
	sub, err := s.srv.openSubscription(ctx, st.Query, s.user)
	if err != nil {
		return nil, err
	}
	if s.cursors == nil {
		s.cursors = map[string]*cursor{}
	}
	s.cursors[st.Name] = &cursor{sub: sub, inTx: s.inTx}
	return &pgwire.Result{Tag: "DECLARE CURSOR"}, nil
}

func (s *session) fetchCursor(ctx context.Context, st *sql.Fetch) (*pgwire.Result, error) {
	c, ok := s.cursors[st.Cursor]
	if !ok {
		return nil, sql.Errorf("34000", "cursor %q does not exist", st.Cursor).WithHint("DECLARE %s CURSOR FOR SUBSCRIBE TO name first", st.Cursor)
	}
	rows, err := c.sub.fetch(ctx, st.Count, st.TimeoutMs)
	if err != nil {
		return nil, err
	}
	return &pgwire.Result{Columns: c.sub.cols, Rows: rows, Tag: "FETCH " + strconv.Itoa(len(rows))}, nil
}

func (s *session) closeCursor(st *sql.CloseCursor) (*pgwire.Result, error) {
	if st.All {
		s.closeCursors(false)
		return &pgwire.Result{Tag: "CLOSE CURSOR ALL"}, nil
	}
	c, ok := s.cursors[st.Name]
	if !ok {
		return nil, sql.Errorf("34000", "cursor %q does not exist", st.Name)
	}
	c.sub.Close()
	delete(s.cursors, st.Name)
	return &pgwire.Result{Tag: "CLOSE CURSOR"}, nil
}

// closeCursors closes the session's cursors: every one, or (txEnd) those
// declared in the transaction block that just ended.
func (s *session) closeCursors(txEnd bool) {
	for name, c := range s.cursors {
		if txEnd && !c.inTx {
			continue
		}
		c.sub.Close()
		delete(s.cursors, name)
	}
}

// cursorColumns is the row shape FETCH from a cursor returns, for Describe.
func (s *session) cursorColumns(name string) ([]pgwire.Column, error) {
	c, ok := s.cursors[name]
	if !ok {
		return nil, sql.Errorf("34000", "cursor %q does not exist", name)
	}
	return c.sub.cols, nil
}

// subscribe runs SUBSCRIBE or COPY (SUBSCRIBE ...) TO STDOUT: the wire
// layer sends the rows as they come until the client cancels.
func (s *session) subscribe(ctx context.Context, stmt sql.Statement) (*pgwire.Result, error) {
	q, _ := stmt.(*sql.Subscribe)
	copyOut := false
	if c, ok := stmt.(*sql.CopyOut); ok {
		q, copyOut = c.Query, true
	}
	sub, err := s.srv.openSubscription(ctx, q, s.user)
	if err != nil {
		return nil, err
	}
	return &pgwire.Result{Columns: sub.cols, Stream: sub, Copy: copyOut, Tag: "SUBSCRIBE"}, nil
}
