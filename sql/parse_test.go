package sql

import (
	"errors"
	"testing"
)

func TestParseStatements(t *testing.T) {
	cases := []struct {
		src   string
		check func(t *testing.T, s Statement)
	}{
		{`CREATE SOURCE t (a TEXT, b BIGINT, c DOUBLE PRECISION, d BOOLEAN, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '5' SECOND) WITH (topic='x', partitions=4, partition_key='a')`,
			func(t *testing.T, s Statement) {
				cs := s.(*CreateSource)
				if cs.Name != "t" || len(cs.Columns) != 5 || cs.Watermark == nil || cs.Watermark.DelayMs != 5000 {
					t.Fatalf("got %+v", cs)
				}
				if cs.Options["topic"].Value != "x" || cs.Options["partitions"].Value != "4" {
					t.Fatalf("options %+v", cs.Options)
				}
			}},
		{`CREATE STREAM s WITH (topic = 'o') AS SELECT k, COUNT(*) FROM t GROUP BY k, TUMBLE(ts, INTERVAL '1' MINUTE)`,
			func(t *testing.T, s Statement) {
				cs := s.(*CreateStream)
				if cs.Name != "s" || cs.Query == nil || cs.Options["topic"].Value != "o" {
					t.Fatalf("got %+v", cs)
				}
			}},
		{`INSERT INTO t (a, b) VALUES ('x', 1), ('y', 2)`, func(t *testing.T, s Statement) {
			in := s.(*Insert)
			if in.Table != "t" || len(in.Rows) != 2 || len(in.Columns) != 2 {
				t.Fatalf("got %+v", in)
			}
		}},
		{`FLUSH`, func(t *testing.T, s Statement) { _ = s.(*Flush) }},
		{`SHOW STREAMS`, func(t *testing.T, s Statement) {
			if s.(*Show).What != "STREAMS" {
				t.Fatal(s)
			}
		}},
		{`DESCRIBE "Mixed"`, func(t *testing.T, s Statement) {
			if s.(*Describe).Name != "Mixed" {
				t.Fatal(s)
			}
		}},
		{`DROP STREAM IF EXISTS s`, func(t *testing.T, s Statement) {
			d := s.(*Drop)
			if d.Kind != "STREAM" || !d.IfExists || d.Name != "s" {
				t.Fatal(d)
			}
		}},
		{`DROP STREAM s DELETE TOPIC`, func(t *testing.T, s Statement) {
			d := s.(*Drop)
			if d.Kind != "STREAM" || d.IfExists || d.Name != "s" || !d.DeleteTopic {
				t.Fatal(d)
			}
		}},
		{`drop stream if exists s delete topic`, func(t *testing.T, s Statement) {
			if d := s.(*Drop); !d.IfExists || !d.DeleteTopic {
				t.Fatal(d)
			}
		}},
		{`ALTER STREAM s SET (strategy = 'repartition', repartition_partitions = 4)`, func(t *testing.T, s Statement) {
			a := s.(*AlterStream)
			if a.Name != "s" || a.Action != AlterSet || a.Options.String("strategy", "") != "repartition" || a.Options.String("repartition_partitions", "") != "4" {
				t.Fatal(a)
			}
		}},
		{`alter stream s restart`, func(t *testing.T, s Statement) {
			if a := s.(*AlterStream); a.Action != AlterRestart || len(a.Options) != 0 {
				t.Fatal(a)
			}
		}},
		{`EXPLAIN SELECT * FROM t`, func(t *testing.T, s Statement) { _ = s.(*Explain).Stmt.(*Select) }},
		{`BEGIN`, func(t *testing.T, s Statement) {
			if s.(*Noop).Tag != "BEGIN" {
				t.Fatal(s)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.src, func(t *testing.T) {
			s, err := Parse(c.src)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			c.check(t, s)
		})
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		src  string
		code string
		pos  int
	}{
		{"SELEC 1", CodeSyntax, 1},
		{"SELECT a FROM t WHERE", CodeSyntax, 22},
		{"SELECT a FROM t WHERE x = 'open", CodeSyntax, 27},
		// The INTERVAL rewrite must not move error positions after it.
		{"SELECT TUMBLE_START(ts, INTERVAL '1' MINUTE) FROM t WHERE ORDER", CodeSyntax, 59},
		{"CREATE SOURCE t (a JSONB)", CodeNotSupported, 20},
		{"CREATE SOURCE t (a TEXT) WITH (topic = 'x', topic = 'y')", CodeInvalidParameter, 45},
		{"CREATE STREAM s AS DELETE FROM t", CodeSyntax, 20},
		{"SELECT INTERVAL '1' FORTNIGHT FROM t", CodeSyntax, 17},
	}
	for _, c := range cases {
		t.Run(c.src, func(t *testing.T) {
			_, err := Parse(c.src)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("want *Error, got %v", err)
			}
			if e.Code != c.code || e.Pos != c.pos {
				t.Fatalf("got code %s pos %d (%s), want %s at %d", e.Code, e.Pos, e.Message, c.code, c.pos)
			}
		})
	}
}

func TestIntervalForms(t *testing.T) {
	cases := []struct {
		src string
		ms  int64
	}{
		{"INTERVAL '1' MINUTE", 60_000},
		{"INTERVAL '1 minute'", 60_000},
		{"INTERVAL 1 MINUTE", 60_000},
		{"INTERVAL '5' SECOND", 5_000},
		{"INTERVAL '250' MILLISECOND", 250},
		{"INTERVAL '2 hours'", 7_200_000},
		{"INTERVAL 1 DAY", 86_400_000},
	}
	for _, c := range cases {
		toks, err := Lex(c.src)
		if err != nil {
			t.Fatal(err)
		}
		ms, next, err := parseInterval(c.src, toks, 0)
		if err != nil || ms != c.ms || next != len(toks) {
			t.Errorf("%s: got %d (next %d of %d), %v; want %d", c.src, ms, next, len(toks), err, c.ms)
		}
	}
}

func TestSplit(t *testing.T) {
	got := Split("SELECT 'a;b'; -- c;\nFLUSH ;; /* x; */ SHOW STREAMS")
	want := []string{"SELECT 'a;b'", "-- c;\nFLUSH", "/* x; */ SHOW STREAMS"}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%d: got %q want %q", i, got[i], want[i])
		}
	}
}

func TestBind(t *testing.T) {
	got, err := Bind("SELECT * FROM t WHERE a = $1 AND b = $2 AND c = $1 AND d IS $3", []BindValue{{Text: "it's"}, {Text: "42", Numeric: true}, {Null: true}})
	if err != nil {
		t.Fatal(err)
	}
	want := "SELECT * FROM t WHERE a = 'it''s' AND b = 42 AND c = 'it''s' AND d IS NULL"
	if got != want {
		t.Fatalf("got %q", got)
	}
	if _, err := Bind("SELECT $2", []BindValue{{Text: "x"}}); err == nil {
		t.Fatal("want an error for a missing parameter")
	}
}

func TestParseShowSizingAndSkew(t *testing.T) {
	s, err := Parse("SHOW SIZING WITH (peak_events_per_sec = 4200, avg_record_kb = 18.5, target_consumers = 12)")
	if err != nil {
		t.Fatal(err)
	}
	sz := s.(*ShowSizing)
	if f, err := sz.Options.Float("avg_record_kb", 0); sz.Source != "" || err != nil || f != 18.5 {
		t.Fatalf("%+v %v %v", sz, f, err)
	}
	s, err = Parse("show sizing for Captures with (target_consumers = 3);")
	if err != nil || s.(*ShowSizing).Source != "captures" {
		t.Fatalf("%+v %v", s, err)
	}
	s, err = Parse("SHOW SKEW FOR captures BY store_id || ':' || fixture_id WITH (partitions = 24)")
	if err != nil {
		t.Fatal(err)
	}
	sk := s.(*ShowSkew)
	if sk.Source != "captures" || sk.ByText != "store_id || ':' || fixture_id" || sk.By == nil || sk.Options.String("partitions", "") != "24" {
		t.Fatalf("%+v", sk)
	}
	s, err = Parse("SHOW SKEW FOR captures BY COALESCE(a, (b)) ")
	if err != nil || s.(*ShowSkew).ByText != "COALESCE(a, (b))" || len(s.(*ShowSkew).Options) != 0 {
		t.Fatalf("%+v %v", s, err)
	}
	s, err = Parse("SHOW SKEW FOR captures")
	if err != nil || s.(*ShowSkew).By != nil {
		t.Fatalf("%+v %v", s, err)
	}
	for _, bad := range []struct{ sql, code string }{
		{"SHOW SKEW captures", CodeSyntax},
		{"SHOW SKEW FOR captures BY", CodeSyntax},
		{"SHOW SKEW FOR captures BY a, b", CodeSyntax},
		{"SHOW SKEW FOR captures BY a +", CodeSyntax},
		{"SHOW SKEW FOR captures BY store_id WITH (partitions = 4, partitions = 5)", CodeInvalidParameter},
		{"SHOW SIZING WITH (x = 1) extra", CodeSyntax},
	} {
		if _, err := Parse(bad.sql); CodeOf(err) != bad.code {
			t.Errorf("%s: %v (%s), want %s", bad.sql, err, CodeOf(err), bad.code)
		}
	}
	// A syntax error inside BY points into BY's text.
	_, err = Parse("SHOW SKEW FOR captures BY a + ) WITH (partitions = 4)")
	var e *Error
	if !errors.As(err, &e) || e.Pos < 27 || e.Pos > 32 {
		t.Fatalf("error %v at %d, want a position inside BY (27..31)", err, e.Pos)
	}
}
