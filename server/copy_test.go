package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/turbinesql/turbinesql/internal/testenv"
	"github.com/turbinesql/turbinesql/state"
	"github.com/twmb/franz-go/pkg/kgo"
)

// copySource is the source the COPY tests load: every column type, keyed
// by k over 4 partitions, so placement can be checked row by row.
const copySource = `CREATE SOURCE cp_src (k TEXT, n BIGINT, x DOUBLE, b BOOLEAN, note TEXT, ts TIMESTAMP,
	WATERMARK FOR ts AS ts) WITH (topic = 'cp_src', partitions = 4, partition_key = 'k', partition_hash = 'murmur2')`

func startCopyServer(ctx context.Context, t *testing.T) (*Server, *pgx.Conn) {
	t.Helper()
	if testBrokers() != "" {
		isolateTopics(t)
	}
	srv := startTestServer(t, t.TempDir())
	t.Cleanup(func() { srv.Close() })
	conn := connect(ctx, t, srv)
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, copySource); err != nil {
		t.Fatal(err)
	}
	return srv, conn
}

// copyRecord is one record of cp_src's topic as a Kafka consumer sees it.
type copyRecord struct {
	key       []byte
	partition int32
	value     map[string]any
}

func copyTopic(ctx context.Context, t *testing.T, srv *Server) []copyRecord {
	t.Helper()
	var out []copyRecord
	err := srv.kafka.ReadAll(ctx, "cp_src", func(r *kgo.Record) error {
		rec := copyRecord{key: r.Key, partition: r.Partition}
		if err := json.Unmarshal(r.Value, &rec.value); err != nil {
			return fmt.Errorf("partition %d offset %d: %s: %w", r.Partition, r.Offset, r.Value, err)
		}
		out = append(out, rec)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkPlacement checks what INSERT guarantees of every record: a keyed
// row carries its key as text and sits on murmur2's partition for it; a
// NULL key is a null Kafka key.
func checkPlacement(t *testing.T, recs []copyRecord) {
	t.Helper()
	for _, r := range recs {
		k, isText := r.value["k"].(string)
		switch {
		case r.value["k"] == nil:
			if r.key != nil {
				t.Errorf("NULL k but key %q: %v", r.key, r.value)
			}
		case !isText:
			t.Errorf("k is %T: %v", r.value["k"], r.value)
		case r.key == nil || string(r.key) != k:
			t.Errorf("k %q but key %q (nil %v)", k, r.key, r.key == nil)
		case r.partition != state.PartitionFor(r.key, 4):
			t.Errorf("key %q on partition %d; murmur2 (and INSERT) puts it on %d", k, r.partition, state.PartitionFor(r.key, 4))
		}
	}
}

func ts(s string) time.Time {
	v, err := time.Parse("2006-01-02 15:04:05", s)
	if err != nil {
		panic(err)
	}
	return v
}

// TestCopyFromPsql loads a source with psql's \copy from a text file and
// from CSV files (header, quotes, a quoted newline, NULLs, other options
// in both spellings), as a user would, then reads the rows back with
// SELECT and checks each record's key and partition against murmur2's, as
// INSERT places them.
func TestCopyFromPsql(t *testing.T) {
	psql := testenv.Psql(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, conn := startCopyServer(ctx, t)
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	host, port, _ := strings.Cut(srv.PGAddr(), ":")
	run := func(cmd string) string {
		t.Helper()
		c := exec.CommandContext(ctx, psql, "-X", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose",
			"-h", host, "-p", port, "-U", "turbine", "-d", "turbine", "-c", cmd)
		c.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=10")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("psql -c %s: %v\n%s", cmd, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	runFail := func(cmd string) string {
		t.Helper()
		c := exec.CommandContext(ctx, psql, "-X", "-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose",
			"-h", host, "-p", port, "-U", "turbine", "-d", "turbine", "-c", cmd)
		c.Env = append(os.Environ(), "PGCONNECT_TIMEOUT=10")
		out, err := c.CombinedOutput()
		if err == nil {
			t.Fatalf("psql -c %s succeeded:\n%s", cmd, out)
		}
		return string(out)
	}

	text := write("rows.txt", strings.Join([]string{
		"alpha\t1\t1.5\tt\tplain\t2026-01-01 00:00:01",
		// \N is NULL; \t \\ \n are a tab, a backslash and a newline.
		`beta` + "\t" + `\N` + "\t" + `\N` + "\tfalse\t" + `tab\there\\and\nnewline` + "\t2026-01-01 00:00:02",
		// An escaped backslash before N is the text \N, not NULL.
		`\\N` + "\t3\t-2.25\ttrue\t\\N\t2026-01-01 00:00:03",
		`\N` + "\t4\t0\tf\tno key\t2026-01-01 00:00:04",
	}, "\n")+"\n")
	if got := run(`\copy cp_src from '` + text + `'`); got != "COPY 4" {
		t.Fatalf("text \\copy: %q", got)
	}
	csv := write("rows.csv", "k,n,x,b,note,ts\r\n"+
		"gamma,5,0.5,yes,\"quoted, with comma\",2026-01-01 00:00:05\r\n"+
		"\"delta\",,,f,\"line one\r\nline two\",2026-01-01 00:00:06\r\n"+
		"\"\",7,1e3,0,\"\",2026-01-01 00:00:07\r\n"+
		"eps,8,2,true,\"say \"\"hi\"\"\",2026-01-01 00:00:08\r\n")
	if got := run(`\copy cp_src from '` + csv + `' csv header`); got != "COPY 4" {
		t.Fatalf("csv \\copy: %q", got)
	}
	semi := write("cols.csv", "ts;k;n\n2026-01-01 00:00:09;zeta;NA\n'2026-01-01 00:00:10';'eta;x';11\n")
	if got := run(`\copy cp_src (ts, k, n) from '` + semi + `' with (format csv, delimiter ';', null 'NA', quote '''', header true)`); got != "COPY 2" {
		t.Fatalf("csv \\copy with options: %q", got)
	}

	want := [][]any{
		{"alpha", int64(1), 1.5, true, "plain", ts("2026-01-01 00:00:01")},
		{"beta", nil, nil, false, "tab\there\\and\nnewline", ts("2026-01-01 00:00:02")},
		{`\N`, int64(3), -2.25, true, nil, ts("2026-01-01 00:00:03")},
		{nil, int64(4), 0.0, false, "no key", ts("2026-01-01 00:00:04")},
		{"gamma", int64(5), 0.5, true, "quoted, with comma", ts("2026-01-01 00:00:05")},
		{"delta", nil, nil, false, "line one\r\nline two", ts("2026-01-01 00:00:06")},
		{"", int64(7), 1000.0, false, "", ts("2026-01-01 00:00:07")},
		{"eps", int64(8), 2.0, true, `say "hi"`, ts("2026-01-01 00:00:08")},
		{"zeta", nil, nil, nil, nil, ts("2026-01-01 00:00:09")},
		{"eta;x", int64(11), nil, nil, nil, ts("2026-01-01 00:00:10")},
	}
	rows, err := conn.Query(ctx, `SELECT k, n, x, b, note, ts FROM cp_src ORDER BY ts`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("SELECT: %d rows, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if tm, ok := got[i][5].(time.Time); ok {
			got[i][5] = tm.UTC()
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("row %d: %#v\nwant %#v", i+1, got[i], want[i])
		}
	}
	recs := copyTopic(ctx, t, srv)
	if len(recs) != len(want) {
		t.Fatalf("topic: %d records, want %d", len(recs), len(want))
	}
	checkPlacement(t, recs)

	// A bad row: PostgreSQL's error, SQLSTATE and line in psql's own
	// output, and nothing of the file written.
	bad := write("bad.csv", "k,n,x,b,note,ts\nok,1,1,t,,2026-01-01 00:01:00\nbad,x,1,t,,2026-01-01 00:01:01\n")
	out := runFail(`\copy cp_src from '` + bad + `' (format csv, header)`)
	for _, w := range []string{`ERROR:  22P02: invalid input syntax for type bigint: "x"`, `CONTEXT:  COPY cp_src, line 3, column n: "x"`} {
		if !strings.Contains(out, w) {
			t.Errorf("psql output lacks %q:\n%s", w, out)
		}
	}
	if n := len(copyTopic(ctx, t, srv)); n != len(want) {
		t.Fatalf("a refused \\copy wrote %d records", n-len(want))
	}
}

// TestCopyFromBadRows sends bad data with pgconn's CopyFrom (text and CSV
// as psql's \copy sends them) and checks each error: PostgreSQL's
// SQLSTATE and message, the line in its CONTEXT, and nothing written, not
// even the good rows before the bad one. The connection goes on working.
func TestCopyFromBadRows(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, conn := startCopyServer(ctx, t)
	pg := conn.PgConn()
	good := "a\t1\t1\tt\tx\t2026-01-01 00:00:01\n"
	for _, c := range []struct {
		name, stmt, data   string
		code, msg, context string
	}{
		{"bigint", `COPY cp_src FROM STDIN`, good + good + "c\tx\t1\tt\tx\t2026-01-01 00:00:03\n",
			"22P02", `invalid input syntax for type bigint: "x"`, `COPY cp_src, line 3, column n: "x"`},
		{"double", `COPY cp_src FROM STDIN`, "c\t1\tone\tt\tx\t2026-01-01 00:00:03\n",
			"22P02", `invalid input syntax for type double precision: "one"`, `COPY cp_src, line 1, column x: "one"`},
		{"boolean", `COPY cp_src (k, b, ts) FROM STDIN (FORMAT csv)`, "a,t,2026-01-01 00:00:01\nb,maybe,2026-01-01 00:00:01\n",
			"22P02", `invalid input syntax for type boolean: "maybe"`, `COPY cp_src, line 2, column b: "maybe"`},
		{"timestamp", `COPY cp_src (k, ts) FROM STDIN CSV HEADER`, "k,ts\na,2026-01-01 00:00:01\nb,yesterday-ish\n",
			"22007", `invalid input syntax for type timestamp: "yesterday-ish"`, `COPY cp_src, line 3, column ts: "yesterday-ish"`},
		{"missing", `COPY cp_src FROM STDIN (FORMAT csv)`, "a,1,1,t,x,2026-01-01 00:00:01\nb,2,2,t\n",
			"22P04", `missing data for column "note"`, `COPY cp_src, line 2: "b,2,2,t"`},
		{"extra", `COPY cp_src (k, ts) FROM STDIN`, "a\t2026-01-01 00:00:01\tmore\n",
			"22P04", `extra data after last expected column`, "COPY cp_src, line 1: \"a\t2026-01-01 00:00:01\tmore\""},
		{"null event time", `COPY cp_src FROM STDIN`, good + "b\t2\t2\tt\tx\t\\N\n",
			"23502", `null value in column "ts" of relation "cp_src" violates not-null constraint`, "COPY cp_src, line 2: \"b\t2\t2\tt\tx\t\\N\""},
		{"event time left out", `COPY cp_src (k, n) FROM STDIN WITH CSV`, "a,1\n",
			"23502", `null value in column "ts" of relation "cp_src" violates not-null constraint`, `COPY cp_src, line 1: "a,1"`},
		// A quoted line end counts as a line once the first row has
		// said how lines end (PostgreSQL 15 says line 2 and line 4 here).
		{"after a quoted newline in the first row", `COPY cp_src (k, note, n, ts) FROM STDIN (FORMAT csv)`,
			"a,\"two\nlines\",1,2026-01-01 00:00:01\nb,,zz,2026-01-01 00:00:01\n",
			"22P02", `invalid input syntax for type bigint: "zz"`, `COPY cp_src, line 2, column n: "zz"`},
		{"after a quoted newline", `COPY cp_src (k, note, n, ts) FROM STDIN (FORMAT csv)`,
			"a,x,1,2026-01-01 00:00:01\r\nb,\"two\nlines\r\nthree\",1,2026-01-01 00:00:01\r\nc,,zz,2026-01-01 00:00:01\r\n",
			"22P02", `invalid input syntax for type bigint: "zz"`, `COPY cp_src, line 4, column n: "zz"`},
		{"unterminated quote", `COPY cp_src (k, ts) FROM STDIN (FORMAT csv)`, "a,2026-01-01 00:00:01\n\"b,2026-01-01 00:00:01\n",
			"22P04", `unterminated CSV quoted field`, "COPY cp_src, line 3: \"\"b,2026-01-01 00:00:01\n\""},
		{"header match", `COPY cp_src (k, ts) FROM STDIN (FORMAT csv, HEADER match)`, "k,time\na,2026-01-01 00:00:01\n",
			"22P04", `column name mismatch in header line field 2: got "time", expected "ts"`, `COPY cp_src, line 1: "k,time"`},
		{"invalid utf8", `COPY cp_src (k, ts) FROM STDIN`, "\\xff\t2026-01-01 00:00:01\n",
			"22021", `invalid byte sequence for encoding "UTF8": 0xff`, "COPY cp_src, line 1: \"\\xff\t2026-01-01 00:00:01\""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := pg.CopyFrom(ctx, strings.NewReader(c.data), c.stmt)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) {
				t.Fatalf("%s: %v, want a PostgreSQL error", c.stmt, err)
			}
			if pe.Code != c.code || pe.Message != c.msg || pe.Where != c.context {
				t.Errorf("%s: %s %q CONTEXT %q\nwant %s %q CONTEXT %q", c.stmt, pe.Code, pe.Message, pe.Where, c.code, c.msg, c.context)
			}
			if recs := copyTopic(ctx, t, srv); len(recs) != 0 {
				t.Fatalf("a refused COPY wrote %d records", len(recs))
			}
		})
	}

	// Statements refused before any data: the target, the columns, the
	// options.
	for _, c := range []struct{ stmt, code, msg string }{
		{`COPY nosuch FROM STDIN`, "42P01", `relation "nosuch" does not exist`},
		{`COPY cp_src (k, nosuch) FROM STDIN`, "42703", `column "nosuch" of cp_src does not exist`},
		{`COPY cp_src (k, k) FROM STDIN`, "42701", `column "k" specified more than once`},
		{`COPY cp_src FROM '/etc/passwd'`, "0A000", `COPY cp_src FROM reads only STDIN: the server reads no files or programs`},
		{`COPY cp_src FROM STDIN (FORMAT xml)`, "22023", `COPY format "xml" not recognized`},
		{`COPY cp_src FROM STDIN (DELIMITER '||')`, "0A000", `COPY delimiter must be a single one-byte character`},
		{`COPY cp_src FROM STDIN (QUOTE '"')`, "0A000", `COPY quote available only in CSV mode`},
		{`COPY cp_src FROM STDIN (FORMAT csv, DELIMITER ',', DELIMITER ';')`, "42601", `conflicting or redundant options`},
		{`COPY cp_src FROM STDIN (BOGUS 1)`, "42601", `option "bogus" not recognized`},
		{`COPY cp_src FROM STDIN BINARY`, "0A000", `COPY FROM STDIN with FORMAT binary is not supported`},
	} {
		_, err := pg.CopyFrom(ctx, strings.NewReader(good), c.stmt)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != c.code || pe.Message != c.msg {
			t.Errorf("%s: %v, want %s %q", c.stmt, err, c.code, c.msg)
		}
	}

	// CopyFail from the client: 57014, nothing written.
	r := iotest.ErrReader(errors.New("the client gave up"))
	_, err := pg.CopyFrom(ctx, r, `COPY cp_src FROM STDIN`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "57014" || !strings.Contains(pe.Message, "the client gave up") {
		t.Errorf("CopyFail: %v, want 57014 naming the client's reason", err)
	}
	if recs := copyTopic(ctx, t, srv); len(recs) != 0 {
		t.Fatalf("refused COPYs wrote %d records", len(recs))
	}

	// The session is fine afterwards, and data cut into one-byte CopyData
	// messages (rows, \r\n and escapes split anywhere) reads the same as
	// in one piece.
	data := "k,n,x,b,note,ts\r\nq1,1,1,t,\"a\r\nb\",2026-01-01 00:00:01\r\n\"q\"\"2\",,,,\\N,2026-01-01 00:00:02\r\n\\.\r\nignored after the end marker\r\n"
	tag, err := pg.CopyFrom(ctx, iotest.OneByteReader(strings.NewReader(data)), `COPY cp_src FROM STDIN (FORMAT csv, HEADER true)`)
	if err != nil || tag.String() != "COPY 2" {
		t.Fatalf("COPY in one-byte pieces: %v %v", tag, err)
	}
	recs := copyTopic(ctx, t, srv)
	checkPlacement(t, recs)
	notes := map[string]any{}
	for _, r := range recs {
		notes[r.value["k"].(string)] = r.value["note"]
	}
	if want := map[string]any{"q1": "a\r\nb", `q"2`: `\N`}; !reflect.DeepEqual(notes, want) {
		t.Errorf("notes %q, want %q", notes, want)
	}
}

// TestCopyFromBinaryPgx: pgx's CopyFrom sends FORMAT binary, which is
// refused with 0A000 and a hint, before any data; nothing is written and
// the connection stays usable.
func TestCopyFromBinaryPgx(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, conn := startCopyServer(ctx, t)
	_, err := conn.CopyFrom(ctx, pgx.Identifier{"cp_src"}, []string{"k", "ts"},
		pgx.CopyFromRows([][]any{{"a", ts("2026-01-01 00:00:01")}}))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Message, "binary") || !strings.Contains(pe.Hint, "csv") {
		t.Fatalf("pgx CopyFrom: %v, want 0A000 refusing binary with a hint", err)
	}
	if n := len(copyTopic(ctx, t, srv)); n != 0 {
		t.Fatalf("wrote %d records", n)
	}
	var one int
	if err := conn.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil || one != 1 {
		t.Fatalf("after the refusal: %v", err)
	}
}

// TestCopyFromExtended runs COPY through the extended protocol as libpq
// (psycopg's copy) does: Parse, Bind, Describe, Execute and Sync at once,
// then the data, CopyDone and another Sync. The first Sync is ignored
// during the copy; the second gets ReadyForQuery. A CopyFail there fails
// the statement until the Sync.
func TestCopyFromExtended(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, _ := startCopyServer(ctx, t)
	pc, err := pgconn.Connect(ctx, "postgres://turbine@"+srv.PGAddr()+"/turbine?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	hj, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer hj.Conn.Close()
	fe := hj.Frontend
	if err := hj.Conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	send := func(msgs ...pgproto3.FrontendMessage) {
		t.Helper()
		for _, m := range msgs {
			fe.Send(m)
		}
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	until := func(stop func(pgproto3.BackendMessage) bool) []string {
		t.Helper()
		var got []string
		for {
			m, err := fe.Receive()
			if err != nil {
				t.Fatalf("receive after %v: %v", got, err)
			}
			switch m := m.(type) {
			case *pgproto3.CommandComplete:
				got = append(got, "CommandComplete "+string(m.CommandTag))
			case *pgproto3.ErrorResponse:
				got = append(got, "Error "+m.Code)
			default:
				got = append(got, strings.TrimPrefix(fmt.Sprintf("%T", m), "*pgproto3."))
			}
			if stop(m) {
				return got
			}
		}
	}
	copyStarted := func(m pgproto3.BackendMessage) bool {
		_, ok := m.(*pgproto3.CopyInResponse)
		_, bad := m.(*pgproto3.ErrorResponse)
		return ok || bad
	}
	ready := func(m pgproto3.BackendMessage) bool { _, ok := m.(*pgproto3.ReadyForQuery); return ok }
	start := []pgproto3.FrontendMessage{
		&pgproto3.Parse{Query: `COPY cp_src (k, ts) FROM STDIN WITH (FORMAT csv)`},
		&pgproto3.Bind{},
		&pgproto3.Describe{ObjectType: 'P'},
		&pgproto3.Execute{},
		&pgproto3.Sync{},
	}
	send(start...)
	if got, want := until(copyStarted), []string{"ParseComplete", "BindComplete", "NoData", "CopyInResponse"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	send(&pgproto3.CopyData{Data: []byte("e1,2026-01-01 00:00:01\ne2,")}, &pgproto3.CopyData{Data: []byte("2026-01-01 00:00:02\n")},
		&pgproto3.CopyDone{}, &pgproto3.Sync{})
	if got, want := until(ready), []string{"CommandComplete COPY 2", "ReadyForQuery"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if recs := copyTopic(ctx, t, srv); len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	} else {
		checkPlacement(t, recs)
	}

	send(start...)
	until(copyStarted)
	send(&pgproto3.CopyData{Data: []byte("e3,2026-01-01 00:00:03\n")}, &pgproto3.CopyFail{Message: "stop"}, &pgproto3.Sync{})
	if got, want := until(ready), []string{"Error 57014", "ReadyForQuery"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if recs := copyTopic(ctx, t, srv); len(recs) != 2 {
		t.Fatalf("the failed COPY wrote %d records", len(recs)-2)
	}
}

// TestCopyFromFeedsStreams: rows loaded by COPY are read by a stream like
// INSERT's: a local GROUP BY on the partition key counts each key once,
// on one partition, with the rows of a COPY and an INSERT together.
func TestCopyFromFeedsStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, conn := startCopyServer(ctx, t)
	if _, err := conn.Exec(ctx, `CREATE STREAM cp_counts WITH (strategy = 'local') AS SELECT k, COUNT(*) AS c, SUM(n) AS total FROM cp_src GROUP BY k`); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := range 40 {
		for j := range 2 {
			fmt.Fprintf(&b, "key%d,%d,2026-01-01 00:00:%02d\n", i, j+1, j)
		}
	}
	if tag, err := conn.PgConn().CopyFrom(ctx, strings.NewReader(b.String()), `COPY cp_src (k, n, ts) FROM STDIN (FORMAT csv)`); err != nil || tag.String() != "COPY 80" {
		t.Fatalf("COPY: %v %v", tag, err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO cp_src (k, n, ts) VALUES ('key7', 10, TIMESTAMP '2026-01-01 00:00:05')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `FLUSH`); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT k, c, total FROM cp_counts`)
	if err != nil {
		t.Fatal(err)
	}
	type count struct{ c, total int64 }
	got := map[string]count{}
	for rows.Next() {
		var k string
		var c count
		if err := rows.Scan(&k, &c.c, &c.total); err != nil {
			t.Fatal(err)
		}
		if _, dup := got[k]; dup {
			t.Errorf("key %s counted on two partitions", k)
		}
		got[k] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 40 {
		t.Fatalf("%d keys, want 40: %v", len(got), got)
	}
	for k, c := range got {
		want := count{2, 3}
		if k == "key7" {
			want = count{3, 13}
		}
		if c != want {
			t.Errorf("%s: %+v, want %+v", k, c, want)
		}
	}
}
