package pgwire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Transaction status bytes of ReadyForQuery.
const (
	txIdle    byte = 'I'
	txInBlock byte = 'T'
)

// flushThreshold is how many bytes of DataRows may pile up in pgproto3's
// send buffer before they are written out, so a large result does not have
// to be held in memory twice.
const flushThreshold = 64 << 10

// conn is the state of one client connection. It is only used by the
// connection's goroutine.
type conn struct {
	srv  *Server
	nc   net.Conn
	rd   *connReader // what be reads from
	be   *pgproto3.Backend
	ctx  context.Context
	sess Session
	key  backendKey // zero until startup completes

	// running cancels the statement in progress (nil between
	// statements). A CancelRequest arrives on another connection's
	// goroutine, hence the mutex.
	runMu   sync.Mutex
	running context.CancelCauseFunc

	stmts   map[string]*statement
	portals map[string]*portal

	txStatus byte
	tls      bool // the connection was upgraded by SSLRequest
	// ignoreTillSync is set after an error in the extended protocol: the
	// client has already sent the rest of the batch, which must be skipped
	// up to the next Sync.
	ignoreTillSync bool

	unflushed int    // bytes sent since the last flush, roughly
	writeErr  error  // a failed flush in the middle of a result
	rowBuf    []byte // scratch for encoding one DataRow
	rowVals   [][]byte
	rowEnds   []int
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		srv:      s,
		stmts:    make(map[string]*statement),
		portals:  make(map[string]*portal),
		txStatus: txIdle,
		rowBuf:   make([]byte, 0, 256),
	}
	c.setTransport(nc)
	return c
}

// setTransport makes nc the connection's socket (the TCP one, or TLS on
// top of it after SSLRequest), with a fresh protocol reader on it.
func (c *conn) setTransport(nc net.Conn) {
	c.nc = nc
	c.rd = &connReader{nc: nc, msgTimeout: c.srv.msgTimeout, closing: c.srv.isClosed}
	c.be = pgproto3.NewBackend(c.rd, nc)
	c.be.SetMaxBodyLen(c.srv.maxMessageSize)
}

// serve runs the connection to its end. Failures are the connection's own
// business: they are logged and never reach the Server.
func (c *conn) serve() {
	defer func() { _ = c.nc.Close() }()
	ctx, cancel := context.WithCancel(c.srv.ctx)
	defer cancel()
	c.ctx = ctx

	ok, err := c.startup()
	if c.sess != nil {
		defer c.sess.Close()
	}
	if c.key.pid != 0 {
		defer c.srv.unregister(c.key)
	}
	if err != nil {
		c.logEnd("startup", err)
		return
	}
	if !ok {
		return
	}

	if err := c.loop(); err != nil && !errors.Is(err, errConnShutdown) {
		c.logEnd("session", err)
	}
}

func (c *conn) logEnd(phase string, err error) {
	if isDisconnect(err) || c.srv.isClosed() {
		c.srv.log.Debug("pgwire: connection closed", "phase", phase, "remote", c.nc.RemoteAddr().String(), "err", err)
		return
	}
	c.srv.log.Warn("pgwire: connection failed", "phase", phase, "remote", c.nc.RemoteAddr().String(), "err", err)
}

// isDisconnect reports whether err means the socket is gone (as opposed to
// the client sending garbage).
func isDisconnect(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.As(err, &ne)
}

// loop reads and answers messages until Terminate or a connection failure.
// It returns nil on a clean Terminate or disconnect.
func (c *conn) loop() error {
	for {
		msg, err := c.be.Receive()
		if err != nil {
			switch {
			case c.srv.isClosed():
				c.fatal(newWireError(codeAdminShutdown, "%v", ErrShutdown))
				return nil
			case errors.Is(err, errStalled):
				// Nothing can be said to a client that stopped sending
				// halfway; it may not be reading either.
				c.srv.log.Info("pgwire: dropped a connection", "remote", c.nc.RemoteAddr().String(), "reason", err, "timeout", c.srv.msgTimeout)
				return nil
			case isDisconnect(err):
				return nil
			}
			// The stream can no longer be trusted to be in sync: tell the
			// client why and hang up, as PostgreSQL does.
			c.fatal(newWireError(codeProtocolViolation, "invalid frontend message: %v", err))
			return fmt.Errorf("receive: %w", err)
		}

		if c.ignoreTillSync {
			switch msg.(type) {
			case *pgproto3.Sync:
			case *pgproto3.Terminate:
				return nil
			default:
				continue
			}
		}

		switch m := msg.(type) {
		case *pgproto3.Query:
			c.simpleQuery(m.String)
			err = c.readyForQuery()
		case *pgproto3.Parse:
			c.extended(c.parse(m))
		case *pgproto3.Bind:
			c.extended(c.bind(m))
		case *pgproto3.Describe:
			c.extended(c.describe(m))
		case *pgproto3.Execute:
			c.extended(c.execute(m))
		case *pgproto3.Close:
			c.extended(c.closeObject(m))
		case *pgproto3.Sync:
			c.ignoreTillSync = false
			err = c.readyForQuery()
		case *pgproto3.Flush:
			err = c.flush()
		case *pgproto3.Terminate:
			return nil
		case *pgproto3.CopyData, *pgproto3.CopyDone, *pgproto3.CopyFail:
			// PostgreSQL ignores these outside COPY so that a client can
			// finish sending a failed COPY's data; do the same.
		case *pgproto3.FunctionCall:
			c.sendError(newWireError(codeFeatureNotSupported, "function call messages are not supported"))
			err = c.readyForQuery()
		default:
			c.fatal(newWireError(codeProtocolViolation, "unexpected message type %T", msg))
			return fmt.Errorf("unexpected message %T", msg)
		}
		if err == nil {
			err = c.writeErr
		}
		if err != nil {
			return err
		}
	}
}

// extended reports err from an extended-protocol message and starts
// discarding messages until Sync.
func (c *conn) extended(err error) {
	if err != nil {
		c.sendError(err)
		c.ignoreTillSync = true
	}
}

// readyForQuery ends a query cycle. Outside a transaction block the implicit
// transaction ends too, which in PostgreSQL drops all portals.
func (c *conn) readyForQuery() error {
	if c.srv.isClosed() {
		// A statement cut short by Close, or one that just made it: the
		// connection ends here, as PostgreSQL's do at shutdown.
		c.fatal(newWireError(codeAdminShutdown, "%v", ErrShutdown))
		return errConnShutdown
	}
	if c.txStatus == txIdle {
		clear(c.portals)
	}
	c.be.Send(&pgproto3.ReadyForQuery{TxStatus: c.txStatus})
	return c.flush()
}

func (c *conn) flush() error {
	c.unflushed = 0
	if err := c.be.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

// errConnShutdown ends loop once the client has been told of the shutdown.
var errConnShutdown = errors.New("server closing")

// sendError queues an ErrorResponse for err. A statement stopped by the
// server's shutdown gets none: the FATAL that ends the connection says it.
func (c *conn) sendError(err error) {
	if errors.Is(err, ErrShutdown) {
		return
	}
	c.be.Send(errorResponse(severityError, err))
}

// fatal sends a FATAL error right away; the caller then closes the
// connection. Write failures do not matter at that point.
func (c *conn) fatal(err error) {
	c.be.Send(errorResponse(severityFatal, err))
	_ = c.flush()
}

// trackTx follows BEGIN/COMMIT/ROLLBACK loosely, from the command tags the
// backend returns, for the status byte of ReadyForQuery.
func (c *conn) trackTx(tag string) {
	switch strings.ToUpper(strings.TrimSpace(tag)) {
	case "BEGIN", "START TRANSACTION":
		c.txStatus = txInBlock
	case "COMMIT", "ROLLBACK":
		c.txStatus = txIdle
	}
}
