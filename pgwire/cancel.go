package pgwire

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"time"
)

// Why a statement's context ended. They are context causes: the error the
// client sees is chosen from them, whatever error the Session returned
// on its way out.
var (
	// ErrStatementTimeout ends a statement that ran past its session's
	// statement_timeout.
	ErrStatementTimeout = errors.New("canceling statement due to statement timeout")
	// ErrCanceledByUser ends a statement a CancelRequest named (psql's
	// Ctrl-C, pgconn.CancelRequest).
	ErrCanceledByUser = errors.New("canceling statement due to user request")
	// ErrClientGone ends a statement whose client closed the connection.
	ErrClientGone = errors.New("client closed the connection")
	// ErrShutdown ends every statement when the server closes.
	ErrShutdown = errors.New("terminating connection due to administrator command")
)

// SQLSTATEs of cancellation.
const (
	codeQueryCanceled = "57014"
	codeAdminShutdown = "57P01"
)

// StatementTimeouter is implemented by Sessions whose statements have a
// time limit (PostgreSQL's statement_timeout). The wire layer asks before
// each statement, so a SET takes effect from the next one. Zero means no
// limit.
type StatementTimeouter interface {
	StatementTimeout() time.Duration
}

// backendKey is a connection's BackendKeyData: the process id names the
// connection, the secret proves that a CancelRequest comes from its client.
type backendKey struct {
	pid    uint32
	secret [4]byte
}

// register gives c a key no other live connection has.
func (s *Server) register(c *conn) backendKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	var k backendKey
	for {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		// Positive and non-zero, as a process id is.
		k.pid = binary.BigEndian.Uint32(b[:4])&0x7fffffff | 1
		copy(k.secret[:], b[4:])
		if _, taken := s.keys[k.pid]; !taken {
			break
		}
	}
	s.keys[k.pid] = c
	return k
}

func (s *Server) unregister(k backendKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, k.pid)
}

// cancelRequest cancels the statement running on the connection whose key
// the request holds. A wrong secret or unknown pid does nothing, and the
// client is told nothing either way, as PostgreSQL does: the answer would
// let a stranger probe for keys.
func (s *Server) cancelRequest(pid uint32, secret []byte) bool {
	s.mu.Lock()
	c, ok := s.keys[pid]
	s.mu.Unlock()
	if !ok || subtle.ConstantTimeCompare(c.key.secret[:], secret) != 1 {
		s.log.Info("pgwire: cancel request matches no connection", "pid", pid)
		return false
	}
	return c.cancelRunning(ErrCanceledByUser)
}

// cancelRunning cancels the statement c runs now, if any. A cancel that
// arrives between statements is dropped: it must not hit the next one.
func (c *conn) cancelRunning(cause error) bool {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	if c.running == nil {
		return false
	}
	c.running(cause)
	return true
}

// runStatement runs f, one statement, under its own context: cancelled by
// a CancelRequest, by statement_timeout, when the client goes away or the
// server closes. If f fails after its context ended, the error says why
// the context ended (57014), not how f noticed.
func (c *conn) runStatement(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancelCause(c.ctx)
	defer cancel(nil)
	if t, ok := c.sess.(StatementTimeouter); ok {
		if d := t.StatementTimeout(); d > 0 {
			var stop context.CancelFunc
			ctx, stop = context.WithTimeoutCause(ctx, d, ErrStatementTimeout)
			defer stop()
		}
	}
	c.runMu.Lock()
	c.running = cancel
	c.runMu.Unlock()
	stopWatch := c.rd.watch(func(error) { cancel(ErrClientGone) })

	err := f(ctx)

	stopWatch()
	c.runMu.Lock()
	c.running = nil
	c.runMu.Unlock()
	if err != nil && ctx.Err() != nil {
		return canceledError(context.Cause(ctx), err)
	}
	return err
}

// canceledError is the error reported for a statement stopped by cause.
func canceledError(cause, err error) error {
	switch {
	case errors.Is(cause, ErrStatementTimeout), errors.Is(cause, ErrCanceledByUser):
		return &canceled{code: codeQueryCanceled, cause: cause, err: err}
	case errors.Is(cause, ErrShutdown):
		return &canceled{code: codeAdminShutdown, cause: cause, err: err}
	}
	return err
}

// canceled reports a statement cancelled by cause with PostgreSQL's
// message for it; err, how the statement stopped, stays in the chain.
type canceled struct {
	code  string
	cause error
	err   error
}

func (e *canceled) Error() string    { return e.cause.Error() }
func (e *canceled) SQLState() string { return e.code }
func (e *canceled) Unwrap() []error  { return []error{e.cause, e.err} }

// Hint, Position and Where hide those of the statement's own error: they
// would describe how it stopped, not why.
func (e *canceled) Hint() string  { return "" }
func (e *canceled) Where() string { return "" }
func (e *canceled) Position() int { return 0 }
