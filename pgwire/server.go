package pgwire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"
)

// ErrServerClosed is returned by Serve after Close was called.
var ErrServerClosed = errors.New("pgwire: server closed")

// Defaults for the Options.
const (
	DefaultMaxMessageSize = 64 << 20
	DefaultStartupTimeout = 30 * time.Second
)

// maxAcceptBackoff caps the pause after a transient Accept failure (e.g. out
// of file descriptors), as net/http does.
const maxAcceptBackoff = time.Second

// Option configures a Server.
type Option func(*Server)

// WithLogger sets where connection-level failures (broken sockets, protocol
// violations) are logged. Statement errors go to the client, not the log.
// The default discards everything.
func WithLogger(l *slog.Logger) Option {
	return func(s *Server) {
		if l != nil {
			s.log = l
		}
	}
}

// WithMaxMessageSize bounds the size of one frontend message body in bytes,
// so a client cannot make the server allocate without limit. n <= 0 keeps
// the default.
func WithMaxMessageSize(n int) Option {
	return func(s *Server) {
		if n > 0 {
			s.maxMessageSize = n
		}
	}
}

// WithStartupTimeout bounds how long a client may take to complete the
// startup handshake; it keeps idle half-open sockets from pinning goroutines.
// d <= 0 keeps the default.
func WithStartupTimeout(d time.Duration) Option {
	return func(s *Server) {
		if d > 0 {
			s.startupTimeout = d
		}
	}
}

// WithMessageTimeout bounds how long a client may take to send the rest of
// a message once its first byte has arrived; a client that stalls longer
// is dropped. Between messages a client may stay idle as long as it likes.
// d <= 0 keeps the default (DefaultMessageTimeout).
func WithMessageTimeout(d time.Duration) Option {
	return func(s *Server) {
		if d > 0 {
			s.msgTimeout = d
		}
	}
}

// WithCloseGrace bounds how long Close waits for connections to end
// after cancelling their statements. A statement that ignores its context
// is not waited for past it. d <= 0 keeps the default.
func WithCloseGrace(d time.Duration) Option {
	return func(s *Server) {
		if d > 0 {
			s.closeGrace = d
		}
	}
}

// DefaultCloseGrace is how long Close waits for connections to end.
const DefaultCloseGrace = 2 * time.Second

// Server accepts PostgreSQL connections and serves them from a Backend. It
// runs one goroutine per connection.
type Server struct {
	backend        Backend
	log            *slog.Logger
	maxMessageSize int
	startupTimeout time.Duration
	msgTimeout     time.Duration
	closeGrace     time.Duration
	scramLookup    VerifierLookup // nil: trust every user
	tlsConfig      *tls.Config    // nil: SSLRequest is refused
	tlsRequired    bool

	// ctx is cancelled by Close (cause ErrShutdown) so that Session calls
	// in flight can stop.
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	keys      map[uint32]*conn // by BackendKeyData process id, for CancelRequest
	// wg counts Serve loops and connection goroutines. Add is only called
	// under mu while !closed, so it never races with Close's Wait.
	wg sync.WaitGroup
}

// NewServer returns a Server that answers every connection from b.
func NewServer(b Backend, opts ...Option) *Server {
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &Server{
		backend:        b,
		log:            slog.New(slog.DiscardHandler),
		maxMessageSize: DefaultMaxMessageSize,
		startupTimeout: DefaultStartupTimeout,
		msgTimeout:     DefaultMessageTimeout,
		closeGrace:     DefaultCloseGrace,
		ctx:            ctx,
		cancel:         cancel,
		listeners:      make(map[net.Listener]struct{}),
		conns:          make(map[net.Conn]struct{}),
		keys:           make(map[uint32]*conn),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Serve accepts connections on ln until Close is called or ln fails. It
// always returns a non-nil error: ErrServerClosed after Close, otherwise
// the Accept error. ln is closed when Serve returns.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
		_ = ln.Close()
	}()

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			if !retryableAcceptError(err) {
				return fmt.Errorf("pgwire: accept: %w", err)
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), maxAcceptBackoff)
			s.log.Warn("pgwire: accept failed, retrying", "err", err, "backoff", backoff)
			select {
			case <-time.After(backoff):
			case <-s.ctx.Done():
				return ErrServerClosed
			}
			continue
		}
		backoff = 0

		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			return ErrServerClosed
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()

		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, nc)
				s.mu.Unlock()
			}()
			newConn(s, nc).serve()
		}()
	}
}

// Close stops every Serve loop, cancels running statements (their clients
// get 57P01, as from a PostgreSQL shutdown), wakes idle connections and
// waits up to the close grace for the connection goroutines to finish.
// Then it closes every socket and returns without waiting for statements
// that ignore their context: a query must never hold a shutdown. Calling
// it again is a no-op.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var errs []error
	for ln := range s.listeners {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("pgwire: close listener: %w", err))
		}
	}
	s.cancel(ErrShutdown)
	for nc := range s.conns {
		// A deadline in the past wakes a connection blocked reading, which
		// then says goodbye (57P01) and ends.
		_ = nc.SetReadDeadline(time.Unix(1, 0))
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(s.closeGrace)
	defer timer.Stop()
	select {
	case <-done:
		return errors.Join(errs...)
	case <-timer.C:
	}
	s.mu.Lock()
	n := len(s.conns)
	for nc := range s.conns {
		// Connection close errors are uninteresting: the peer may be gone.
		_ = nc.Close()
	}
	s.mu.Unlock()
	s.log.Warn("pgwire: closed without waiting for statements that ignored cancellation", "connections", n, "grace", s.closeGrace)
	return errors.Join(errs...)
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// retryableAcceptError reports whether Accept may succeed if tried again:
// resource exhaustion and connections aborted before being accepted.
func retryableAcceptError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) ||
		errors.Is(err, syscall.ENOMEM)
}
