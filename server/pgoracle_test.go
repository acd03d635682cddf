//go:build pgoracle

package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestPGOracle runs every expression of testdata/pgoracle/exprs.txt in a
// real PostgreSQL (Debian's postgresql package: a cluster of its own,
// initdb into a temp dir, on a unix socket there) and in TurbineSQL over
// pgwire, and compares the text of the results, or the SQLSTATEs when
// PostgreSQL refuses the expression. Expressions marked "stream" run a
// third time through a continuous query, whose output topic is read back.
// A line marked "-- differs: why" is a known, documented difference: it
// must still differ (the test fails when it starts to agree, so the note
// goes).
//
// Run it with `make test-pg` (go test -tags pgoracle). Without PostgreSQL
// it fails. TURBINE_PGORACLE_REPORT=1 only
// counts and lists the disagreements (to measure a branch), never fails.
func TestPGOracle(t *testing.T) {
	exprs := readOracleExprs(t, "../testdata/pgoracle/exprs.txt")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	pg := startPostgres(ctx, t)
	_, _, ts := testSession(t, 5*time.Minute)

	pgSetup := []string{
		`SET TimeZone = 'UTC'`,
		`CREATE TEMP TABLE r (id BIGINT, i BIGINT, f DOUBLE PRECISION, t TEXT, ts TIMESTAMP)`,
		`INSERT INTO r VALUES ` + oracleRows,
	}
	for _, q := range pgSetup {
		if _, err := pg.Exec(ctx, q); err != nil {
			t.Fatalf("postgres: %s: %v", q, err)
		}
	}
	execAll(ctx, t, ts,
		`CREATE SOURCE r (id BIGINT, i BIGINT, f DOUBLE PRECISION, t TEXT, ts TIMESTAMP) WITH (topic = 'r', partitions = 1)`,
		`CREATE SOURCE rs (id BIGINT, i BIGINT, f DOUBLE PRECISION, t TEXT, ts TIMESTAMP) WITH (topic = 'rs', partitions = 2, partition_key = 'id')`,
		`INSERT INTO r VALUES `+oracleRows,
		`FLUSH`)

	report := os.Getenv("TURBINE_PGORACLE_REPORT") != ""
	bad := func(format string, args ...any) {
		t.Helper()
		if report {
			t.Logf(format, args...)
		} else {
			t.Errorf(format, args...)
		}
	}
	agree, total := 0, 0
	want := make([]string, len(exprs))
	var streamed []int // expressions for the stream: PostgreSQL answers them
	for k, e := range exprs {
		q := e.query()
		want[k] = runText(ctx, pg, q)
		got := runText(ctx, ts, q)
		total++
		same := got == want[k]
		switch {
		case same && e.differs == "":
			agree++
		case same:
			bad("%s:%d: %s: agrees with PostgreSQL now (%s): drop its \"-- differs\" note and the line in docs/functions.md", e.file, e.line, e.expr, oneLine(got))
		case e.differs == "":
			bad("%s:%d: %s\n  postgres:   %s\n  turbinesql: %s", e.file, e.line, q, oneLine(want[k]), oneLine(got))
		}
		if e.kind == "stream" && !strings.HasPrefix(want[k], "ERROR") {
			streamed = append(streamed, k)
		}
	}

	// The stream subset: one continuous query computing every expression
	// PostgreSQL answers, over a source fed after it starts.
	streamAgree := 0
	if len(streamed) > 0 {
		items := []string{"id"}
		for n, k := range streamed {
			items = append(items, fmt.Sprintf("%s AS c%d", exprs[k].expr, n))
		}
		create := `CREATE STREAM oracle_out AS SELECT ` + strings.Join(items, ", ") + ` FROM rs`
		if _, err := ts.Exec(ctx, create); err != nil {
			bad("stream: %s: %v", create, err)
		} else {
			execAll(ctx, t, ts, `INSERT INTO rs VALUES `+oracleRows, `FLUSH`)
			cols := make([][]string, len(streamed)) // per expression, its rows
			res, err := ts.Query(ctx, `SELECT * FROM oracle_out ORDER BY id`, pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				t.Fatalf("reading the stream's output: %v", err)
			}
			for res.Next() {
				raw := res.RawValues()
				for n := range streamed {
					cols[n] = append(cols[n], string(raw[0])+"|"+textOf(raw[n+1]))
				}
			}
			if err := res.Err(); err != nil {
				t.Fatalf("reading the stream's output: %v", err)
			}
			for n, k := range streamed {
				got := strings.Join(cols[n], "\n")
				e := exprs[k]
				if got == want[k] {
					streamAgree++
					continue
				}
				if e.differs == "" {
					bad("%s:%d: %s in a stream\n  postgres:   %s\n  turbinesql: %s", e.file, e.line, e.expr, oneLine(want[k]), oneLine(got))
				}
			}
		}
	}
	t.Logf("%d of %d expressions agree with PostgreSQL (bounded SELECT); %d of %d in a stream", agree, total, streamAgree, len(streamed))
}

// oracleRows are r's rows: every column NULL in one, a negative number, an
// empty string, non-ASCII text, a leap day, fractions of a second (to the
// millisecond: TIMESTAMP's precision here).
const oracleRows = `(1, 7, 2.5, 'hello world', TIMESTAMP '2024-03-15 13:45:30.123'),
	(2, -3, -0.75, 'Ab,cD,ef', TIMESTAMP '2023-12-31 23:59:59'),
	(3, 0, 100, '', TIMESTAMP '2024-02-29 00:00:00'),
	(4, NULL, NULL, NULL, NULL),
	(5, 12, 0.001, '  ünï cödé  ', TIMESTAMP '1999-01-03 06:07:08.5'),
	(6, 42, 7, 'The Quick Brown Fox', TIMESTAMP '2021-01-01 00:00:00')`

type oracleExpr struct {
	file    string
	line    int
	kind    string // const, rows, stream
	expr    string
	differs string // a known difference, documented
}

func (e oracleExpr) query() string {
	if e.kind == "const" {
		return "SELECT " + e.expr
	}
	return "SELECT id, " + e.expr + " FROM r ORDER BY id"
}

func readOracleExprs(t *testing.T, path string) []oracleExpr {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []oracleExpr
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kind, expr, ok := strings.Cut(line, "|")
		kind = strings.TrimSpace(kind)
		if !ok || (kind != "const" && kind != "rows" && kind != "stream") {
			t.Fatalf("%s:%d: want \"const | expr\", \"rows | expr\" or \"stream | expr\", got %q", path, n, line)
		}
		e := oracleExpr{file: filepath.Base(path), line: n, kind: kind, expr: strings.TrimSpace(expr)}
		if body, why, ok := strings.Cut(e.expr, "-- differs:"); ok {
			e.expr, e.differs = strings.TrimSpace(body), strings.TrimSpace(why)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("%s: only %d expressions", path, len(out))
	}
	return out
}

// runText runs q (simple protocol, so every value comes back as the text
// the server prints) and renders the rows, one line each, values joined by
// "|", NULL as NULL; or "ERROR <sqlstate>".
func runText(ctx context.Context, conn *pgx.Conn, q string) string {
	rows, err := conn.Query(ctx, q, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return oracleErr(err)
	}
	var lines []string
	for rows.Next() {
		raw := rows.RawValues()
		vals := make([]string, len(raw))
		for i, v := range raw {
			vals[i] = textOf(v)
		}
		lines = append(lines, strings.Join(vals, "|"))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return oracleErr(err)
	}
	return strings.Join(lines, "\n")
}

func textOf(v []byte) string {
	if v == nil {
		return "NULL"
	}
	return string(v)
}

func oracleErr(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return "ERROR " + pe.Code
	}
	return "ERROR " + err.Error()
}

func oneLine(s string) string {
	return strings.ReplaceAll(s, "\n", " ; ")
}

// startPostgres starts a PostgreSQL cluster of the test's own (initdb into
// a temp dir owned by the postgres user when the test runs as root, as CI
// does: the server refuses to run as root) listening only on a unix
// socket in that dir, and connects to it. The cluster is stopped and
// removed when the test ends.
func startPostgres(ctx context.Context, t *testing.T) *pgx.Conn {
	t.Helper()
	bin := postgresBin()
	if bin == "" {
		// The oracle is the point of this test (build tag pgoracle, run
		// only by make test-pg): without it there is nothing to check.
		t.Fatal("PostgreSQL (initdb, pg_ctl) not found: apt-get install postgresql")
	}
	dir, err := os.MkdirTemp("", "pgoracle-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var asUser []string // run the server's programs as this user
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs the postgres user (created by the postgresql package): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	run := func(args ...string) {
		t.Helper()
		args = append(asUser, args...)
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	port := freePort(t)
	data := filepath.Join(dir, "data")
	run(filepath.Join(bin, "initdb"), "-D", data, "-E", "UTF8", "--locale=C.UTF-8", "-A", "trust", "-U", "postgres")
	opts := fmt.Sprintf("-k %s -p %d -c listen_addresses='' -c fsync=off -c TimeZone=UTC", dir, port)
	run(filepath.Join(bin, "pg_ctl"), "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start")
	t.Cleanup(func() {
		args := append(asUser, filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop")
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Logf("pg_ctl stop: %v\n%s", err, out)
		}
	})
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", dir, port))
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("connect to postgres: %v\n%s", err, log)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// postgresBin finds the directory of initdb and pg_ctl: Debian keeps them
// in /usr/lib/postgresql/<version>/bin, off the PATH (the newest wins).
func postgresBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
