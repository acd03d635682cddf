package sql

import (
	"errors"
	"testing"
)

func TestRewriteBody(t *testing.T) {
	cases := []struct{ src, want string }{
		{"SELECT a::int FROM t", "SELECT CAST(a AS SIGNED) FROM t"},
		{"SELECT a::bigint::text FROM t", "SELECT CAST(CAST(a AS SIGNED) AS CHAR) FROM t"},
		{"SELECT (a + b)::text FROM t", "SELECT CAST((a + b) AS CHAR) FROM t"},
		{"SELECT lower(s)::varchar(10) FROM t", "SELECT CAST(lower(s) AS CHAR) FROM t"},
		{"SELECT t.a::double precision FROM t", "SELECT CAST(t.\"a\" AS DOUBLE) FROM t"},
		{"SELECT '5'::int, 2.5::float8", "SELECT CAST('5' AS SIGNED), CAST(2.5 AS DOUBLE)"},
		{"SELECT TRUE::text", "SELECT CAST(__bool(1) AS CHAR)"},
		{"SELECT INTERVAL '1' DAY::text", "SELECT CAST(__ivl(86400000) AS CHAR)"},
		{"SELECT '1 hour'::interval", "SELECT CAST('1 hour' AS TIME)"},
		{"SELECT x::timestamp without time zone", "SELECT CAST(x AS DATETIME)"},
		{"SELECT x::pg_catalog.int8", "SELECT CAST(x AS SIGNED)"},
		{"SELECT CASE WHEN a THEN 1 END::text", "SELECT CAST(CASE WHEN a THEN 1 END AS CHAR)"},
		{"SELECT TIMESTAMP '2026-01-01'::text", "SELECT CAST(TIMESTAMP '2026-01-01' AS CHAR)"},
		{"SELECT a FROM t WHERE (a)::int > 1", "SELECT a FROM t WHERE CAST((a) AS SIGNED) > 1"},
		{"SELECT TRIM(LEADING (a)::text FROM s)", "SELECT TRIM(LEADING CAST((a) AS CHAR) FROM s)"},
		{"SELECT -1::text", "SELECT -CAST(1 AS CHAR)"},
		{"SELECT CAST(a AS BOOLEAN), CAST(b AS INTERVAL), CAST(c AS NUMERIC(10, 2))", "SELECT CAST(a AS JSON), CAST(b AS TIME), CAST(c AS DOUBLE)"},
		{"SELECT a || b || 'c'", "SELECT a | b | 'c'"},
		{"SELECT 'a||b'", "SELECT 'a||b'"},
		{"SELECT INTERVAL '1 day 02:00:00'", "SELECT __ivl(93600000)"},
	}
	for _, c := range cases {
		toks, err := Lex(c.src)
		if err != nil {
			t.Fatal(err)
		}
		r, err := rewriteBody(c.src, toks, 0)
		if err != nil {
			t.Errorf("%s: %v", c.src, err)
			continue
		}
		if r.text != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.src, r.text, c.want)
		}
	}
}

func TestRewriteErrors(t *testing.T) {
	cases := []struct {
		src  string
		code string
		pos  int
	}{
		{"SELECT a | b FROM t", CodeUndefinedFunc, 10},
		{"SELECT CAST(a AS DATE) FROM t", CodeNotSupported, 18},
		{"SELECT a::jsonb FROM t", CodeNotSupported, 11},
		{"SELECT a::colour FROM t", "42704", 11},
		{"SELECT ::int FROM t", CodeSyntax, 8},
		{"SELECT a:: FROM t", CodeSyntax, 12},
		// Positions after a :: rewrite still point at what the user typed.
		{"SELECT a::int FROM t WHERE ORDER", CodeSyntax, 28},
	}
	for _, c := range cases {
		_, err := Parse(c.src)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: want *Error, got %v", c.src, err)
			continue
		}
		if e.Code != c.code || e.Pos != c.pos {
			t.Errorf("%s: got %s at %d (%s), want %s at %d", c.src, e.Code, e.Pos, e.Message, c.code, c.pos)
		}
	}
}

func TestParseIntervalText(t *testing.T) {
	cases := []struct {
		s  string
		ms int64
	}{
		{"1 minute", 60_000},
		{"90 seconds", 90_000},
		{"1.5 hours", 5_400_000},
		{"-1.5 hours", -5_400_000},
		{"1 day 02:00:00", 93_600_000},
		{"00:00:05.25", 5_250},
		{"-00:01", -60_000},
		{"2d 3h", 2*86_400_000 + 3*3_600_000},
		{"10min", 600_000},
		{"1 week", 604_800_000},
		{"@ 1 hour ago", -3_600_000},
		{"5", 5_000},
		{"250 ms", 250},
		{"1 day -01:00:00", 82_800_000},
	}
	for _, c := range cases {
		ms, err := ParseIntervalText(c.s)
		if err != nil || ms != c.ms {
			t.Errorf("%q: got %d, %v; want %d", c.s, ms, err, c.ms)
		}
	}
	for _, bad := range []string{"", "abc", "1 month", "2 years", "1 fortnight", "1:2:3:4", "1::2", "1e400 days", "x:00", "--1"} {
		if ms, err := ParseIntervalText(bad); err == nil {
			t.Errorf("%q: want an error, got %d", bad, ms)
		}
	}
}
