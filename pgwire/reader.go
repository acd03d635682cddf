package pgwire

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"time"
)

// DefaultMessageTimeout bounds how long the rest of a message may take
// once its first byte has arrived.
const DefaultMessageTimeout = 30 * time.Second

// maxReadAhead bounds what the disconnect watcher buffers while a
// statement runs: a client pipelining more than this is no longer watched
// (its bytes wait in the socket), rather than growing the buffer.
const maxReadAhead = 1 << 20

// errStalled is how a connection ends when a client sent part of a
// message and then nothing for the message timeout.
var errStalled = errors.New("client stalled in the middle of a message")

// connReader is what the protocol reader (pgproto3) reads from: the
// socket, plus two things pgproto3 cannot do.
//
//   - It follows message boundaries (after startup, every message is a
//     type byte, a length and a body) so that an idle client may wait as
//     long as it likes between messages, but once a message has begun
//     the rest of it must arrive within msgTimeout. Without that, a client
//     that sends a header announcing 64 MB and then stalls pins a
//     goroutine and the body's buffer forever.
//   - While a statement runs, watch reads ahead of pgproto3 so that a
//     client that goes away (EOF, reset) is noticed and its statement
//     cancelled. What it reads is kept in ahead and handed to pgproto3
//     first, so nothing the client pipelined is lost.
//
// Only one goroutine uses a connReader at a time: the connection's, or
// the watcher while the connection's goroutine waits for the statement.
type connReader struct {
	nc         net.Conn
	msgTimeout time.Duration
	framed     bool // past startup: message boundaries are followed
	closing    func() bool

	hdr      [5]byte
	hdrLen   int       // header bytes of the current message seen so far
	bodyLeft int       // body bytes of the current message still to come
	started  time.Time // when the current message's first byte arrived; zero between messages
	deadline time.Time // the read deadline last set on nc

	ahead    []byte // read by the watcher, not yet given to pgproto3
	aheadErr error  // the read error the watcher met, given after ahead
}

func (r *connReader) Read(p []byte) (int, error) {
	if len(r.ahead) > 0 {
		n := copy(p, r.ahead)
		r.ahead = r.ahead[n:]
		return n, nil
	}
	if r.aheadErr != nil {
		return 0, r.aheadErr
	}
	if r.closing != nil && r.closing() {
		return 0, net.ErrClosed
	}
	if r.framed {
		if err := r.setDeadline(r.wantDeadline()); err != nil {
			return 0, err
		}
	}
	n, err := r.nc.Read(p)
	r.account(p[:n])
	if err != nil && r.framed && !r.started.IsZero() && errors.Is(err, os.ErrDeadlineExceeded) {
		err = errStalled
	}
	return n, err
}

// wantDeadline is no deadline between messages and the message's start
// plus msgTimeout inside one.
func (r *connReader) wantDeadline() time.Time {
	if r.started.IsZero() || r.msgTimeout <= 0 {
		return time.Time{}
	}
	return r.started.Add(r.msgTimeout)
}

func (r *connReader) setDeadline(t time.Time) error {
	if t.Equal(r.deadline) {
		return nil
	}
	if err := r.nc.SetReadDeadline(t); err != nil {
		return err
	}
	r.deadline = t
	return nil
}

// account follows message boundaries through bytes just read.
func (r *connReader) account(b []byte) {
	if !r.framed {
		return
	}
	for len(b) > 0 {
		if r.bodyLeft > 0 {
			k := min(len(b), r.bodyLeft)
			r.bodyLeft -= k
			b = b[k:]
			if r.bodyLeft == 0 {
				r.started = time.Time{}
			}
			continue
		}
		if r.hdrLen == 0 {
			r.started = time.Now()
		}
		k := copy(r.hdr[r.hdrLen:], b)
		r.hdrLen += k
		b = b[k:]
		if r.hdrLen < len(r.hdr) {
			continue
		}
		r.hdrLen = 0
		// A length below 4 is refused by pgproto3, which ends the
		// connection; treat it as an empty body meanwhile.
		r.bodyLeft = max(int(int32(binary.BigEndian.Uint32(r.hdr[1:])))-4, 0)
		if r.bodyLeft == 0 {
			r.started = time.Time{}
		}
	}
}

// watch reads ahead of pgproto3 until stop is called, and calls gone
// when the client's side of the socket ends. While it runs nothing else
// reads r.
func (r *connReader) watch(gone func(error)) (stop func()) {
	if len(r.ahead) > 0 || r.aheadErr != nil {
		// pgproto3 has not consumed what an earlier watch read:
		// appending would be fine, but the client is clearly talking.
		return func() {}
	}
	// A statement may run for long: the message timeout does not apply
	// to what the client pipelines meanwhile.
	if err := r.setDeadline(time.Time{}); err != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf [4096]byte
		for len(r.ahead) < maxReadAhead {
			n, err := r.nc.Read(buf[:])
			r.account(buf[:n])
			r.ahead = append(r.ahead, buf[:n]...)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return // stop woke us
				}
				r.aheadErr = err
				gone(err)
				return
			}
		}
	}()
	return func() {
		// A deadline in the past wakes the blocked Read.
		_ = r.nc.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = r.nc.SetReadDeadline(time.Time{})
		r.deadline = time.Time{}
	}
}
