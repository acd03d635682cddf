package pgwire_test

import (
	"bytes"
	"context"
	"errors"
	"github.com/turbinesql/turbinesql/internal/testenv"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/turbinesql/turbinesql/pgwire"
)

// pgCode is the SQLSTATE and message of a pgx error ("" when err is not a
// server error).
func pgCode(err error) (string, string) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, pe.Message
	}
	return "", ""
}

// waitEnded returns why the next "SELECT slow" ended.
func waitEnded(t *testing.T, b *fakeBackend) error {
	t.Helper()
	select {
	case cause := <-b.slowEnded:
		return cause
	case <-time.After(5 * time.Second):
		t.Fatal("SELECT slow still running after 5 s")
		return nil
	}
}

func waitStarted(t *testing.T, b *fakeBackend) {
	t.Helper()
	select {
	case <-b.slowStarted:
	case <-time.After(5 * time.Second):
		t.Fatal("SELECT slow did not start")
	}
}

// TestBackendKeyData: every connection gets its own non-zero process id and
// secret.
func TestBackendKeyData(t *testing.T) {
	_, addr := startServer(t, newFakeBackend())
	seen := map[uint32]bool{}
	var secrets [][]byte
	for range 5 {
		c := connect(t, addr, pgx.QueryExecModeSimpleProtocol)
		pid, secret := c.PgConn().PID(), c.PgConn().SecretKey()
		if pid == 0 || int32(pid) < 0 || seen[pid] {
			t.Errorf("pid %d: zero, negative or seen before (%v)", pid, seen)
		}
		seen[pid] = true
		if len(secret) != 4 {
			t.Errorf("secret %x: want 4 bytes", secret)
		}
		for _, s := range secrets {
			if bytes.Equal(s, secret) {
				t.Errorf("secret %x given twice", secret)
			}
		}
		secrets = append(secrets, secret)
	}
}

// sendCancel sends a CancelRequest on a new connection, as libpq does.
func sendCancel(t *testing.T, addr string, pid uint32, secret []byte) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	buf, err := (&pgproto3.CancelRequest{ProcessID: pid, SecretKey: secret}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(buf); err != nil {
		t.Fatal(err)
	}
	// The server answers nothing and hangs up.
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := nc.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("cancel connection: read %d, %v; want EOF", n, err)
	}
}

// TestCancelRequest: a CancelRequest with the connection's key cancels its
// running statement with 57014; a wrong secret or pid cancels nothing;
// the connection stays usable; a cancel between statements is dropped.
func TestCancelRequest(t *testing.T) {
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			b := newFakeBackend()
			_, addr := startServer(t, b)
			c := connect(t, addr, mode)
			other := connect(t, addr, mode)
			pid, secret := c.PgConn().PID(), c.PgConn().SecretKey()

			errc := make(chan error, 1)
			go func() {
				_, err := c.Exec(context.Background(), "SELECT slow")
				errc <- err
			}()
			waitStarted(t, b)

			wrong := bytes.Clone(secret)
			wrong[0] ^= 0xff
			sendCancel(t, addr, pid, wrong)
			sendCancel(t, addr, other.PgConn().PID(), other.PgConn().SecretKey())
			sendCancel(t, addr, pid^0x40000000, secret)
			select {
			case err := <-errc:
				t.Fatalf("statement ended by a cancel request that does not match: %v", err)
			case <-time.After(300 * time.Millisecond):
			}

			sendCancel(t, addr, pid, secret)
			if cause := waitEnded(t, b); !errors.Is(cause, pgwire.ErrCanceledByUser) {
				t.Errorf("statement ended by %v", cause)
			}
			err := <-errc
			if code, msg := pgCode(err); code != "57014" || msg != "canceling statement due to user request" {
				t.Errorf("got %v, want 57014 canceling statement due to user request", err)
			}

			// A cancel with nothing running does not hit the next statement.
			sendCancel(t, addr, pid, secret)
			rows, err := c.Query(testContext(t), "SELECT three")
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for rows.Next() {
				n++
			}
			if rows.Err() != nil || n != 3 {
				t.Errorf("after the cancel: %d rows, %v", n, rows.Err())
			}
			if err := other.Ping(testContext(t)); err != nil {
				t.Errorf("the other connection: %v", err)
			}
		})
	}
}

// TestCancelRequestThroughPgx: pgx's own CancelRequest (what a driver does
// when its context ends, with CancelRequestContextWatcherHandler) works.
func TestCancelRequestThroughPgx(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b)
	c := connect(t, addr, pgx.QueryExecModeSimpleProtocol)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), "SELECT slow")
		errc <- err
	}()
	waitStarted(t, b)
	if err := c.PgConn().CancelRequest(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if code, _ := pgCode(<-errc); code != "57014" {
		t.Errorf("got code %q, want 57014", code)
	}
}

// TestStatementTimeout: a session's StatementTimeout bounds each statement
// separately, with PostgreSQL's message.
func TestStatementTimeout(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		c := connect(t, addr, mode)
		if _, err := c.Exec(testContext(t), "SET statement_timeout = 200"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := c.Exec(testContext(t), "SELECT slow")
		took := time.Since(start)
		if code, msg := pgCode(err); code != "57014" || msg != "canceling statement due to statement timeout" {
			t.Errorf("%v: got %v, want 57014 canceling statement due to statement timeout", mode, err)
		}
		if cause := waitEnded(t, b); !errors.Is(cause, pgwire.ErrStatementTimeout) {
			t.Errorf("ended by %v", cause)
		}
		if took < 200*time.Millisecond || took > 3*time.Second {
			t.Errorf("%v: timed out after %v, want about 200ms", mode, took)
		}
		// Each statement of a multi-statement query has its own 200 ms.
		start = time.Now()
		if _, err := c.Exec(testContext(t), "SELECT three"); err != nil {
			t.Errorf("a quick statement failed: %v", err)
		}
		if _, err := c.Exec(testContext(t), "SET statement_timeout = 0"); err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := c.Exec(context.Background(), "SELECT slow")
			errc <- err
		}()
		select {
		case err := <-errc:
			t.Fatalf("%v: with statement_timeout 0 the statement ended: %v", mode, err)
		case <-time.After(400 * time.Millisecond):
		}
		if err := c.PgConn().CancelRequest(testContext(t)); err != nil {
			t.Fatal(err)
		}
		<-errc
		waitEnded(t, b)
	}
}

// TestClientDisconnectCancels: a client that goes away while its statement
// runs has the statement cancelled, for a close and for pgx giving up on a
// context (it closes the socket).
func TestClientDisconnectCancels(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b)

	r := startedRaw(t, addr)
	r.send(&pgproto3.Query{String: "SELECT slow"})
	waitStarted(t, b)
	_ = r.nc.Close()
	if cause := waitEnded(t, b); !errors.Is(cause, pgwire.ErrClientGone) {
		t.Errorf("ended by %v, want ErrClientGone", cause)
	}

	c := connect(t, addr, pgx.QueryExecModeExec)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Exec(ctx, "SELECT slow"); err == nil {
		t.Error("statement succeeded")
	}
	if cause := waitEnded(t, b); !errors.Is(cause, pgwire.ErrClientGone) && !errors.Is(cause, pgwire.ErrCanceledByUser) {
		t.Errorf("ended by %v", cause)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if sessions, closed := b.counts(); sessions == closed {
			break
		}
		if time.Now().After(deadline) {
			sessions, closed := b.counts()
			t.Fatalf("sessions %d, closed %d: a connection outlived its client", sessions, closed)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPipelinedMessagesSurviveTheWatcher: what a client sends while its
// statement runs (read ahead by the disconnect watcher) is still served,
// in order.
func TestPipelinedMessagesSurviveTheWatcher(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b)
	r := startedRaw(t, addr)
	if _, err := r.nc.Write(mustEncode(t, &pgproto3.Query{String: "SET statement_timeout = 300"})); err != nil {
		t.Fatal(err)
	}
	r.receiveUntil(isReady)
	r.send(&pgproto3.Query{String: "SELECT slow"})
	waitStarted(t, b)
	// Sent while SELECT slow runs: read by the watcher, not by pgproto3.
	r.send(&pgproto3.Query{String: "SELECT three"}, &pgproto3.Query{String: "SELECT 'x'"})
	got := r.receiveUntil(isReady)
	if !strings.Contains(strings.Join(got, " "), "57014") {
		t.Errorf("SELECT slow: %q", got)
	}
	got = append(r.receiveUntil(isReady), r.receiveUntil(isReady)...)
	want := `T n:20:0 D 1 D 2 D 3 C SELECT 3 Z I T echo:25:0 D x C SELECT 1 Z I`
	if strings.Join(got, " ") != want {
		t.Errorf("pipelined queries:\n got %q\nwant %q", strings.Join(got, " "), want)
	}
}

func mustEncode(t *testing.T, m pgproto3.FrontendMessage) []byte {
	t.Helper()
	b, err := m.Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStalledMessageDropped: a client that sends part of a message and
// stalls is dropped after the message timeout (header or body), and its
// session closed; an idle client between messages is not.
func TestStalledMessageDropped(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b, pgwire.WithMessageTimeout(300*time.Millisecond))
	full := mustEncode(t, &pgproto3.Query{String: "SELECT three"})
	bigHeader := []byte{'Q', 0, 0x10, 0, 0} // announces a 1 MB body
	for name, partial := range map[string][]byte{
		"header":          full[:3],
		"body":            full[:len(full)-2],
		"announced body":  append(bigHeader, "SELECT"...),
		"after a message": append(bytes.Clone(full), full[:7]...),
	} {
		t.Run(name, func(t *testing.T) {
			r := startedRaw(t, addr)
			start := time.Now()
			if _, err := r.nc.Write(partial); err != nil {
				t.Fatal(err)
			}
			if name == "after a message" {
				r.receiveUntil(isReady)
			}
			r.expectClosed()
			if took := time.Since(start); took < 250*time.Millisecond || took > 5*time.Second {
				t.Errorf("dropped after %v, want about 300ms", took)
			}
		})
	}

	r := startedRaw(t, addr)
	time.Sleep(700 * time.Millisecond) // idle between messages: fine
	if got := r.roundTrip(&pgproto3.Query{String: "SELECT three"}); len(got) != 6 {
		t.Errorf("idle client: %q", got)
	}
	// A message that trickles in within the timeout is fine too.
	for i := range full {
		if _, err := r.nc.Write(full[i : i+1]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := r.receiveUntil(isReady); len(got) != 6 {
		t.Errorf("trickled message: %q", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		sessions, closed := b.counts()
		if closed == sessions-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions %d, closed %d: dropped connections kept their sessions", sessions, closed)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCloseDoesNotWaitForStuckStatements: Close cancels what runs (the
// client of a cancellable statement is told 57P01) and returns after its
// grace even when a statement ignores its context.
func TestCloseDoesNotWaitForStuckStatements(t *testing.T) {
	b := newFakeBackend()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := pgwire.NewServer(b, pgwire.WithCloseGrace(500*time.Millisecond))
	go func() { _ = srv.Serve(ln) }()
	defer close(b.unstick)
	addr := ln.Addr().String()

	stuck := startedRaw(t, addr)
	stuck.send(&pgproto3.Query{String: "SELECT stuck"})
	slow := startedRaw(t, addr)
	slow.send(&pgproto3.Query{String: "SELECT slow"})
	idle := startedRaw(t, addr)
	waitStarted(t, b)
	for b.execCount("SELECT stuck") == 0 {
		time.Sleep(time.Millisecond)
	}

	start := time.Now()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %v with a statement ignoring cancellation; grace is 500ms", took)
	}
	for name, r := range map[string]*rawConn{"slow": slow, "idle": idle} {
		msg, err := r.fe.Receive()
		er, ok := msg.(*pgproto3.ErrorResponse)
		if err != nil || !ok || er.Severity != "FATAL" || er.Code != "57P01" ||
			er.Message != "terminating connection due to administrator command" {
			t.Errorf("%s connection got %#v, %v; want FATAL 57P01", name, msg, err)
		}
		r.expectClosed()
	}
	stuck.expectClosed()
}

// TestPsqlCancel: psql's Ctrl-C (SIGINT) sends a CancelRequest that stops
// the running statement.
func TestPsqlCancel(t *testing.T) {
	psql := testenv.Psql(t)
	b := newFakeBackend()
	_, addr := startServer(t, b)
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(psql, "-X", "-w", "-h", host, "-p", port, "-U", "u", "-c", "select slow", "db")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PGCONNECT_TIMEOUT=5", "LC_ALL=C", "PGSSLMODE=disable"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitStarted(t, b)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var err error
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("psql still running 10 s after Ctrl-C; stderr: %s", stderr.String())
	}
	if cause := waitEnded(t, b); !errors.Is(cause, pgwire.ErrCanceledByUser) {
		t.Errorf("ended by %v", cause)
	}
	if !strings.Contains(stderr.String(), "ERROR:  canceling statement due to user request") {
		t.Errorf("psql: %v\n%s", err, stderr.String())
	}
}
