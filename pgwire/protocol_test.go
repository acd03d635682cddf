package pgwire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/turbinesql/turbinesql/pgwire"
)

// rawConn drives the server with hand-written protocol messages, for the
// paths real drivers rarely take.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	fe *pgproto3.Frontend
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return &rawConn{t: t, nc: nc, fe: pgproto3.NewFrontend(nc, nc)}
}

// startedRaw returns a connection past the startup phase.
func startedRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	r := dialRaw(t, addr)
	got := r.roundTrip(&pgproto3.StartupMessage{
		ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters:      map[string]string{"user": "u", "database": "db"},
	})
	if last := got[len(got)-1]; last != "Z I" {
		t.Fatalf("startup ended with %q", got)
	}
	return r
}

func (r *rawConn) send(msgs ...pgproto3.FrontendMessage) {
	r.t.Helper()
	for _, m := range msgs {
		r.fe.Send(m)
	}
	if err := r.fe.Flush(); err != nil {
		r.t.Fatal(err)
	}
}

// receiveUntil collects summaries of backend messages up to and including
// the first one for which stop is true.
func (r *rawConn) receiveUntil(stop func(pgproto3.BackendMessage) bool) []string {
	r.t.Helper()
	var out []string
	for {
		msg, err := r.fe.Receive()
		if err != nil {
			r.t.Fatalf("receive after %q: %v", out, err)
		}
		out = append(out, summarize(msg))
		if stop(msg) {
			return out
		}
	}
}

func isReady(m pgproto3.BackendMessage) bool {
	_, ok := m.(*pgproto3.ReadyForQuery)
	return ok
}

// roundTrip sends msgs and returns everything up to ReadyForQuery.
func (r *rawConn) roundTrip(msgs ...pgproto3.FrontendMessage) []string {
	r.t.Helper()
	r.send(msgs...)
	return r.receiveUntil(isReady)
}

// expectClosed checks that the server hangs up.
func (r *rawConn) expectClosed() {
	r.t.Helper()
	buf := make([]byte, 1)
	if n, err := r.nc.Read(buf); err != io.EOF {
		r.t.Errorf("read = %d %q, %v; want EOF", n, buf[:n], err)
	}
}

// summarize renders a backend message as a short string, one letter after
// the protocol's message type.
func summarize(msg pgproto3.BackendMessage) string {
	switch m := msg.(type) {
	case *pgproto3.AuthenticationOk:
		return "R"
	case *pgproto3.ParameterStatus:
		return "S " + m.Name + "=" + m.Value
	case *pgproto3.BackendKeyData:
		return fmt.Sprintf("K %d", len(m.SecretKey))
	case *pgproto3.NegotiateProtocolVersion:
		return fmt.Sprintf("v %d %v", m.NewestMinorProtocol, m.UnrecognizedOptions)
	case *pgproto3.ReadyForQuery:
		return "Z " + string(m.TxStatus)
	case *pgproto3.ParseComplete:
		return "1"
	case *pgproto3.BindComplete:
		return "2"
	case *pgproto3.CloseComplete:
		return "3"
	case *pgproto3.NoData:
		return "n"
	case *pgproto3.EmptyQueryResponse:
		return "I"
	case *pgproto3.PortalSuspended:
		return "s"
	case *pgproto3.CommandComplete:
		return "C " + string(m.CommandTag)
	case *pgproto3.ErrorResponse:
		return "E " + m.Severity + " " + m.Code
	case *pgproto3.NoticeResponse:
		return "N " + m.Severity + " " + m.Code + " " + m.Message
	case *pgproto3.ParameterDescription:
		return fmt.Sprintf("t %v", m.ParameterOIDs)
	case *pgproto3.RowDescription:
		var fs []string
		for _, f := range m.Fields {
			fs = append(fs, fmt.Sprintf("%s:%d:%d", f.Name, f.DataTypeOID, f.Format))
		}
		return "T " + strings.Join(fs, ",")
	case *pgproto3.DataRow:
		var vs []string
		for _, v := range m.Values {
			vs = append(vs, showValue(v))
		}
		return "D " + strings.Join(vs, "|")
	}
	return fmt.Sprintf("%T", msg)
}

// showValue prints a value as text when it is printable and as hex
// otherwise (binary format).
func showValue(v []byte) string {
	if v == nil {
		return "NULL"
	}
	for _, r := range string(v) {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			return "0x" + hex.EncodeToString(v)
		}
	}
	return string(v)
}

func be16(v int16) []byte   { return binary.BigEndian.AppendUint16(nil, uint16(v)) }
func be32(v int32) []byte   { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
func be64(v int64) []byte   { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
func f32(v float32) []byte  { return binary.BigEndian.AppendUint32(nil, math.Float32bits(v)) }
func f64(v float64) []byte  { return binary.BigEndian.AppendUint64(nil, math.Float64bits(v)) }
func hexOf(b []byte) string { return "0x" + hex.EncodeToString(b) }

func TestProtocol(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b)

	type step struct {
		send []pgproto3.FrontendMessage
		want []string
	}
	p := func(name, sql string, oids ...uint32) *pgproto3.Parse {
		return &pgproto3.Parse{Name: name, Query: sql, ParameterOIDs: oids}
	}
	bind := func(portal, stmt string, formats []int16, params ...[]byte) *pgproto3.Bind {
		return &pgproto3.Bind{DestinationPortal: portal, PreparedStatement: stmt, ParameterFormatCodes: formats, Parameters: params}
	}
	bindResults := func(stmt string, formats ...int16) *pgproto3.Bind {
		return &pgproto3.Bind{PreparedStatement: stmt, ResultFormatCodes: formats}
	}
	exec := func(portal string, maxRows uint32) *pgproto3.Execute {
		return &pgproto3.Execute{Portal: portal, MaxRows: maxRows}
	}
	descS := func(name string) *pgproto3.Describe { return &pgproto3.Describe{ObjectType: 'S', Name: name} }
	descP := func(name string) *pgproto3.Describe { return &pgproto3.Describe{ObjectType: 'P', Name: name} }
	q := func(sql string) *pgproto3.Query { return &pgproto3.Query{String: sql} }
	sync := &pgproto3.Sync{}
	bin := []int16{1}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	tsMicros := (ts.Unix()-946684800)*1_000_000 + 600000
	t1Micros := (typedT1.Unix() - 946684800) * 1_000_000
	t2Micros := (typedT2.Unix()-946684800)*1_000_000 + 123456

	tests := []struct {
		name  string
		steps []step
	}{
		{"empty simple query", []step{
			{[]pgproto3.FrontendMessage{q("")}, []string{"I", "Z I"}},
			{[]pgproto3.FrontendMessage{q(" ; ;")}, []string{"I", "Z I"}},
		}},
		{"simple query text encoding", []step{
			{[]pgproto3.FrontendMessage{q("SELECT typed")}, []string{
				"T id:20:0,score:701:0,name:25:0,ok:16:0,at:1114:0,attz:1184:0",
				"D 1|2.5|alice|t|2026-01-01 00:00:01|2026-01-01 00:00:01+00",
				"D -7|1e+20|NULL|f|1999-12-31 23:59:59.123456|1999-12-31 23:59:59.123456+00",
				"C SELECT 2", "Z I",
			}},
			{[]pgproto3.FrontendMessage{q("SELECT emptystr")}, []string{"T x:25:0", "D ", "D NULL", "C SELECT 2", "Z I"}},
		}},
		{"unencodable value keeps the connection", []step{
			{[]pgproto3.FrontendMessage{q("SELECT unencodable; CREATE SOURCE z")}, []string{"T x:25:0", "D ok", "E ERROR XX000", "Z I"}},
			{[]pgproto3.FrontendMessage{p("", "SELECT unencodable"), bindResults(""), exec("", 0), sync}, []string{"1", "2", "D ok", "E ERROR XX000", "Z I"}},
			{[]pgproto3.FrontendMessage{q("CREATE SOURCE z")}, []string{"C CREATE SOURCE", "Z I"}},
			// Inside a transaction block portals outlive Sync; a failed one
			// cannot be run again.
			{[]pgproto3.FrontendMessage{q("BEGIN")}, []string{"C BEGIN", "Z T"}},
			{[]pgproto3.FrontendMessage{p("u", "SELECT unencodable"), p("s", "SELECT * FROM missing"), sync}, []string{"1", "E ERROR 42P01", "Z T"}},
			{[]pgproto3.FrontendMessage{bind("pu", "u", nil), exec("pu", 0), sync}, []string{"2", "D ok", "E ERROR XX000", "Z T"}},
			{[]pgproto3.FrontendMessage{exec("pu", 0), sync}, []string{"C SELECT 0", "Z T"}},
			{[]pgproto3.FrontendMessage{p("f", "SELECT failing"), bind("pf", "f", nil), exec("pf", 0), sync}, []string{"1", "2", "E ERROR 22012", "Z T"}},
			{[]pgproto3.FrontendMessage{exec("pf", 0), sync}, []string{"E ERROR 55000", "Z T"}},
			{[]pgproto3.FrontendMessage{q("ROLLBACK")}, []string{"C ROLLBACK", "Z I"}},
		}},
		{"notices come before the rows, once per run", []step{
			{[]pgproto3.FrontendMessage{q("SELECT noticed")},
				[]string{"N NOTICE 00000 first", "N NOTICE 00000 second", "T n:20:0", "D 1", "D 2", "C SELECT 2", "Z I"}},
			{[]pgproto3.FrontendMessage{p("", "SELECT noticed"), bindResults(""), exec("", 1), exec("", 1), exec("", 1), sync},
				[]string{"1", "2", "N NOTICE 00000 first", "N NOTICE 00000 second", "D 1", "s", "D 2", "C SELECT 1", "C SELECT 0", "Z I"}},
		}},
		{"transaction status", []step{
			{[]pgproto3.FrontendMessage{q("BEGIN")}, []string{"C BEGIN", "Z T"}},
			{[]pgproto3.FrontendMessage{q("SELECT * FROM missing")}, []string{"E ERROR 42P01", "Z T"}},
			{[]pgproto3.FrontendMessage{p("", "COMMIT"), bindResults(""), exec("", 0), sync}, []string{"1", "2", "C COMMIT", "Z I"}},
			{[]pgproto3.FrontendMessage{q("BEGIN; ROLLBACK")}, []string{"C BEGIN", "C ROLLBACK", "Z I"}},
		}},
		{"extended error skips to Sync", []step{
			{[]pgproto3.FrontendMessage{p("", "GARBAGE"), bindResults(""), descP(""), exec("", 0), q("CREATE SOURCE skipped"), sync},
				[]string{"E ERROR 42601", "Z I"}},
			{[]pgproto3.FrontendMessage{p("", "SELECT three"), bindResults(""), exec("", 0), sync},
				[]string{"1", "2", "D 1", "D 2", "D 3", "C SELECT 3", "Z I"}},
		}},
		{"describe statement", []step{
			{[]pgproto3.FrontendMessage{p("s1", "SELECT $1::int8"), descS("s1"), p("s2", "SELECT $1"), descS("s2"),
				p("s3", "CREATE SOURCE x"), descS("s3"), p("s4", "SELECT $1", 25), descS("s4"), sync},
				[]string{"1", "t [20]", "T echo:20:0", "1", "t [0]", "T echo:25:0", "1", "t []", "n", "1", "t [25]", "T echo:25:0", "Z I"}},
		}},
		{"describe portal uses bound formats and runs once", []step{
			{[]pgproto3.FrontendMessage{p("", "SELECT three"), bindResults("", 1), descP(""), exec("", 0), sync},
				[]string{"1", "2", "T n:20:1", "D " + hexOf(be64(1)), "D " + hexOf(be64(2)), "D " + hexOf(be64(3)), "C SELECT 3", "Z I"}},
		}},
		{"binary results", []step{
			{[]pgproto3.FrontendMessage{p("", "SELECT typed"), bindResults("", 1), exec("", 0), sync}, []string{"1", "2",
				"D " + strings.Join([]string{hexOf(be64(1)), hexOf(f64(2.5)), "alice", "0x01", hexOf(be64(t1Micros)), hexOf(be64(t1Micros))}, "|"),
				"D " + strings.Join([]string{hexOf(be64(-7)), hexOf(f64(1e20)), "NULL", "0x00", hexOf(be64(t2Micros)), hexOf(be64(t2Micros))}, "|"),
				"C SELECT 2", "Z I"}},
			{[]pgproto3.FrontendMessage{p("", "SELECT typed"), bindResults("", 0, 1, 0, 1, 0, 0), exec("", 0), sync}, []string{"1", "2",
				"D 1|" + hexOf(f64(2.5)) + "|alice|0x01|2026-01-01 00:00:01|2026-01-01 00:00:01+00",
				"D -7|" + hexOf(f64(1e20)) + "|NULL|0x00|1999-12-31 23:59:59.123456|1999-12-31 23:59:59.123456+00",
				"C SELECT 2", "Z I"}},
		}},
		{"binary parameters", []step{
			{[]pgproto3.FrontendMessage{
				p("i2", "SELECT $1", 21), bind("", "i2", bin, be16(-3)), exec("", 0),
				p("i4", "SELECT $1", 23), bind("", "i4", bin, be32(70000)), exec("", 0),
				p("i8", "SELECT $1", 20), bind("", "i8", bin, be64(math.MinInt64)), exec("", 0),
				p("f4", "SELECT $1", 700), bind("", "f4", bin, f32(0.1)), exec("", 0),
				p("f8", "SELECT $1", 701), bind("", "f8", bin, f64(1e15)), exec("", 0),
				p("b", "SELECT $1", 16), bind("", "b", bin, []byte{1}), exec("", 0),
				p("ts", "SELECT $1", 1114), bind("", "ts", bin, be64(tsMicros)), exec("", 0),
				p("tz", "SELECT $1", 1184), bind("", "tz", bin, be64(tsMicros)), exec("", 0),
				p("u", "SELECT $1", 705), bind("", "u", bin, []byte("raw")), exec("", 0),
				bind("", "u", bin, nil), exec("", 0),
				bind("", "u", nil, []byte("")), exec("", 0),
				sync},
				[]string{"1", "2", "D -3", "C SELECT 1", "1", "2", "D 70000", "C SELECT 1", "1", "2", "D -9223372036854775808", "C SELECT 1",
					"1", "2", "D 0.1", "C SELECT 1", "1", "2", "D 1e+15", "C SELECT 1", "1", "2", "D t", "C SELECT 1",
					"1", "2", "D 2026-01-02 03:04:05.6", "C SELECT 1", "1", "2", "D 2026-01-02 03:04:05.6+00", "C SELECT 1",
					"1", "2", "D raw", "C SELECT 1", "2", "D NULL", "C SELECT 1", "2", "D ", "C SELECT 1", "Z I"}},
			{[]pgproto3.FrontendMessage{p("", "SELECT $1::int8"), bind("", "", bin, be64(41)), exec("", 0), sync},
				[]string{"1", "2", "D 41", "C SELECT 1", "Z I"}},
			{[]pgproto3.FrontendMessage{p("", "SELECT $1::int8"), bind("", "", bin, be32(41)), exec("", 0), sync},
				[]string{"1", "E ERROR 22P03", "Z I"}},
		}},
		{"max rows suspends the portal", []step{
			{[]pgproto3.FrontendMessage{p("", "SELECT three"), bindResults(""), exec("", 2), exec("", 2), exec("", 0), sync},
				[]string{"1", "2", "D 1", "D 2", "s", "D 3", "C SELECT 1", "C SELECT 0", "Z I"}},
		}},
		{"named objects", []step{
			{[]pgproto3.FrontendMessage{p("a", "SELECT three"), p("a", "SELECT three"), sync}, []string{"1", "E ERROR 42P05", "Z I"}},
			{[]pgproto3.FrontendMessage{bind("p1", "a", nil), bind("p1", "a", nil), sync}, []string{"2", "E ERROR 42P03", "Z I"}},
			{[]pgproto3.FrontendMessage{bind("p1", "a", nil), exec("p1", 1), sync}, []string{"2", "D 1", "s", "Z I"}},
			// Portals end with the implicit transaction at Sync.
			{[]pgproto3.FrontendMessage{exec("p1", 0), sync}, []string{"E ERROR 34000", "Z I"}},
			{[]pgproto3.FrontendMessage{bind("p2", "a", nil), &pgproto3.Close{ObjectType: 'S', Name: "a"}, exec("p2", 0), sync},
				[]string{"2", "3", "E ERROR 34000", "Z I"}},
			{[]pgproto3.FrontendMessage{bind("", "a", nil), sync}, []string{"E ERROR 26000", "Z I"}},
			{[]pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'P', Name: "nope"}, &pgproto3.Close{ObjectType: 'S', Name: "nope"}, sync},
				[]string{"3", "3", "Z I"}},
		}},
		{"prepare and execute", []step{
			{[]pgproto3.FrontendMessage{q(`PREPARE e(bigint) AS SELECT $1`)}, []string{"C PREPARE", "Z I"}},
			{[]pgproto3.FrontendMessage{q(`EXECUTE e(42); execute E('it''s'); EXECUTE e (NULL)`)}, []string{
				"T echo:25:0", "D 42", "C SELECT 1", "T echo:25:0", "D it's", "C SELECT 1", "T echo:25:0", "D NULL", "C SELECT 1", "Z I"}},
			{[]pgproto3.FrontendMessage{q(`PREPARE "T s" (timestamp) AS SELECT $1::timestamp; EXECUTE "T s"(TIMESTAMP '2026-01-02 03:04:05.5')`)},
				[]string{"C PREPARE", "T echo:1114:0", "D 2026-01-02 03:04:05.5", "C SELECT 1", "Z I"}},
			// One namespace with protocol-level statements, as in PostgreSQL.
			{[]pgproto3.FrontendMessage{bind("", "e", nil, []byte("7")), exec("", 0), sync}, []string{"2", "D 7", "C SELECT 1", "Z I"}},
			{[]pgproto3.FrontendMessage{q("EXECUTE e")}, []string{"E ERROR 42601", "Z I"}},
			{[]pgproto3.FrontendMessage{q("EXECUTE e(now())")}, []string{"E ERROR 0A000", "Z I"}},
			{[]pgproto3.FrontendMessage{q("PREPARE e AS SELECT three")}, []string{"E ERROR 42P05", "Z I"}},
			{[]pgproto3.FrontendMessage{q("PREPARE j(jsonb) AS SELECT $1")}, []string{"E ERROR 42704", "Z I"}},
			{[]pgproto3.FrontendMessage{q("PREPARE m AS SELECT * FROM missing")}, []string{"E ERROR 42P01", "Z I"}},
			{[]pgproto3.FrontendMessage{q("DEALLOCATE e; EXECUTE e(1)")}, []string{"C DEALLOCATE", "E ERROR 26000", "Z I"}},
		}},
		{"deallocate", []step{
			{[]pgproto3.FrontendMessage{p("a", "SELECT three"), p("Mixed", "SELECT three"), p("b", "SELECT three"), bind("pa", "a", nil), sync},
				[]string{"1", "1", "1", "2", "Z I"}},
			{[]pgproto3.FrontendMessage{q(`DEALLOCATE a; deallocate prepare "Mixed"`)}, []string{"C DEALLOCATE", "C DEALLOCATE", "Z I"}},
			{[]pgproto3.FrontendMessage{bind("", "a", nil), sync}, []string{"E ERROR 26000", "Z I"}},
			{[]pgproto3.FrontendMessage{q("DEALLOCATE a")}, []string{"E ERROR 26000", "Z I"}},
			{[]pgproto3.FrontendMessage{q("DEALLOCATE ALL")}, []string{"C DEALLOCATE ALL", "Z I"}},
			{[]pgproto3.FrontendMessage{bind("", "b", nil), sync}, []string{"E ERROR 26000", "Z I"}},
		}},
		{"result must match its description", []step{
			{[]pgproto3.FrontendMessage{p("", "SELECT shapeshift"), bindResults(""), exec("", 0), sync}, []string{"1", "2", "E ERROR 0A000", "Z I"}},
			{[]pgproto3.FrontendMessage{p("", "SHOW sneaky"), bindResults(""), exec("", 0), sync}, []string{"1", "2", "E ERROR 0A000", "Z I"}},
			// The simple protocol describes the result it actually got.
			{[]pgproto3.FrontendMessage{q("SELECT shapeshift")}, []string{"T a:25:0,b:25:0", "D 1|2", "C SELECT 1", "Z I"}},
		}},
		{"bind errors", []step{
			{[]pgproto3.FrontendMessage{p("e", "SELECT $1::int8"), bind("", "e", nil), sync}, []string{"1", "E ERROR 08P01", "Z I"}},
			{[]pgproto3.FrontendMessage{bind("", "e", []int16{0, 1}, []byte("1")), sync}, []string{"E ERROR 08P01", "Z I"}},
			{[]pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "e", Parameters: [][]byte{[]byte("1")}, ResultFormatCodes: []int16{2}}, sync},
				[]string{"E ERROR 22023", "Z I"}},
			{[]pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "e", Parameters: [][]byte{[]byte("1")}, ResultFormatCodes: []int16{1, 1}}, sync},
				[]string{"E ERROR 08P01", "Z I"}},
			{[]pgproto3.FrontendMessage{p("", "SELECT $1", 1700), bind("", "", bin, []byte{0}), sync}, []string{"1", "E ERROR 0A000", "Z I"}},
			{[]pgproto3.FrontendMessage{bind("", "e", nil, []byte("5")), exec("", 0), sync}, []string{"2", "D 5", "C SELECT 1", "Z I"}},
		}},
		{"parse errors", []step{
			{[]pgproto3.FrontendMessage{p("", "CREATE SOURCE a; CREATE SOURCE b"), sync}, []string{"E ERROR 42601", "Z I"}},
			{[]pgproto3.FrontendMessage{p("", "SELECT * FROM missing"), descS(""), sync}, []string{"E ERROR 42P01", "Z I"}},
			{[]pgproto3.FrontendMessage{descS("nope"), sync}, []string{"E ERROR 26000", "Z I"}},
			{[]pgproto3.FrontendMessage{descP("nope"), sync}, []string{"E ERROR 34000", "Z I"}},
		}},
		{"empty prepared statement", []step{
			{[]pgproto3.FrontendMessage{p("", "  "), descS(""), bindResults(""), descP(""), exec("", 0), sync},
				[]string{"1", "t []", "n", "2", "n", "I", "Z I"}},
		}},
		{"flush without sync", []step{
			{[]pgproto3.FrontendMessage{p("", "SELECT three"), &pgproto3.Flush{}}, nil},
			{[]pgproto3.FrontendMessage{sync}, []string{"Z I"}},
		}},
		{"ignored and unsupported messages", []step{
			{[]pgproto3.FrontendMessage{&pgproto3.CopyData{Data: []byte("x")}, &pgproto3.CopyDone{}, q("CREATE SOURCE a")},
				[]string{"C CREATE SOURCE", "Z I"}},
			{[]pgproto3.FrontendMessage{&pgproto3.FunctionCall{Function: 1, ResultFormatCode: 0}}, []string{"E ERROR 0A000", "Z I"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startedRaw(t, addr)
			for i, s := range tt.steps {
				if s.want == nil {
					// Only Flush was sent: exactly ParseComplete must arrive.
					r.send(s.send...)
					got := r.receiveUntil(func(pgproto3.BackendMessage) bool { return true })
					if !slices.Equal(got, []string{"1"}) {
						t.Errorf("step %d: got %q", i, got)
					}
					continue
				}
				if got := r.roundTrip(s.send...); !slices.Equal(got, s.want) {
					t.Errorf("step %d:\n got %q\nwant %q", i, got, s.want)
				}
			}
		})
	}

	if n := b.execCount("SELECT three"); n != 4 {
		// One run per executed Bind in the cases above (after the error,
		// described portal, suspended portal, named portal p1), never one
		// per Execute or Describe.
		t.Errorf("SELECT three ran %d times", n)
	}
	if n := b.execCount("CREATE SOURCE skipped") + b.execCount("CREATE SOURCE z") - 1; n != 0 {
		t.Errorf("statements after errors ran %d extra times", n)
	}
}

func TestProtocolParamsReachBackend(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b)
	r := startedRaw(t, addr)
	got := r.roundTrip(&pgproto3.Parse{Query: "SELECT $1"}, &pgproto3.Bind{Parameters: [][]byte{[]byte("x")}}, &pgproto3.Execute{}, &pgproto3.Sync{})
	if !slices.Equal(got, []string{"1", "2", "D x", "C SELECT 1", "Z I"}) {
		t.Fatalf("got %q", got)
	}
	if ps := b.params(); len(ps) != 1 || string(ps[0].Value) != "x" || ps[0].OID != 25 {
		t.Errorf("params = %+v", ps)
	}
}

func TestStartupVariants(t *testing.T) {
	b := newFakeBackend()
	_, addr := startServer(t, b)
	startup := func(version uint32, params map[string]string) *pgproto3.StartupMessage {
		return &pgproto3.StartupMessage{ProtocolVersion: version, Parameters: params}
	}
	user := map[string]string{"user": "alice"}

	t.Run("encryption requests are refused", func(t *testing.T) {
		for _, req := range []pgproto3.FrontendMessage{&pgproto3.SSLRequest{}, &pgproto3.GSSEncRequest{}} {
			r := dialRaw(t, addr)
			r.send(req)
			buf := make([]byte, 1)
			if _, err := io.ReadFull(r.nc, buf); err != nil || buf[0] != 'N' {
				t.Fatalf("%T answered %q, %v", req, buf, err)
			}
			got := r.roundTrip(startup(pgproto3.ProtocolVersion30, user))
			if got[0] != "R" || got[len(got)-1] != "Z I" {
				t.Errorf("%T then startup: %q", req, got)
			}
		}
	})

	t.Run("parameter status", func(t *testing.T) {
		r := dialRaw(t, addr)
		got := r.roundTrip(startup(pgproto3.ProtocolVersion30, user))
		want := []string{"R", "S server_version=16.0 (TurbineSQL)", "S server_encoding=UTF8", "S client_encoding=UTF8",
			"S DateStyle=ISO, MDY", "S integer_datetimes=on", "S standard_conforming_strings=on", "S TimeZone=UTC",
			"S application_name=", "S is_superuser=off", "S session_authorization=alice", "S IntervalStyle=postgres",
			"K 4", "Z I"}
		if !slices.Equal(got, want) {
			t.Errorf("got %q", got)
		}
	})

	t.Run("protocol 3.2 is negotiated down", func(t *testing.T) {
		r := dialRaw(t, addr)
		got := r.roundTrip(startup(pgproto3.ProtocolVersion32, map[string]string{"user": "alice", "_pq_.x": "1"}))
		if got[0] != "v 0 [_pq_.x]" || got[1] != "R" || got[len(got)-1] != "Z I" {
			t.Errorf("got %q", got)
		}
	})

	t.Run("cancel request closes", func(t *testing.T) {
		r := dialRaw(t, addr)
		r.send(&pgproto3.CancelRequest{ProcessID: 1, SecretKey: []byte{1, 2, 3, 4}})
		r.expectClosed()
	})

	t.Run("missing user is fatal", func(t *testing.T) {
		r := dialRaw(t, addr)
		r.send(startup(pgproto3.ProtocolVersion30, map[string]string{"database": "db"}))
		got := r.receiveUntil(func(m pgproto3.BackendMessage) bool { return true })
		if !slices.Equal(got, []string{"E FATAL 28000"}) {
			t.Errorf("got %q", got)
		}
		r.expectClosed()
	})

	t.Run("garbage message is fatal", func(t *testing.T) {
		r := startedRaw(t, addr)
		if _, err := r.nc.Write([]byte{'?', 0, 0, 0, 4}); err != nil {
			t.Fatal(err)
		}
		got := r.receiveUntil(func(m pgproto3.BackendMessage) bool { return true })
		if !slices.Equal(got, []string{"E FATAL 08P01"}) {
			t.Errorf("got %q", got)
		}
		r.expectClosed()
	})

	t.Run("terminate", func(t *testing.T) {
		r := startedRaw(t, addr)
		r.send(&pgproto3.Terminate{})
		r.expectClosed()
	})

	// Every session that was opened has been closed once its connection
	// ended; give the server goroutines a moment to finish.
	deadline := time.Now().Add(5 * time.Second)
	for {
		sessions, closed := b.counts()
		if sessions == closed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions=%d closed=%d", sessions, closed)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestServerOptions(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logs}, nil))
	_, addr := startServer(t, newFakeBackend(),
		pgwire.WithMaxMessageSize(1024),
		pgwire.WithStartupTimeout(100*time.Millisecond),
		pgwire.WithLogger(logger))

	t.Run("message size limit", func(t *testing.T) {
		r := startedRaw(t, addr)
		r.send(&pgproto3.Query{String: "SELECT '" + strings.Repeat("x", 2000) + "'"})
		got := r.receiveUntil(func(pgproto3.BackendMessage) bool { return true })
		if !slices.Equal(got, []string{"E FATAL 08P01"}) {
			t.Errorf("got %q", got)
		}
		r.expectClosed()
	})

	t.Run("startup timeout", func(t *testing.T) {
		r := dialRaw(t, addr)
		r.expectClosed()
	})

	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "pgwire: connection failed") {
		t.Errorf("protocol violation not logged: %s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
