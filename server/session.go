package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/sql"
)

// backend adapts the server to the wire protocol.
type backend struct{ srv *Server }

func (b *backend) NewSession(user, database string) pgwire.Session {
	return &session{srv: b.srv, user: user, database: database}
}

// session runs the statements of one connection. Sessions hold no state of
// their own beyond who connected: everything lives in the server.
type session struct {
	srv            *Server
	user, database string

	// statement_timeout set by SET (nil: the server's) and by SET LOCAL
	// in the current transaction block (settings.go).
	timeout, localTimeout *time.Duration
	inTx                  bool
	// stmtCtx is the running Execute's context (nil otherwise), for
	// catalog functions that wait (pg_sleep).
	stmtCtx context.Context
	// cursors are the session's DECLAREd SUBSCRIBEs, by name.
	cursors map[string]*cursor
}

// StatementContext makes the session a pgcat.StatementContext.
func (s *session) StatementContext() context.Context { return s.stmtCtx }

func (s *session) Split(text string) []string { return sql.Split(text) }

// Close ends the session's subscriptions: a client that disconnects
// frees its Kafka readers.
func (s *session) Close() { s.closeCursors(false) }

// Describe plans a statement without running it. Parameters are bound as
// NULL for planning; their types are reported unknown.
func (s *session) Describe(ctx context.Context, text string) (*pgwire.Description, error) {
	n := sql.ParamCount(text)
	d := &pgwire.Description{ParamOIDs: make([]uint32, n)}
	for i := range d.ParamOIDs {
		d.ParamOIDs[i] = pgwire.OIDText
	}
	params := make([]sql.BindValue, n)
	for i := range params {
		params[i] = sql.BindValue{Null: true}
	}
	bound, err := sql.Bind(text, params)
	if err != nil {
		return nil, err
	}
	stmt, err := sql.Parse(bound)
	if err != nil {
		return nil, err
	}
	var cols []pgwire.Column
	if sel, ok := stmt.(*sql.Select); ok {
		p, err := planSelect(&queryEnv{s: s, ctx: ctx}, sel, bound)
		if err != nil {
			return nil, classify(err)
		}
		cols = resultColumns(p)
	} else if sub, ok := stmt.(*sql.Subscribe); ok {
		if cols, err = s.srv.subscribeColumns(sub.Name); err != nil {
			return nil, err
		}
	} else if f, ok := stmt.(*sql.Fetch); ok {
		if cols, err = s.cursorColumns(f.Cursor); err != nil {
			return nil, err
		}
	} else if cols, err = s.srv.columnsOf(stmt, bound); err != nil {
		return nil, err
	}
	d.Columns = cols
	return d, nil
}

func (s *session) Execute(ctx context.Context, text string, params []pgwire.Param) (*pgwire.Result, error) {
	s.stmtCtx = ctx
	defer func() { s.stmtCtx = nil }()
	bound := text
	if len(params) > 0 {
		bv := make([]sql.BindValue, len(params))
		for i, p := range params {
			bv[i] = sql.BindValue{Text: string(p.Value), Null: p.Value == nil}
			switch p.OID {
			case pgwire.OIDInt8, pgwire.OIDInt4, pgwire.OIDInt2, pgwire.OIDFloat8, pgwire.OIDFloat4:
				bv[i].Numeric = true
			case pgwire.OIDBool:
				bv[i].Bool = true
			}
		}
		var err error
		if bound, err = sql.Bind(text, bv); err != nil {
			return nil, err
		}
	}
	stmt, err := sql.Parse(bound)
	if err != nil {
		return nil, err
	}
	if sh, ok := stmt.(*sql.Show); ok {
		// Settings drivers and psql ask about that are this session's
		// (server_version, session_authorization, ...).
		if v, ok := s.setting(sh.What); ok {
			name := strings.ToLower(sh.What)
			return &pgwire.Result{Columns: textColumns(name), Rows: [][]any{{v}}, Tag: "SHOW"}, nil
		}
	}
	switch st := stmt.(type) {
	case *sql.Set: // anyone may change their own session
		return s.set(st)
	case *sql.Noop:
		s.trackTx(st.Tag)
		if st.Tag == "COMMIT" || st.Tag == "ROLLBACK" {
			s.closeCursors(true)
		}
	}
	if err := s.srv.authorize(s.user, stmt); err != nil {
		return nil, err
	}
	run := func() (*pgwire.Result, error) { return s.run(ctx, stmt, bound) }
	var res *pgwire.Result
	if writesCatalog(stmt) {
		res, err = s.srv.serialDDL(ctx, run)
	} else {
		res, err = run()
	}
	if err != nil {
		return nil, classify(err)
	}
	s.srv.logDDL(stmt, res, s.user)
	return res, nil
}

// run executes a parsed, authorised statement.
func (s *session) run(ctx context.Context, stmt sql.Statement, bound string) (res *pgwire.Result, err error) {
	switch st := stmt.(type) {
	case *sql.DropUser: // needs to know who asks
		res, err = s.srv.dropUser(st, s.user)
	case *sql.Subscribe, *sql.CopyOut:
		res, err = s.subscribe(ctx, st)
	case *sql.DeclareCursor:
		res, err = s.declareCursor(ctx, st)
	case *sql.Fetch:
		res, err = s.fetchCursor(ctx, st)
	case *sql.CloseCursor:
		res, err = s.closeCursor(st)
	case *sql.Select: // reads the system catalog as this session
		res, err = s.query(ctx, st, bound)
	case *sql.Explain:
		if sel, ok := st.Stmt.(*sql.Select); ok {
			res, err = s.explainQuery(ctx, sel, bound)
		} else {
			res, err = s.srv.execute(ctx, stmt, bound)
		}
	default:
		res, err = s.srv.execute(ctx, stmt, bound)
	}
	return res, err
}

// logDDL writes one info line per statement that changes the catalog.
// Passwords never reach the log: users are named, not their statements.
func (s *Server) logDDL(stmt sql.Statement, res *pgwire.Result, user string) {
	var name string
	switch st := stmt.(type) {
	case *sql.CreateSource:
		name = st.Name
	case *sql.CreateStream:
		name = st.Name
	case *sql.Drop:
		name = st.Name
	case *sql.AlterStream:
		name = st.Name
	case *sql.AlterSource:
		name = st.Name
	case *sql.CreateUser:
		name = st.Name
	case *sql.AlterUser:
		name = st.Name
	case *sql.DropUser:
		name = st.Name
	default:
		return
	}
	s.log.Info("DDL", "statement", statementName(stmt), "object", name, "result", res.Tag, "user", user)
}

// classify gives engine errors their SQLSTATE where they do not carry one.
func classify(err error) error {
	var se *sql.Error
	if errors.As(err, &se) {
		return err
	}
	var exists *catalog.ErrExists
	var notFound *catalog.ErrNotFound
	var inUse *catalog.ErrInUse
	var userExists *catalog.ErrUserExists
	var noUser *catalog.ErrUserNotFound
	switch {
	case errors.As(err, &userExists):
		return &sql.Error{Code: "42710", Message: err.Error(), HintMsg: "ALTER USER changes an existing user", Err: err}
	case errors.As(err, &noUser):
		return &sql.Error{Code: sql.CodeUndefinedObject, Message: err.Error(), HintMsg: "SHOW USERS lists the users", Err: err}
	case errors.As(err, &exists):
		return &sql.Error{Code: sql.CodeDuplicateObject, Message: err.Error(), HintMsg: "DROP it first or pick another name", Err: err}
	case errors.As(err, &notFound):
		return &sql.Error{Code: sql.CodeUndefinedTable, Message: err.Error(), HintMsg: "SHOW SOURCES and SHOW STREAMS list what exists", Err: err}
	case errors.As(err, &inUse):
		return &sql.Error{Code: sql.CodeDependentObjects, Message: err.Error(), HintMsg: "DROP ... CASCADE drops them too; or drop them first", Err: err}
	}
	return &sql.Error{Code: sql.CodeInternal, Message: err.Error(), Err: err}
}

// execute runs one parsed statement.
func (s *Server) execute(ctx context.Context, stmt sql.Statement, text string) (*pgwire.Result, error) {
	switch stmt.(type) {
	case *sql.Show, *sql.Describe, *sql.Explain, *sql.Noop, *sql.ShowPartitions, *sql.ShowCreate:
	default:
		// Everything else reads or writes Kafka: fail fast while it is
		// out of reach, rather than hang.
		if err := s.needKafka(); err != nil {
			return nil, err
		}
	}
	switch st := stmt.(type) {
	case *sql.CreateSource:
		return s.createSource(ctx, st, text, true)
	case *sql.CreateStream:
		return s.createStream(ctx, st, text, true)
	case *sql.Insert:
		return s.insert(ctx, st, text)
	case *sql.CopyIn:
		return s.copyIn(ctx, st)
	case *sql.Select:
		// A server-side query (no session): the default user and database.
		return (&session{srv: s, user: "turbine", database: "turbine"}).query(ctx, st, text)
	case *sql.Flush:
		if err := s.flush(ctx); err != nil {
			return nil, err
		}
		// Every stream is up to date now: one whose input is misplaced
		// has just computed more wrong results.
		return &pgwire.Result{Tag: "FLUSH", Notices: s.degradedNotices(nil)}, nil
	case *sql.Show:
		return s.show(st)
	case *sql.Describe:
		return s.describe(st)
	case *sql.ShowCreate:
		return s.showCreate(st)
	case *sql.ShowPartitions:
		return s.showPartitions(ctx, st)
	case *sql.ShowTasks:
		return s.showTasks(ctx, st)
	case *sql.ShowSizing:
		return s.showSizing(ctx, st, text)
	case *sql.ShowSkew:
		return s.showSkew(ctx, st, text)
	case *sql.Drop:
		return s.drop(st)
	case *sql.AlterStream:
		return s.alterStream(ctx, st)
	case *sql.AlterSource:
		return s.alterSource(ctx, st)
	case *sql.Explain:
		return s.explain(st, text)
	case *sql.Noop:
		return &pgwire.Result{Tag: st.Tag}, nil
	case *sql.CreateUser:
		return s.createUser(st, true)
	case *sql.AlterUser:
		return s.alterUser(st)
	}
	return nil, sql.Errorf(sql.CodeNotSupported, "statement %T is not supported", stmt)
}

// execDDL replays a catalog statement (persist false) or runs one.
func (s *Server) execDDL(ctx context.Context, text string, persist bool) (*pgwire.Result, error) {
	stmt, err := sql.Parse(text)
	if err != nil {
		return nil, err
	}
	switch st := stmt.(type) {
	case *sql.CreateSource:
		return s.createSource(ctx, st, text, persist)
	case *sql.CreateStream:
		return s.createStream(ctx, st, text, persist)
	case *sql.CreateUser:
		return s.createUser(st, persist)
	}
	return nil, fmt.Errorf("catalog entry is not a CREATE statement: %q", text)
}

// columnsOf is the row shape a statement returns, nil for none.
func (s *Server) columnsOf(stmt sql.Statement, text string) ([]pgwire.Column, error) {
	switch st := stmt.(type) {
	case *sql.Show:
		return showColumns(st.What), nil
	case *sql.Describe:
		return textColumns("column_name", "data_type", "detail"), nil
	case *sql.ShowCreate:
		return textColumns("name", "create_sql"), nil
	case *sql.ShowPartitions:
		return showPartitionsColumns(), nil
	case *sql.ShowTasks:
		return showTasksColumns(), nil
	case *sql.ShowSizing:
		return sizingCols, nil
	case *sql.ShowSkew:
		return skewCols, nil
	case *sql.Explain:
		return textColumns("QUERY PLAN"), nil
	}
	return nil, nil
}

func textColumns(names ...string) []pgwire.Column {
	cols := make([]pgwire.Column, len(names))
	for i, n := range names {
		cols[i] = pgwire.Column{Name: n, OID: pgwire.OIDText}
	}
	return cols
}
