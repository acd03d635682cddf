package server

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// noticeConn is a client connection that keeps the notices the server
// raises (WARNING, NOTICE, INFO).
type noticeConn struct {
	*pgx.Conn
	mu      sync.Mutex
	notices []*pgconn.Notice
}

// connectNotices connects to srv, keeping notices.
func connectNotices(ctx context.Context, t *testing.T, srv *Server) *noticeConn {
	t.Helper()
	c := &noticeConn{}
	cfg, err := pgx.ParseConfig("postgres://turbine@" + srv.PGAddr() + "/turbine?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.notices = append(c.notices, n)
	}
	if c.Conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return c
}

// takeNotices returns the notices raised since the last call.
func (c *noticeConn) takeNotices() []*pgconn.Notice {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns := c.notices
	c.notices = nil
	return ns
}
