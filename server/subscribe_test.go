package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// lineWriter collects what COPY writes, a line at a time, for a test to
// wait on while the COPY still runs.
type lineWriter struct {
	mu    sync.Mutex
	lines []string
	part  string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.part + string(p)
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			break
		}
		w.lines = append(w.lines, s[:i])
		s = s[i+1:]
	}
	w.part = s
	return len(p), nil
}

func (w *lineWriter) snapshot() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}

// waitLines waits until w holds want lines and returns them.
func waitLines(t *testing.T, w *lineWriter, want int) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if got := w.snapshot(); len(got) >= want {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("COPY gave %d lines, want %d: %q", len(w.snapshot()), want, w.snapshot())
	return nil
}

// TestSubscribe follows streams of each kind over pgwire while input
// arrives: COPY (SUBSCRIBE ...) TO STDOUT streams rows in COPY text format
// as they are committed and ends with 57014 on cancel, leaving the
// connection usable; an upsert stream gives retractions and insertions
// with diff; a cursor's FETCH waits for rows; windowed panes carry
// is_final; and every subscription is freed when its client goes.
func TestSubscribe(t *testing.T) {
	parallel(t)
	if testBrokers() != "" {
		isolateTopics(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := startTestServer(t, t.TempDir())
	defer srv.Close()
	conn := connect(ctx, t, srv)
	defer conn.Close(ctx)
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE SOURCE sub_in (user_id TEXT, amount BIGINT, note TEXT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
		WITH (topic = 'sub_in', partitions = 2, partition_key = 'user_id')`)
	exec(`CREATE STREAM sub_totals AS SELECT user_id, SUM(amount) AS total FROM sub_in GROUP BY user_id`)
	exec(`CREATE STREAM sub_win AS SELECT user_id, TUMBLE_START(ts, INTERVAL '1' MINUTE) AS ws, COUNT(*) AS n
		FROM sub_in GROUP BY user_id, TUMBLE(ts, INTERVAL '1' MINUTE)`)
	exec(`CREATE STREAM sub_rows AS SELECT user_id, note, ts FROM sub_in`)
	exec(`INSERT INTO sub_in VALUES ('a', 1, 'x', TIMESTAMP '2026-01-01 00:00:01'), ('b', 2, NULL, TIMESTAMP '2026-01-01 00:00:02')`)
	exec(`FLUSH`)

	// The snapshot of an upsert stream, then its changes as they come.
	copyConn := connect(ctx, t, srv)
	defer copyConn.Close(ctx)
	w := &lineWriter{}
	copyCtx, stopCopy := context.WithCancel(ctx)
	copyDone := make(chan error, 1)
	go func() {
		_, err := copyConn.PgConn().CopyTo(copyCtx, w, `COPY (SUBSCRIBE TO sub_totals) TO STDOUT`)
		copyDone <- err
	}()
	got := waitLines(t, w, 2)
	assertSameLines(t, got, []string{"a\t1\t1", "b\t2\t1"})
	exec("INSERT INTO sub_in VALUES ('a', 10, 'tab\there', TIMESTAMP '2026-01-01 00:01:30')") // a real tab
	exec(`FLUSH`)
	got = waitLines(t, w, 4)
	if got[2] != "a\t1\t-1" || got[3] != "a\t11\t1" {
		t.Fatalf("change of a: got %q, want the old row retracted, then the new one", got[2:])
	}
	if n := testutil.ToFloat64(srv.subscriptions); n != 1 {
		t.Fatalf("turbine_subscriptions = %v during the COPY, want 1", n)
	}
	// A CancelRequest (psql's Ctrl-C) ends the COPY with 57014 and
	// leaves the connection usable.
	if err := copyConn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	err := <-copyDone
	stopCopy()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("cancelled COPY: got %v, want 57014", err)
	}
	var one int
	if err := copyConn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("connection after a cancelled COPY: %v", err)
	}

	// COPY text format: NULL as \N, a tab escaped, timestamps as
	// PostgreSQL prints them.
	w2 := &lineWriter{}
	c2, stop2 := context.WithCancel(ctx)
	done2 := make(chan error, 1)
	go func() {
		_, err := copyConn.PgConn().CopyTo(c2, w2, `COPY (SUBSCRIBE TO sub_rows) TO STDOUT`)
		done2 <- err
	}()
	got = waitLines(t, w2, 3)
	assertSameLines(t, got, []string{"a\tx\t2026-01-01 00:00:01", "b\t\\N\t2026-01-01 00:00:02", "a\ttab\\there\t2026-01-01 00:01:30"})
	// pgx's own way to stop: its context ends, it drops the socket, and
	// the server frees the subscription.
	stop2()
	<-done2
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(srv.subscriptions) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("turbine_subscriptions = %v after the client left, want 0", testutil.ToFloat64(srv.subscriptions))
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A bare SUBSCRIBE through pgx's extended protocol: rows arrive as
	// they come, typed by the described columns.
	qctx, stopQ := context.WithCancel(ctx)
	qconn := connect(ctx, t, srv)
	rs, err := qconn.Query(qctx, `SUBSCRIBE TO sub_rows`)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for len(seen) < 3 && rs.Next() {
		var user string
		var note *string
		var ts time.Time
		if err := rs.Scan(&user, &note, &ts); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, user+" "+ts.Format("15:04:05"))
	}
	assertSameLines(t, seen, []string{"a 00:00:01", "b 00:00:02", "a 00:01:30"})
	stopQ()
	rs.Close()
	qconn.Close(ctx)

	// A cursor: FETCH waits for the next rows; the minute 00:00 has
	// closed, so its panes are there, final.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DECLARE c CURSOR FOR SUBSCRIBE TO sub_win`); err != nil {
		t.Fatal(err)
	}
	var panes []string
	for len(panes) < 2 {
		// Each FETCH gives what is there, at least one row: the panes of
		// two partitions may come in two reads.
		rows, err := tx.Query(ctx, `FETCH ALL c`)
		if err != nil {
			t.Fatal(err)
		}
		if names := rows.FieldDescriptions(); len(names) != 4 || names[3].Name != "is_final" {
			t.Fatalf("columns %v, want user_id, ws, n, is_final", names)
		}
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
			var user string
			var ws time.Time
			var n int64
			var final bool
			err := r.Scan(&user, &ws, &n, &final)
			return fmt.Sprintf("%s %s %d %t", user, ws.Format("15:04"), n, final), err
		})
		if err != nil || len(got) == 0 {
			t.Fatalf("FETCH ALL: %q, %v", got, err)
		}
		panes = append(panes, got...)
	}
	assertSameLines(t, panes, []string{"a 00:00 1 true", "b 00:00 1 true"})
	// Nothing more yet: a FETCH with a timeout returns no rows.
	var n int
	start := time.Now()
	r2, err := tx.Query(ctx, `FETCH 5 c WITH (timeout = '300ms')`)
	if err != nil {
		t.Fatal(err)
	}
	for r2.Next() {
		n++
	}
	if r2.Err() != nil || n != 0 || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("FETCH with timeout: %d rows, err %v, after %v", n, r2.Err(), time.Since(start))
	}
	// A FETCH waiting for rows gets them once a pane closes.
	fetched := make(chan []any, 1)
	go func() {
		var user string
		var ws time.Time
		var cnt int64
		var final bool
		err := tx.QueryRow(ctx, `FETCH 1 c`).Scan(&user, &ws, &cnt, &final)
		if err != nil {
			fetched <- []any{err}
			return
		}
		fetched <- []any{user, ws.Format("15:04"), cnt, final}
	}()
	time.Sleep(200 * time.Millisecond)
	other := connect(ctx, t, srv)
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, `INSERT INTO sub_in VALUES ('b', 1, 'y', TIMESTAMP '2026-01-01 00:03:00')`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `FLUSH`); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-fetched:
		if len(f) != 4 || f[1] != "00:01" || f[3] != true {
			t.Fatalf("FETCH 1 after the minute 00:01 closed: %v", f)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("FETCH did not return once a pane was written")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `FETCH 1 c`); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("FETCH after COMMIT: %v, want the cursor gone", err)
	}

	// A client that goes away frees its subscriptions.
	gone := connect(ctx, t, srv)
	if _, err := gone.Exec(ctx, `DECLARE d CURSOR FOR SUBSCRIBE TO sub_rows WITH (snapshot = false)`); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(srv.subscriptions); n != 1 {
		t.Fatalf("turbine_subscriptions = %v with one cursor open, want 1", n)
	}
	gone.Close(ctx)
	deadline = time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(srv.subscriptions) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("turbine_subscriptions = %v after the client left, want 0", testutil.ToFloat64(srv.subscriptions))
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Errors name the problem.
	for q, code := range map[string]string{
		`COPY (SUBSCRIBE TO nope) TO STDOUT`:                             "42P01",
		`COPY (SUBSCRIBE TO sub_rows WITH (snapshot = maybe)) TO STDOUT`: "22023",
		`COPY sub_rows TO STDOUT`:                                        "0A000",
		`FETCH 1 nope`:                                                   "34000",
	} {
		_, err := conn.Exec(ctx, q)
		if !errors.As(err, &pgErr) || pgErr.Code != code {
			t.Errorf("%s: got %v, want SQLSTATE %s", q, err, code)
		}
	}
}

func assertSameLines(t *testing.T, got, want []string) {
	t.Helper()
	g := append([]string(nil), got...)
	if len(g) != len(want) {
		t.Fatalf("got %q, want %q (any order)", got, want)
	}
	for _, w := range want {
		found := false
		for i, x := range g {
			if x == w {
				g = append(g[:i], g[i+1:]...)
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("got %q, want %q (any order)", got, want)
		}
	}
}
