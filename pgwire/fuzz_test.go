package pgwire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/turbinesql/turbinesql/pgwire"
)

// FuzzPGWireMessages sends arbitrary bytes to the server as a client would
// and checks what comes back. The first byte picks the phase: even, the
// bytes follow a valid StartupMessage (the message loop: simple and
// extended query, COPY, Sync, Terminate, garbage); odd, they are the
// startup phase itself (SSLRequest, CancelRequest, bad lengths). Whatever
// arrives, the server must not panic or hang: once the client stops
// sending, the connection ends within seconds, its Session is closed,
// and after a valid startup everything the server sent is a sequence of
// well-formed backend messages.
func FuzzPGWireMessages(f *testing.F) {
	enc := func(msgs ...pgproto3.FrontendMessage) []byte {
		var out []byte
		for _, m := range msgs {
			var err error
			if out, err = m.Encode(out); err != nil {
				f.Fatal(err)
			}
		}
		return out
	}
	seed := func(phase byte, b []byte) { f.Add(append([]byte{phase}, b...)) }
	seed(0, enc(&pgproto3.Query{String: "SELECT three"}, &pgproto3.Terminate{}))
	seed(0, enc(&pgproto3.Query{String: "SELECT typed; SELECT 'x;y'; BEGIN"}))
	seed(0, enc(&pgproto3.Parse{Name: "s", Query: "SELECT $1::int8"},
		&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("42")}},
		&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{MaxRows: 1}, &pgproto3.Sync{}))
	seed(0, enc(&pgproto3.Parse{Query: "SELECT many"}, &pgproto3.Bind{ResultFormatCodes: []int16{1}},
		&pgproto3.Execute{MaxRows: 2}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S'}, &pgproto3.Sync{}))
	seed(0, enc(&pgproto3.Query{String: "PREPARE p AS SELECT $1; EXECUTE p('a'); DEALLOCATE p"}))
	seed(0, enc(&pgproto3.Bind{PreparedStatement: "missing"}, &pgproto3.Execute{}, &pgproto3.Sync{}))
	seed(0, enc(&pgproto3.CopyData{Data: []byte("x")}, &pgproto3.CopyDone{}, &pgproto3.Flush{},
		&pgproto3.FunctionCall{Function: 1}))
	seed(0, enc(&pgproto3.Query{String: "SELECT slow"}))
	seed(0, []byte{'Q', 0, 0, 0, 3})         // length below 4
	seed(0, []byte{'Q', 0x7f, 0, 0, 0, 'x'}) // far beyond the size limit
	seed(0, []byte{'Z', 0, 0, 0, 4})         // a backend message type
	seed(0, []byte{'P', 0, 0, 0, 9, 'a', 0, 'b', 0, 0})
	seed(1, enc(&pgproto3.SSLRequest{}, &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "u"}}))
	seed(1, enc(&pgproto3.CancelRequest{ProcessID: 1, SecretKey: []byte{1, 2, 3, 4}}))
	seed(1, enc(&pgproto3.GSSEncRequest{}, &pgproto3.GSSEncRequest{}, &pgproto3.GSSEncRequest{}))
	seed(1, []byte{0, 0, 0, 8, 0, 3, 0, 0})
	seed(1, []byte{0xff, 0xff, 0xff, 0xff})

	startup := enc(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": "u", "database": "db"}})

	b := newFakeBackend()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	srv := pgwire.NewServer(b, pgwire.WithMessageTimeout(200*time.Millisecond),
		pgwire.WithStartupTimeout(time.Second), pgwire.WithMaxMessageSize(1<<20))
	go func() { _ = srv.Serve(ln) }()
	f.Cleanup(func() { _ = srv.Close() })

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		afterStartup := data[0]%2 == 0
		in := data[1:]
		if afterStartup {
			in = append(bytes.Clone(startup), in...)
		}
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			// The server may hang up before reading everything (a
			// protocol violation is FATAL): write errors are expected.
			_, _ = nc.Write(in)
			_ = nc.(*net.TCPConn).CloseWrite()
		}()
		out, err := io.ReadAll(nc)
		if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			t.Fatalf("reading the server's answer: %v (after %d bytes)", err, len(out))
		}
		if afterStartup {
			// Whole frames, each of which decodes.
			frames := 0
			for off := 0; off < len(out); frames++ {
				if len(out)-off < 5 {
					t.Fatalf("answer ends inside a header: %q", out[off:])
				}
				n := int(int32(binary.BigEndian.Uint32(out[off+1:])))
				if n < 4 || off+1+n > len(out) {
					t.Fatalf("frame %d: bad length %d: %q", frames, n, out[off:])
				}
				off += 1 + n
			}
			fe := pgproto3.NewFrontend(bytes.NewReader(out), io.Discard)
			for i := range frames {
				if msg, err := fe.Receive(); err != nil {
					t.Fatalf("frame %d does not decode (%T): %v\n%q", i, msg, err, out)
				}
			}
		}
		// Session.Close runs before the socket closes.
		if sessions, closed := b.counts(); sessions != closed {
			t.Fatalf("%d sessions, %d closed", sessions, closed)
		}
	})
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "read"
}
