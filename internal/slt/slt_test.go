package slt

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// ---------------------------------------------------------------------------
// Parser

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Record
	}{
		{
			name: "statement ok with comments",
			in: `# leading comment
statement ok
CREATE TABLE t (a INT)
`,
			want: []Record{{Kind: KindStatementOK, Line: 2, SQL: "CREATE TABLE t (a INT)"}},
		},
		{
			name: "multi-line SQL and comment inside SQL",
			in:   "statement ok\nINSERT INTO t\n# comment\n  VALUES (1),\n  (2)\n\n\nstatement ok\nSELECT 1",
			want: []Record{
				{Kind: KindStatementOK, Line: 1, SQL: "INSERT INTO t\n  VALUES (1),\n  (2)"},
				{Kind: KindStatementOK, Line: 8, SQL: "SELECT 1"},
			},
		},
		{
			name: "CRLF and whitespace-only separator",
			in:   "statement ok\r\nSELECT 1\r\n   \r\nstatement ok\r\nSELECT 2\r\n",
			want: []Record{
				{Kind: KindStatementOK, Line: 1, SQL: "SELECT 1"},
				{Kind: KindStatementOK, Line: 4, SQL: "SELECT 2"},
			},
		},
		{
			name: "statement error without regex",
			in:   "statement error\nSELECT * FROM nope\n",
			want: []Record{{Kind: KindStatementError, Line: 1, SQL: "SELECT * FROM nope"}},
		},
		{
			name: "statement error regex collapses whitespace",
			in:   "statement error   relation  \"nope\" .*exist\nSELECT * FROM nope\n",
			want: []Record{{Kind: KindStatementError, Line: 1, SQL: "SELECT * FROM nope", ErrorRegex: `relation "nope" .*exist`}},
		},
		{
			name: "statement error sqlstate",
			in:   "statement error SQLSTATE 42P01\nSELECT * FROM nope\n",
			want: []Record{{Kind: KindStatementError, Line: 1, SQL: "SELECT * FROM nope", ErrorRegex: "SQLSTATE 42P01"}},
		},
		{
			name: "statement count",
			in:   "statement count 3\nINSERT INTO t VALUES (1),(2),(3)\n",
			want: []Record{{Kind: KindStatementCount, Line: 1, SQL: "INSERT INTO t VALUES (1),(2),(3)", Count: 3}},
		},
		{
			name: "statement retry",
			in:   "statement ok retry 3 backoff 100ms\nSELECT 1\n",
			want: []Record{{Kind: KindStatementOK, Line: 1, SQL: "SELECT 1", Retry: 3, RetryBackoff: 100 * time.Millisecond}},
		},
		{
			name: "query nosort default",
			in: `query IT
SELECT a, b FROM t
----
1 one
2 (empty)
3 NULL
`,
			want: []Record{{Kind: KindQuery, Line: 1, SQL: "SELECT a, b FROM t", Types: "IT", Sort: NoSort,
				Expected: []string{"1 one", "2 (empty)", "3 NULL"}}},
		},
		{
			name: "query rowsort with label and comment-like result",
			in:   "query T rowsort mylabel\nSELECT s FROM t\n----\n#hash\nb\n",
			want: []Record{{Kind: KindQuery, Line: 1, SQL: "SELECT s FROM t", Types: "T", Sort: RowSort, Label: "mylabel",
				Expected: []string{"#hash", "b"}}},
		},
		{
			name: "query valuesort",
			in:   "query II valuesort\nSELECT 1, 2\n----\n1\n2\n",
			want: []Record{{Kind: KindQuery, Line: 1, SQL: "SELECT 1, 2", Types: "II", Sort: ValueSort, Expected: []string{"1", "2"}}},
		},
		{
			name: "query label without sort mode",
			in:   "query I lbl\nSELECT 1\n----\n1\n",
			want: []Record{{Kind: KindQuery, Line: 1, SQL: "SELECT 1", Types: "I", Label: "lbl", Expected: []string{"1"}}},
		},
		{
			name: "query without results section and empty results",
			in:   "query I\nSELECT 1 WHERE false\n\nquery I\nSELECT 1 WHERE false\n----\n",
			want: []Record{
				{Kind: KindQuery, Line: 1, SQL: "SELECT 1 WHERE false", Types: "I"},
				{Kind: KindQuery, Line: 4, SQL: "SELECT 1 WHERE false", Types: "I"},
			},
		},
		{
			name: "query retry",
			in:   "query I rowsort retry 5 backoff 1s\nSELECT 1\n----\n1\n",
			want: []Record{{Kind: KindQuery, Line: 1, SQL: "SELECT 1", Types: "I", Sort: RowSort, Expected: []string{"1"},
				Retry: 5, RetryBackoff: time.Second}},
		},
		{
			name: "query error",
			in:   "query error division by zero\nSELECT 1/0\n",
			want: []Record{{Kind: KindQueryError, Line: 1, SQL: "SELECT 1/0", ErrorRegex: "division by zero"}},
		},
		{
			name: "control sortmode applies to later queries",
			in:   "query I\nSELECT 1\n----\n1\n\ncontrol sortmode rowsort\n\nquery I\nSELECT 1\n----\n1\n\nquery I nosort\nSELECT 1\n----\n1\n",
			want: []Record{
				{Kind: KindQuery, Line: 1, SQL: "SELECT 1", Types: "I", Sort: NoSort, Expected: []string{"1"}},
				{Kind: KindQuery, Line: 8, SQL: "SELECT 1", Types: "I", Sort: RowSort, Expected: []string{"1"}},
				{Kind: KindQuery, Line: 13, SQL: "SELECT 1", Types: "I", Sort: NoSort, Expected: []string{"1"}},
			},
		},
		{
			name: "halt, skipif, onlyif, hash-threshold",
			in: `hash-threshold 8

skipif turbinesql
onlyif postgres
statement ok
SELECT 1

onlyif sqlite
halt

halt
`,
			want: []Record{
				{Kind: KindStatementOK, Line: 5, SQL: "SELECT 1", Conditions: []Condition{{Engine: "turbinesql"}, {OnlyIf: true, Engine: "postgres"}}},
				{Kind: KindHalt, Line: 9, Conditions: []Condition{{OnlyIf: true, Engine: "sqlite"}}},
				{Kind: KindHalt, Line: 11},
			},
		},
		{
			name: "restart and sleep",
			in:   "restart\n\nsleep 200ms\n\n# done\n",
			want: []Record{
				{Kind: KindRestart, Line: 1},
				{Kind: KindSleep, Line: 3, Duration: 200 * time.Millisecond},
			},
		},
		{
			name: "empty file",
			in:   "# nothing here\n\n",
			want: nil,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse("t.slt", strings.NewReader(tc.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Parse mismatch\n got: %#v\nwant: %#v", got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // substring of the error, must include file:line
	}{
		{"unknown directive", "statement ok\nSELECT 1\n\nfrobnicate\n", "t.slt:4: unknown or unsupported directive"},
		{"mode line", "mode cockroach\n", "t.slt:1: unknown or unsupported directive"},
		{"unknown control", "\ncontrol substitution on\n", "t.slt:2: unsupported control directive"},
		{"bad sort mode in control", "control sortmode random\n", "t.slt:1: invalid sort mode"},
		{"statement without kind", "statement\nSELECT 1\n", "t.slt:1: statement needs"},
		{"statement bad kind", "statement maybe\nSELECT 1\n", "t.slt:1: statement needs ok, error or count"},
		{"statement trailing token", "statement ok extra\nSELECT 1\n", "t.slt:1: unexpected token \"extra\""},
		{"statement count not a number", "statement count x\nSELECT 1\n", "t.slt:1: invalid statement count"},
		{"statement count missing", "statement count\nSELECT 1\n", "t.slt:1: statement count needs a number"},
		{"statement with results", "statement ok\nSELECT 1\n----\n1\n", "t.slt:1: statement has a \"----\""},
		{"statement error multiline", "statement error\nSELECT 1\n----\nboom\n", "t.slt:1: multi-line expected errors"},
		{"missing SQL at EOF", "\n\nstatement ok\n", "t.slt:3: record has no SQL"},
		{"missing SQL before blank", "query I\n\nSELECT 1\n", "t.slt:1: record has no SQL"},
		{"invalid regex", "statement error foo(\nSELECT 1\n", "t.slt:1: invalid error regex"},
		{"bad retry", "query I retry 0 backoff 1s\nSELECT 1\n", "t.slt:1: invalid retry count"},
		{"malformed retry", "statement ok retry 2\nSELECT 1\n", "t.slt:1: malformed retry clause"},
		{"query too many tokens", "query I rowsort label extra\nSELECT 1\n", "t.slt:1: unexpected token \"extra\""},
		{"bad sleep", "sleep soon\n", "t.slt:1: invalid sleep duration"},
		{"sleep missing arg", "sleep\n", "t.slt:1: sleep needs exactly one duration"},
		{"restart with args", "restart now\n", "t.slt:1: unexpected tokens after restart"},
		{"halt with args", "halt now\n", "t.slt:1: unexpected tokens after halt"},
		{"dangling condition", "statement ok\nSELECT 1\n\nskipif x\n", "t.slt:4: skipif x is not followed by a record"},
		{"condition without engine", "onlyif\nstatement ok\nSELECT 1\n", "t.slt:1: onlyif needs exactly one engine name"},
		{"bad hash-threshold", "hash-threshold many\n", "t.slt:1: invalid hash-threshold"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.slt", strings.NewReader(tc.in))
			if err == nil {
				t.Fatalf("Parse succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestParseFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.slt")
	if err := os.WriteFile(path, []byte("statement ok\nSELECT 1\n\nbogus\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ParseFile(path)
	if err == nil || !strings.Contains(err.Error(), path+":4:") {
		t.Fatalf("ParseFile error = %v, want it to name %s:4", err, path)
	}
	if _, err := ParseFile(filepath.Join(t.TempDir(), "missing.slt")); err == nil {
		t.Fatal("ParseFile of a missing file succeeded")
	}
}

// ---------------------------------------------------------------------------
// Formatting and comparison

func TestFormatValue(t *testing.T) {
	tests := []struct {
		in   []byte
		want string
	}{
		{nil, "NULL"},
		{[]byte{}, "(empty)"},
		{[]byte("t"), "t"},
		{[]byte("2026-01-01 00:01:00"), "2026-01-01 00:01:00"},
		{[]byte("0.1"), "0.1"},
		{[]byte("a b"), "a b"},
	}
	for _, tc := range tests {
		if got := formatValue(tc.in); got != tc.want {
			t.Errorf("formatValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func rs(cols int, rows ...string) resultSet {
	r := resultSet{Columns: cols}
	for _, row := range rows {
		r.Rows = append(r.Rows, strings.Split(row, "|"))
	}
	return r
}

func TestCheckQuery(t *testing.T) {
	tests := []struct {
		name     string
		types    string
		sort     SortMode
		expected []string
		res      resultSet
		ok       bool
		reason   string
	}{
		{name: "nosort equal", types: "IT", expected: []string{"1 a", "2 b"}, res: rs(2, "1|a", "2|b"), ok: true},
		{name: "nosort order matters", types: "IT", expected: []string{"2 b", "1 a"}, res: rs(2, "1|a", "2|b")},
		{name: "whitespace normalized", types: "IT", expected: []string{"  1\t a  "}, res: rs(2, "1|a"), ok: true},
		{name: "value with spaces", types: "T", expected: []string{"hello world"}, res: rs(1, "hello  world"), ok: true},
		{name: "null and empty", types: "TT", expected: []string{"NULL (empty)"}, res: rs(2, "NULL|(empty)"), ok: true},
		{name: "rowsort both sides", types: "IT", sort: RowSort, expected: []string{"2 b", "1 a"}, res: rs(2, "2|b", "1|a"), ok: true},
		{name: "rowsort mismatch", types: "IT", sort: RowSort, expected: []string{"1 a", "2 c"}, res: rs(2, "2|b", "1|a")},
		{name: "rowsort duplicates counted", types: "I", sort: RowSort, expected: []string{"1", "1"}, res: rs(1, "1")},
		{name: "valuesort one per line", types: "II", sort: ValueSort, expected: []string{"1", "2", "3", "4"}, res: rs(2, "4|2", "3|1"), ok: true},
		{name: "valuesort row form", types: "II", sort: ValueSort, expected: []string{"1 2", "3 4"}, res: rs(2, "4|3", "2|1"), ok: true},
		{name: "valuesort mismatch", types: "II", sort: ValueSort, expected: []string{"1", "2", "3", "5"}, res: rs(2, "4|2", "3|1")},
		{name: "value per line nosort", types: "IT", expected: []string{"1", "a", "2", "b"}, res: rs(2, "1|a", "2|b"), ok: true},
		{name: "value per line rowsort", types: "IT", sort: RowSort, expected: []string{"1", "a", "2", "b"}, res: rs(2, "2|b", "1|a"), ok: true},
		{name: "empty result expected empty", types: "I", res: rs(1), ok: true},
		{name: "rows but none expected", types: "I", res: rs(1, "1")},
		{name: "none but rows expected", types: "I", expected: []string{"1"}, res: rs(1)},
		{name: "no-row-description result", types: "I", res: rs(0), ok: true},
		{name: "column count mismatch", types: "II", expected: []string{"1"}, res: rs(1, "1"), reason: "column count mismatch"},
		{name: "empty type string skips column check", types: "", expected: []string{"1 2"}, res: rs(2, "1|2"), ok: true},
		{name: "R rounds to expected precision", types: "IR", expected: []string{"1 0.333"}, res: rs(2, "1|0.3333333333333333"), ok: true},
		{name: "R trailing zeros", types: "R", expected: []string{"1.500"}, res: rs(1, "1.5"), ok: true},
		{name: "R real mismatch", types: "R", expected: []string{"0.334"}, res: rs(1, "0.3333333333333333")},
		{name: "R leniency only for R columns", types: "IT", expected: []string{"1 0.333"}, res: rs(2, "1|0.3333")},
		{name: "R exponent form exact", types: "R", expected: []string{"1e+20"}, res: rs(1, "1e+20"), ok: true},
		{name: "R NaN", types: "R", expected: []string{"NaN"}, res: rs(1, "NaN"), ok: true},
		{name: "R Infinity", types: "R", expected: []string{"Infinity"}, res: rs(1, "Infinity"), ok: true},
		{name: "R negative zero", types: "R", expected: []string{"0.00"}, res: rs(1, "-0.001"), ok: true},
		{name: "R null", types: "R", expected: []string{"NULL"}, res: rs(1, "NULL"), ok: true},
		{name: "R rowsort", types: "TR", sort: RowSort, expected: []string{"a 0.5", "b 0.667"}, res: rs(2, "b|0.6666666666666666", "a|0.5"), ok: true},
		{name: "hash nosort", types: "I", expected: []string{"4 values hashing to 302c28003d487124d97c242de94da856"}, res: rs(1, "1", "2", "3", "4"), ok: true},
		{name: "hash order sensitive", types: "I", expected: []string{"4 values hashing to 302c28003d487124d97c242de94da856"}, res: rs(1, "2", "1", "3", "4")},
		{name: "hash rowsort", types: "II", sort: RowSort, expected: []string{"4 values hashing to 302c28003d487124d97c242de94da856"}, res: rs(2, "3|4", "1|2"), ok: true},
		{name: "hash valuesort", types: "II", sort: ValueSort, expected: []string{"4 values hashing to 302C28003D487124D97C242DE94DA856"}, res: rs(2, "4|3", "2|1"), ok: true},
		{name: "hash wrong count", types: "I", expected: []string{"5 values hashing to 302c28003d487124d97c242de94da856"}, res: rs(1, "1", "2", "3", "4")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &Record{Kind: KindQuery, Types: tc.types, Sort: tc.sort, Expected: tc.expected}
			m := checkQuery(rec, tc.res)
			if tc.ok {
				if m != nil {
					t.Fatalf("unexpected mismatch: %s\n%s", m.Reason, formatMismatch(m))
				}
				return
			}
			if m == nil {
				t.Fatal("expected a mismatch, got none")
			}
			if tc.reason != "" && !strings.Contains(m.Reason, tc.reason) {
				t.Fatalf("reason %q does not contain %q", m.Reason, tc.reason)
			}
		})
	}
}

func TestFloatMatch(t *testing.T) {
	tests := []struct {
		exp, act string
		want     bool
	}{
		{"1", "1", true},
		{"1", "1.4", true},
		{"1", "1.6", false},
		{"0.1", "0.1", true},
		{"0.30", "0.30000000000000004", true},
		{"-1.25", "-1.25", true},
		{"1e3", "1000", true},
		{"1e3", "1000.5", false},
		{"abc", "abc", false},
		{"1.0", "x", false},
		{"1.0", "Infinity", false},
	}
	for _, tc := range tests {
		if got := floatMatch(tc.exp, tc.act); got != tc.want {
			t.Errorf("floatMatch(%q, %q) = %v, want %v", tc.exp, tc.act, got, tc.want)
		}
	}
}

func TestLineDiff(t *testing.T) {
	got, ok := lineDiff([]string{"a", "b", "c"}, []string{"a", "x", "c", "d"})
	if !ok {
		t.Fatal("lineDiff refused small input")
	}
	want := []string{"  a", "- b", "+ x", "  c", "+ d"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("lineDiff = %q, want %q", got, want)
	}
}

func TestFormatMismatch(t *testing.T) {
	got := formatMismatch(&mismatch{Expected: []string{"1 a"}, Actual: nil})
	want := "expected:\n1 a\nactual:\n<no rows>\ndiff (-expected +actual):\n- 1 a"
	if got != want {
		t.Fatalf("formatMismatch =\n%s\nwant\n%s", got, want)
	}
}

func TestShouldSkip(t *testing.T) {
	tests := []struct {
		conds []Condition
		want  bool
	}{
		{nil, false},
		{[]Condition{{OnlyIf: true, Engine: "turbinesql"}}, false},
		{[]Condition{{OnlyIf: true, Engine: "postgres"}}, true},
		{[]Condition{{Engine: "turbinesql"}}, true},
		{[]Condition{{Engine: "postgres"}}, false},
		{[]Condition{{Engine: "postgres"}, {OnlyIf: true, Engine: "turbinesql"}}, false},
		{[]Condition{{Engine: "postgres"}, {Engine: "turbinesql"}}, true},
	}
	for i, tc := range tests {
		if got := shouldSkip(tc.conds, "turbinesql"); got != tc.want {
			t.Errorf("case %d: shouldSkip(%v) = %v, want %v", i, tc.conds, got, tc.want)
		}
	}
}

func TestErrorMatches(t *testing.T) {
	text := `ERROR: relation "nope" does not exist (SQLSTATE 42P01)`
	for _, tc := range []struct {
		re   string
		want bool
	}{
		{"", true},
		{"does not exist", true},
		{"SQLSTATE 42P01", true},
		{`^relation`, false},
		{"SQLSTATE 42601", false},
	} {
		got, err := errorMatches(tc.re, text)
		if err != nil || got != tc.want {
			t.Errorf("errorMatches(%q) = %v, %v; want %v", tc.re, got, err, tc.want)
		}
	}
}

// ---------------------------------------------------------------------------
// Run: records that need no server, then a fake pgwire backend.

func TestRunNoServer(t *testing.T) {
	ctx := context.Background()
	dummy := new(pgx.Conn) // never used for I/O by these records

	recs, err := Parse("a.slt", strings.NewReader("sleep 1ms\n\nonlyif postgres\nstatement ok\nSELECT 1\n\nrestart\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = Run(ctx, dummy, "a.slt", recs, Options{})
	if err == nil || !strings.Contains(err.Error(), "a.slt:7: restart directive requires Options.Restart") {
		t.Fatalf("Run error = %v", err)
	}

	restarts := 0
	opts := Options{Restart: func(context.Context) (*pgx.Conn, error) { restarts++; return dummy, nil }}
	recs, err = Parse("b.slt", strings.NewReader("restart\n\nhalt\n\nstatement ok\nSELECT 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Run(ctx, dummy, "b.slt", recs, opts); err != nil || restarts != 1 {
		t.Fatalf("Run = %v, restarts = %d", err, restarts)
	}

	opts.Restart = func(context.Context) (*pgx.Conn, error) { return nil, fmt.Errorf("boom") }
	recs, _ = Parse("c.slt", strings.NewReader("restart\n"))
	if err := Run(ctx, dummy, "c.slt", recs, opts); err == nil || !strings.Contains(err.Error(), "c.slt:1: restart failed: boom") {
		t.Fatalf("Run error = %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	recs, _ = Parse("d.slt", strings.NewReader("sleep 1h\n"))
	if err := Run(cctx, dummy, "d.slt", recs, Options{}); err == nil || !strings.Contains(err.Error(), "d.slt:1: run canceled") {
		t.Fatalf("Run error = %v", err)
	}
}

// fakeResult is a canned response of the fake backend.
type fakeResult struct {
	cols []string // nil: no RowDescription (NoData)
	rows [][]*string
	tag  string
	err  *pgproto3.ErrorResponse
	// delay postpones the response (for timeout tests).
	delay time.Duration
}

func sp(s string) *string { return &s }

// fakeServer is a tiny pgwire backend answering simple and extended queries
// from a fixed table. It is just enough for pgx.Connect, Exec and ExecParams.
type fakeServer struct {
	ln      net.Listener
	results map[string]fakeResult
	wg      sync.WaitGroup
	mu      sync.Mutex
	seen    []string // "Q:<sql>" for simple, "P:<sql>" for extended
}

func newFakeServer(t *testing.T, results map[string]fakeResult) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeServer{ln: ln, results: results}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				s.serve(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

func (s *fakeServer) connect(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://u@%s/db?sslmode=disable", s.ln.Addr()))
	if err != nil {
		t.Fatalf("connect to fake server: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func (s *fakeServer) lookup(kind, sql string) fakeResult {
	s.mu.Lock()
	s.seen = append(s.seen, kind+":"+sql)
	s.mu.Unlock()
	r, ok := s.results[sql]
	if !ok {
		return fakeResult{err: &pgproto3.ErrorResponse{Severity: "ERROR", Code: "42601", Message: "fake server: unknown SQL " + sql}}
	}
	time.Sleep(r.delay)
	return r
}

func rowDesc(cols []string) *pgproto3.RowDescription {
	rd := &pgproto3.RowDescription{}
	for _, c := range cols {
		rd.Fields = append(rd.Fields, pgproto3.FieldDescription{Name: []byte(c), DataTypeOID: 25, DataTypeSize: -1, TypeModifier: -1})
	}
	return rd
}

func sendRows(b *pgproto3.Backend, r fakeResult) {
	for _, row := range r.rows {
		dr := &pgproto3.DataRow{}
		for _, v := range row {
			if v == nil {
				dr.Values = append(dr.Values, nil)
			} else {
				dr.Values = append(dr.Values, []byte(*v))
			}
		}
		b.Send(dr)
	}
	b.Send(&pgproto3.CommandComplete{CommandTag: []byte(r.tag)})
}

func (s *fakeServer) serve(c net.Conn) {
	b := pgproto3.NewBackend(c, c)
	if _, err := b.ReceiveStartupMessage(); err != nil {
		return
	}
	b.Send(&pgproto3.AuthenticationOk{})
	b.Send(&pgproto3.ParameterStatus{Name: "server_version", Value: "16.0"})
	b.Send(&pgproto3.ParameterStatus{Name: "client_encoding", Value: "UTF8"})
	b.Send(&pgproto3.ParameterStatus{Name: "standard_conforming_strings", Value: "on"})
	b.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}})
	b.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if b.Flush() != nil {
		return
	}
	var cur fakeResult
	failed := false // skip extended messages until Sync after an error
	for {
		msg, err := b.Receive()
		if err != nil {
			return
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			r := s.lookup("Q", m.String)
			if r.err != nil {
				b.Send(r.err)
			} else {
				if r.cols != nil {
					b.Send(rowDesc(r.cols))
				}
				sendRows(b, r)
			}
			b.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Parse:
			cur = s.lookup("P", m.Query)
			if cur.err != nil {
				b.Send(cur.err)
				failed = true
			} else {
				b.Send(&pgproto3.ParseComplete{})
			}
		case *pgproto3.Bind:
			if !failed {
				b.Send(&pgproto3.BindComplete{})
			}
		case *pgproto3.Describe:
			if !failed {
				if cur.cols != nil {
					b.Send(rowDesc(cur.cols))
				} else {
					b.Send(&pgproto3.NoData{})
				}
			}
		case *pgproto3.Execute:
			if !failed {
				sendRows(b, cur)
			}
		case *pgproto3.Sync:
			failed = false
			b.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Terminate:
			return
		}
		if b.Flush() != nil {
			return
		}
	}
}

func fakeResults() map[string]fakeResult {
	return map[string]fakeResult{
		"CREATE TABLE t (a INT, b TEXT)":                    {tag: "CREATE TABLE"},
		"INSERT INTO t VALUES (1, 'x'), (2, ''), (3, NULL)": {tag: "INSERT 0 3"},
		"SELECT a, b FROM t": {cols: []string{"a", "b"}, tag: "SELECT 3",
			rows: [][]*string{{sp("2"), sp("")}, {sp("1"), sp("x")}, {sp("3"), nil}}},
		"SELECT true, 1.5::float8, '2026-01-01 00:01:00'::timestamp": {cols: []string{"bool", "float8", "timestamp"}, tag: "SELECT 1",
			rows: [][]*string{{sp("t"), sp("1.5"), sp("2026-01-01 00:01:00")}}},
		"SELECT * FROM nope":  {err: &pgproto3.ErrorResponse{Severity: "ERROR", Code: "42P01", Message: `relation "nope" does not exist`}},
		"SELECT pg_sleep(10)": {cols: []string{"x"}, tag: "SELECT 1", rows: [][]*string{{sp("")}}, delay: time.Second},
	}
}

func TestRunFakeServer(t *testing.T) {
	srv := newFakeServer(t, fakeResults())
	conn := srv.connect(t)
	script := `# end-to-end against the fake backend
statement ok
CREATE TABLE t (a INT, b TEXT)

statement count 3
INSERT INTO t VALUES (1, 'x'), (2, ''), (3, NULL)

query IT rowsort
SELECT a, b FROM t
----
1 x
2 (empty)
3 NULL

query IT
SELECT a, b FROM t
----
2 (empty)
1 x
3 NULL

query BRT
SELECT true, 1.5::float8, '2026-01-01 00:01:00'::timestamp
----
t 1.5 2026-01-01 00:01:00

statement error relation "nope" does not exist
SELECT * FROM nope

statement error SQLSTATE 42P01
SELECT * FROM nope

query error does not exist
SELECT * FROM nope

skipif turbinesql
statement ok
THIS IS NOT SENT

onlyif turbinesql
halt

statement ok
NOR IS THIS
`
	path := filepath.Join(t.TempDir(), "e2e.slt")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RunFile(context.Background(), conn, path, Options{}); err != nil {
		t.Fatalf("RunFile: %v", err)
	}
	srv.mu.Lock()
	seen := strings.Join(srv.seen, "\n")
	srv.mu.Unlock()
	if strings.Contains(seen, "NOT SENT") || strings.Contains(seen, "NOR IS THIS") {
		t.Fatalf("skipped/halted SQL reached the server:\n%s", seen)
	}
	// Statements use pgx Exec (simple protocol without args); queries use
	// the extended protocol.
	for _, want := range []string{"Q:CREATE TABLE t (a INT, b TEXT)", "P:SELECT a, b FROM t"} {
		if !strings.Contains(seen, want) {
			t.Errorf("server did not see %q; saw:\n%s", want, seen)
		}
	}
}

func TestRunFakeServerFailures(t *testing.T) {
	srv := newFakeServer(t, fakeResults())
	tests := []struct {
		name   string
		script string
		opts   Options
		want   []string
	}{
		{
			name:   "result mismatch",
			script: "\nquery IT\nSELECT a, b FROM t\n----\n2 (empty)\n1 y\n3 NULL\n",
			want: []string{"f.slt:2: query result mismatch\nSQL: SELECT a, b FROM t\nexpected:\n2 (empty)\n1 y\n3 NULL\nactual:\n2 (empty)\n1 x\n3 NULL\n",
				"diff (-expected +actual):\n  2 (empty)\n- 1 y\n+ 1 x\n  3 NULL"},
		},
		{
			name:   "rowsort mismatch names sort mode",
			script: "query IT rowsort\nSELECT a, b FROM t\n----\n1 x\n",
			want:   []string{"f.slt:1: query result mismatch (rowsort)\n"},
		},
		{
			name:   "column count",
			script: "query I\nSELECT a, b FROM t\n----\n1\n",
			want:   []string{"f.slt:1: query column count mismatch"},
		},
		{
			name:   "statement fails",
			script: "statement ok\nSELECT * FROM nope\n",
			want:   []string{"f.slt:1: statement failed: ERROR: relation \"nope\" does not exist (SQLSTATE 42P01)\nSQL: SELECT * FROM nope"},
		},
		{
			name:   "query fails",
			script: "query I\nSELECT * FROM nope\n----\n1\n",
			want:   []string{"f.slt:1: query failed: ERROR: relation"},
		},
		{
			name:   "error expected but succeeded",
			script: "statement error\nCREATE TABLE t (a INT, b TEXT)\n",
			want:   []string{"f.slt:1: statement succeeded, but an error was expected\nSQL: CREATE TABLE t"},
		},
		{
			name:   "error regex mismatch",
			script: "statement error SQLSTATE 42601\nSELECT * FROM nope\n",
			want:   []string{"f.slt:1: statement error mismatch", "expected error matching: SQLSTATE 42601", "actual error: ERROR: relation \"nope\" does not exist (SQLSTATE 42P01)"},
		},
		{
			name:   "count mismatch",
			script: "statement count 2\nINSERT INTO t VALUES (1, 'x'), (2, ''), (3, NULL)\n",
			want:   []string{"f.slt:1: statement count mismatch: expected 2 rows affected, got 3"},
		},
		{
			name:   "retry reports attempts",
			script: "query I retry 2 backoff 1ms\nSELECT * FROM nope\n----\n1\n",
			want:   []string{"f.slt:1: query failed: ERROR: relation \"nope\" does not exist (SQLSTATE 42P01) (after 3 attempts)\nSQL: SELECT * FROM nope"},
		},
		{
			name:   "timeout",
			script: "query T\nSELECT pg_sleep(10)\n----\n(empty)\n",
			opts:   Options{Timeout: 200 * time.Millisecond},
			want:   []string{"f.slt:1: query timed out after 200ms"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := srv.connect(t)
			recs, err := Parse("f.slt", strings.NewReader(tc.script))
			if err != nil {
				t.Fatal(err)
			}
			err = Run(context.Background(), conn, "f.slt", recs, tc.opts)
			if err == nil {
				t.Fatal("Run succeeded, want failure")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%s\ndoes not contain:\n%s", err, w)
				}
			}
		})
	}
}

func TestRunRestartSwapsConnection(t *testing.T) {
	srv := newFakeServer(t, fakeResults())
	first := srv.connect(t)
	var second *pgx.Conn
	opts := Options{Restart: func(ctx context.Context) (*pgx.Conn, error) {
		second = srv.connect(t)
		return second, nil
	}}
	recs, err := Parse("r.slt", strings.NewReader("restart\n\nstatement ok\nCREATE TABLE t (a INT, b TEXT)\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Run(context.Background(), first, "r.slt", recs, opts); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if second == nil || !second.IsClosed() {
		t.Fatal("connection returned by Restart was not closed at the end of Run")
	}
	if first.IsClosed() {
		t.Fatal("Run closed the caller's connection")
	}
}
