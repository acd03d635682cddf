package pgwire_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/turbinesql/turbinesql/pgwire"
)

var execModes = []pgx.QueryExecMode{
	pgx.QueryExecModeCacheStatement,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeSimpleProtocol,
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func connect(t *testing.T, addr string, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://u@%s:%s/db?sslmode=disable&application_name=wiretest", host, port))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	ctx := testContext(t)
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func TestPgxExecModes(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b)

	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := testContext(t)
			c := connect(t, addr, mode)

			t.Run("typed columns", func(t *testing.T) {
				rs, err := c.Query(ctx, "SELECT typed")
				if err != nil {
					t.Fatal(err)
				}
				type row struct {
					id       int64
					score    float64
					name     *string
					ok       bool
					at, attz time.Time
				}
				var got []row
				for rs.Next() {
					var r row
					if err := rs.Scan(&r.id, &r.score, &r.name, &r.ok, &r.at, &r.attz); err != nil {
						t.Fatal(err)
					}
					got = append(got, r)
				}
				if err := rs.Err(); err != nil {
					t.Fatal(err)
				}
				if tag := rs.CommandTag().String(); tag != "SELECT 2" {
					t.Errorf("tag = %q", tag)
				}
				if len(got) != 2 {
					t.Fatalf("got %d rows", len(got))
				}
				for i, want := range typedRows {
					g := got[i]
					var name any
					if g.name != nil {
						name = *g.name
					}
					if g.id != want[0] || g.score != want[1] || name != want[2] || g.ok != want[3] ||
						!g.at.Equal(want[4].(time.Time)) || !g.attz.Equal(want[5].(time.Time)) {
						t.Errorf("row %d = %+v (name %v), want %v", i, g, name, want)
					}
				}
			})

			t.Run("parameters", func(t *testing.T) {
				ts := time.Date(2026, 3, 4, 5, 6, 7, 891000000, time.UTC)
				tests := []struct {
					sql  string
					arg  any
					want any
				}{
					{"SELECT $1", int64(42), "42"},
					{"SELECT $1", "it's", "it's"},
					{"SELECT $1", float64(1.5), "1.5"},
					{"SELECT $1", true, nil}, // spelling varies by mode
					{"SELECT $1", ts, nil},
					{"SELECT $1::int8", int64(-42), int64(-42)},
					{"SELECT $1::float8", 0.25, 0.25},
					{"SELECT $1::bool", true, true},
					{"SELECT $1::timestamptz", ts, ts},
					{"SELECT $1::text", "x", "x"},
				}
				for _, tt := range tests {
					var got any
					if err := c.QueryRow(ctx, tt.sql, tt.arg).Scan(&got); err != nil {
						t.Errorf("%s with %T: %v", tt.sql, tt.arg, err)
						continue
					}
					if tt.want == nil {
						if s, ok := got.(string); !ok || s == "" {
							t.Errorf("%s with %T = %#v, want a non-empty string", tt.sql, tt.arg, got)
						}
						continue
					}
					if wt, ok := tt.want.(time.Time); ok {
						if gt, ok := got.(time.Time); !ok || !gt.Equal(wt) {
							t.Errorf("%s = %#v, want %v", tt.sql, got, wt)
						}
						continue
					}
					if got != tt.want {
						t.Errorf("%s with %#v = %#v, want %#v", tt.sql, tt.arg, got, tt.want)
					}
				}

				var null *string
				if err := c.QueryRow(ctx, "SELECT $1", nil).Scan(&null); err != nil || null != nil {
					t.Errorf("NULL parameter: %v, %v", null, err)
				}
			})

			t.Run("error then recovery", func(t *testing.T) {
				_, err := c.Exec(ctx, "SELECT * FROM missing")
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) {
					t.Fatalf("err = %v, want *pgconn.PgError", err)
				}
				if pgErr.Code != "42P01" || pgErr.Position != 15 || pgErr.Hint != "check the name" ||
					pgErr.Severity != "ERROR" || pgErr.Message != `plan: relation "missing" does not exist` {
					t.Errorf("PgError = %+v", pgErr)
				}
				var n int64
				if err := c.QueryRow(ctx, "SELECT $1::int8", int64(7)).Scan(&n); err != nil || n != 7 {
					t.Errorf("after error: %d, %v", n, err)
				}
			})

			t.Run("ddl tag", func(t *testing.T) {
				tag, err := c.Exec(ctx, "CREATE SOURCE s")
				if err != nil {
					t.Fatal(err)
				}
				if tag.String() != "CREATE SOURCE" {
					t.Errorf("tag = %q", tag)
				}
			})

			t.Run("unencodable value", func(t *testing.T) {
				_, err := c.Exec(ctx, "SELECT unencodable")
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "XX000" {
					t.Fatalf("err = %v, want XX000", err)
				}
				if err := c.Ping(ctx); err != nil {
					t.Errorf("after unencodable: %v", err)
				}
			})

			t.Run("large result", func(t *testing.T) {
				rs, err := c.Query(ctx, "SELECT many")
				if err != nil {
					t.Fatal(err)
				}
				var n, sum int64
				for rs.Next() {
					var v int64
					if err := rs.Scan(&v); err != nil {
						t.Fatal(err)
					}
					n++
					sum += v
				}
				if err := rs.Err(); err != nil {
					t.Fatal(err)
				}
				if n != 20000 || sum != 20000*19999/2 {
					t.Errorf("n=%d sum=%d", n, sum)
				}
			})

			t.Run("deallocate all", func(t *testing.T) {
				if err := c.DeallocateAll(ctx); err != nil {
					t.Fatal(err)
				}
				var n int64
				if err := c.QueryRow(ctx, "SELECT $1::int8", int64(8)).Scan(&n); err != nil || n != 8 {
					t.Errorf("after DeallocateAll: %d, %v", n, err)
				}
			})

			t.Run("transaction", func(t *testing.T) {
				tx, err := c.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if st := c.PgConn().TxStatus(); st != 'T' {
					t.Errorf("status in transaction = %c", st)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				if st := c.PgConn().TxStatus(); st != 'I' {
					t.Errorf("status after commit = %c", st)
				}
			})
		})
	}
}

// TestPgxStatementRunsOnce checks that a statement is executed exactly once
// per query in every mode, including those that describe the portal.
func TestPgxStatementRunsOnce(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b)
	for i, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			c := connect(t, addr, mode)
			sql := fmt.Sprintf("INSERT %d", i)
			tag, err := c.Exec(testContext(t), sql)
			if err != nil {
				t.Fatal(err)
			}
			if tag.String() != "INSERT 0 1" {
				t.Errorf("tag = %q", tag)
			}
			if n := b.execCount(sql); n != 1 {
				t.Errorf("executed %d times", n)
			}
		})
	}
}

func TestPgconnMultiStatement(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b)
	c := connect(t, addr, pgx.QueryExecModeSimpleProtocol)
	ctx := testContext(t)

	results, err := c.PgConn().Exec(ctx, "CREATE SOURCE a; SELECT typed; SELECT 'x;y'; BEGIN").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, r := range results {
		tags = append(tags, r.CommandTag.String())
	}
	if fmt.Sprint(tags) != "[CREATE SOURCE SELECT 2 SELECT 1 BEGIN]" {
		t.Errorf("tags = %q", tags)
	}
	if len(results[1].Rows) != 2 || string(results[1].Rows[0][2]) != "alice" || results[1].Rows[1][2] != nil ||
		string(results[1].Rows[1][1]) != "1e+20" || string(results[1].Rows[1][4]) != "1999-12-31 23:59:59.123456" ||
		string(results[1].Rows[0][5]) != "2026-01-01 00:00:01+00" {
		t.Errorf("typed rows = %q", results[1].Rows)
	}
	if string(results[2].Rows[0][0]) != "x;y" {
		t.Errorf("quoted semicolon: %q", results[2].Rows)
	}
	if st := c.PgConn().TxStatus(); st != 'T' {
		t.Errorf("status after BEGIN = %c", st)
	}

	// An error stops the rest of the string.
	results, err = c.PgConn().Exec(ctx, "CREATE SOURCE b; SELECT * FROM missing; CREATE SOURCE c").ReadAll()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Fatalf("err = %v", err)
	}
	if len(results) == 0 || results[0].CommandTag.String() != "CREATE SOURCE" {
		t.Errorf("results = %+v", results)
	}
	if n := b.execCount("CREATE SOURCE c"); n != 0 {
		t.Errorf("statement after the error ran %d times", n)
	}
}

// TestPgxSSLPrefer connects with pgx's default sslmode (prefer), which
// starts with an SSLRequest the server must refuse.
func TestPgxSSLPrefer(t *testing.T) {
	_, addr := startServer(t, newFakeBackend())
	ctx := testContext(t)
	c, err := pgx.Connect(ctx, "postgres://u@"+addr+"/db")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	if err := c.Ping(ctx); err != nil {
		t.Error(err)
	}
}

func TestStartupParameters(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b)
	c := connect(t, addr, pgx.QueryExecModeCacheStatement)
	pc := c.PgConn()
	for name, want := range map[string]string{
		"server_version":              "16.0 (TurbineSQL)",
		"server_encoding":             "UTF8",
		"client_encoding":             "UTF8",
		"DateStyle":                   "ISO, MDY",
		"integer_datetimes":           "on",
		"standard_conforming_strings": "on",
		"TimeZone":                    "UTC",
		"application_name":            "wiretest",
		"is_superuser":                "off",
		"session_authorization":       "u",
		"IntervalStyle":               "postgres",
	} {
		if got := pc.ParameterStatus(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if pc.PID() == 0 {
		t.Error("no backend PID")
	}
	if fmt := fmt.Sprint(b.users); fmt != "[u@db]" {
		t.Errorf("sessions = %s", fmt)
	}
}

// TestCloseWhileBusy checks that Close interrupts a running statement,
// ends the connection and closes its Session.
func TestCloseWhileBusy(t *testing.T) {
	b := newFakeBackend()
	srv, addr := startServer(t, b)
	c := connect(t, addr, pgx.QueryExecModeSimpleProtocol)

	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), "SELECT slow")
		errc <- err
	}()
	for b.execCount("SELECT slow") == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err == nil {
		t.Error("slow statement succeeded after Close")
	}
	if sessions, closed := b.counts(); sessions != 1 || closed != 1 {
		t.Errorf("sessions=%d closed=%d", sessions, closed)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(ln); !errors.Is(err, pgwire.ErrServerClosed) {
		t.Errorf("Serve after Close = %v", err)
	}
}
