package pgwire_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A result's notices reach the client once per run, before its rows, in
// every protocol path: simple query, extended (pgx's exec modes) and
// PREPARE/EXECUTE. (TestProtocol fetches a portal in pieces.)
func TestNotices(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b)
	var mu sync.Mutex
	var got []*pgconn.Notice
	onNotice := func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, n)
	}
	take := func() []*pgconn.Notice {
		mu.Lock()
		defer mu.Unlock()
		out := got
		got = nil
		return out
	}
	check := func(t *testing.T, ns []*pgconn.Notice) {
		t.Helper()
		if len(ns) != 2 {
			t.Fatalf("%d notices, want 2: %+v", len(ns), ns)
		}
		n := ns[0]
		if n.Severity != "NOTICE" || n.Code != "00000" || n.Message != "first" || n.Detail != "some detail" || n.Hint != "a hint" || ns[1].Message != "second" {
			t.Fatalf("notices %+v %+v", *ns[0], *ns[1])
		}
	}
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			cfg, err := pgx.ParseConfig("postgres://u@" + addr + "/db?sslmode=disable")
			if err != nil {
				t.Fatal(err)
			}
			cfg.DefaultQueryExecMode = mode
			cfg.OnNotice = onNotice
			ctx := testContext(t)
			c, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			rows, err := c.Query(ctx, "SELECT noticed")
			if err != nil {
				t.Fatal(err)
			}
			// The notices arrived before the first row.
			if !rows.Next() {
				t.Fatal("no rows")
			}
			check(t, take())
			for rows.Next() {
			}
			if rows.Err() != nil {
				t.Fatal(rows.Err())
			}
			if ns := take(); len(ns) != 0 {
				t.Fatalf("notices after the rows: %+v", ns)
			}

			if mode == pgx.QueryExecModeSimpleProtocol {
				// PREPARE / EXECUTE runs the statement through its own path.
				if _, err := c.Exec(ctx, "PREPARE p1 AS SELECT noticed"); err != nil {
					t.Fatal(err)
				}
				if _, err := c.Exec(ctx, "EXECUTE p1"); err != nil {
					t.Fatal(err)
				}
				check(t, take())
			}
		})
	}
}
