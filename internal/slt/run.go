package slt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultEngine is the engine name used for skipif/onlyif when
// Options.Engine is empty.
const DefaultEngine = "turbinesql"

// DefaultTimeout is the per-record timeout used when Options.Timeout is 0.
const DefaultTimeout = 60 * time.Second

// Options configures Run.
type Options struct {
	Engine  string                                       // for skipif/onlyif, e.g. "turbinesql"; "" = DefaultEngine
	Restart func(ctx context.Context) (*pgx.Conn, error) // nil: a `restart` record is an error
	Timeout time.Duration                                // per record (per attempt); 0 = 60s
}

// RunFile parses the file at path and runs it (ParseFile + Run).
func RunFile(ctx context.Context, conn *pgx.Conn, path string, opts Options) error {
	records, err := ParseFile(path)
	if err != nil {
		return err
	}
	return Run(ctx, conn, path, records, opts)
}

// Run executes every record in order and returns the first failure as an
// error naming file:line, the SQL, and expected vs actual output. It stops at
// the first failure and at a (non-skipped) halt record. conn is never closed
// by Run; connections returned by Options.Restart are closed when replaced
// and when Run returns.
func Run(ctx context.Context, conn *pgx.Conn, file string, records []Record, opts Options) error {
	if conn == nil {
		return fmt.Errorf("%s: slt.Run: nil connection", file)
	}
	r := &runner{file: file, conn: conn, orig: conn, opts: opts}
	if r.opts.Engine == "" {
		r.opts.Engine = DefaultEngine
	}
	if r.opts.Timeout <= 0 {
		r.opts.Timeout = DefaultTimeout
	}
	defer r.closeOwned()

	for i := range records {
		rec := &records[i]
		if err := ctx.Err(); err != nil {
			return r.failf(rec, "run canceled before %s: %v", rec.Kind, err)
		}
		if shouldSkip(rec.Conditions, r.opts.Engine) {
			continue
		}
		var err error
		switch rec.Kind {
		case KindHalt:
			return nil
		case KindSleep:
			if !sleepCtx(ctx, rec.Duration) {
				err = r.failf(rec, "run canceled during sleep %s: %v", rec.Duration, ctx.Err())
			}
		case KindRestart:
			err = r.restart(ctx, rec)
		case KindStatementOK, KindStatementError, KindStatementCount, KindQuery, KindQueryError:
			err = r.runWithRetry(ctx, rec)
		default:
			err = r.failf(rec, "unknown record kind %v", rec.Kind)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// shouldSkip evaluates skipif/onlyif conditions for engine.
func shouldSkip(conds []Condition, engine string) bool {
	for _, c := range conds {
		if c.OnlyIf != (c.Engine == engine) {
			return true
		}
	}
	return false
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

type runner struct {
	file string
	conn *pgx.Conn
	orig *pgx.Conn // the caller's connection; never closed here
	opts Options
}

func (r *runner) failf(rec *Record, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", r.file, rec.Line, fmt.Sprintf(format, args...))
}

func (r *runner) closeOwned() {
	if r.conn != nil && r.conn != r.orig {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.conn.Close(ctx)
	}
}

func (r *runner) restart(ctx context.Context, rec *Record) error {
	if r.opts.Restart == nil {
		return r.failf(rec, "restart directive requires Options.Restart, which is nil")
	}
	rctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	c, err := r.opts.Restart(rctx)
	if err != nil {
		return r.failf(rec, "restart failed: %v", err)
	}
	if c == nil {
		return r.failf(rec, "restart failed: Options.Restart returned a nil connection")
	}
	if c != r.conn {
		r.closeOwned()
		r.conn = c
	}
	return nil
}

// runWithRetry runs a statement/query record, retrying per its retry clause.
func (r *runner) runWithRetry(ctx context.Context, rec *Record) error {
	for attempt := 0; ; attempt++ {
		msg := r.runOnce(ctx, rec)
		if msg == "" {
			return nil
		}
		if attempt >= rec.Retry || ctx.Err() != nil || r.conn.IsClosed() || !sleepCtx(ctx, rec.RetryBackoff) {
			if rec.Retry > 0 {
				head, rest, _ := strings.Cut(msg, "\n")
				attempts := fmt.Sprintf("%d attempts", attempt+1)
				if attempt == 0 {
					attempts = "1 attempt"
				}
				msg = fmt.Sprintf("%s (after %s)\n%s", head, attempts, rest)
				msg = strings.TrimSuffix(msg, "\n")
			}
			return fmt.Errorf("%s:%d: %s", r.file, rec.Line, msg)
		}
	}
}

// runOnce executes rec once and returns a failure message, or "" on success.
func (r *runner) runOnce(ctx context.Context, rec *Record) string {
	rctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()

	sqlLine := "SQL: " + rec.SQL
	var (
		tag pgconn.CommandTag
		res resultSet
		err error
	)
	isQuery := rec.Kind == KindQuery || rec.Kind == KindQueryError
	if isQuery {
		res, err = r.query(rctx, rec.SQL)
	} else {
		tag, err = r.conn.Exec(rctx, rec.SQL)
	}

	if err != nil {
		switch {
		case ctx.Err() != nil:
			return fmt.Sprintf("run canceled during %s: %v\n%s", rec.Kind, ctx.Err(), sqlLine)
		case rctx.Err() != nil:
			return fmt.Sprintf("%s timed out after %s: %v\n%s", rec.Kind, r.opts.Timeout, err, sqlLine)
		}
	}

	noun := "statement"
	if isQuery {
		noun = "query"
	}
	switch rec.Kind {
	case KindStatementError, KindQueryError:
		if err == nil {
			return fmt.Sprintf("%s succeeded, but an error%s was expected\n%s", noun, describeRegex(rec.ErrorRegex), sqlLine)
		}
		text, isServer := errText(err)
		if !isServer {
			return fmt.Sprintf("%s failed with a client/connection error, but a server error%s was expected: %s\n%s", noun, describeRegex(rec.ErrorRegex), text, sqlLine)
		}
		ok, rerr := errorMatches(rec.ErrorRegex, text)
		if rerr != nil {
			return fmt.Sprintf("invalid error regex %q: %v", rec.ErrorRegex, rerr)
		}
		if !ok {
			return fmt.Sprintf("%s error mismatch\n%s\nexpected error matching: %s\nactual error: %s", noun, sqlLine, rec.ErrorRegex, text)
		}
		return ""
	}

	if err != nil {
		text, _ := errText(err)
		return fmt.Sprintf("%s failed: %s\n%s", noun, text, sqlLine)
	}

	switch rec.Kind {
	case KindStatementCount:
		if got := tag.RowsAffected(); got != rec.Count {
			return fmt.Sprintf("statement count mismatch: expected %d rows affected, got %d (command tag %q)\n%s", rec.Count, got, tag.String(), sqlLine)
		}
	case KindQuery:
		if m := checkQuery(rec, res); m != nil {
			reason := m.Reason
			if rec.Sort != NoSort {
				reason += " (" + rec.Sort.String() + ")"
			}
			return fmt.Sprintf("%s\n%s\n%s", reason, sqlLine, formatMismatch(m))
		}
	}
	return ""
}

func describeRegex(re string) string {
	if re == "" {
		return ""
	}
	return fmt.Sprintf(" matching %q", re)
}

// errText returns the text an error regex is matched against and whether
// the error was reported by the server. For server errors it is
// PgError.Error(): "ERROR: <message> (SQLSTATE <code>)".
func errText(err error) (string, bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Error(), true
	}
	return err.Error(), false
}

// query runs sql with the extended protocol, requesting text results for
// every column, and renders the values.
func (r *runner) query(ctx context.Context, sql string) (resultSet, error) {
	rr := r.conn.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil)
	fields := rr.FieldDescriptions()
	res := resultSet{Columns: len(fields)}
	var protoErr error
	for _, f := range fields {
		if f.Format != pgx.TextFormatCode && protoErr == nil {
			protoErr = fmt.Errorf("server sent column %q in format %d although text (0) was requested", f.Name, f.Format)
		}
	}
	for rr.NextRow() {
		vals := rr.Values()
		if len(vals) != len(fields) && protoErr == nil {
			protoErr = fmt.Errorf("server sent a row with %d values for a result with %d columns", len(vals), len(fields))
		}
		row := make([]string, len(vals))
		for i, v := range vals {
			row[i] = formatValue(v)
		}
		res.Rows = append(res.Rows, row)
	}
	if _, err := rr.Close(); err != nil {
		return res, err
	}
	if protoErr != nil {
		return res, protoErr
	}
	return res, nil
}
