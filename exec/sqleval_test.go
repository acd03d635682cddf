package exec_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/planner"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// The tests in this file run SQL text through the real front end (sql.Parse,
// planner.BuildQuery) and evaluate the plan's filter and projection on a
// fixed batch, so each case is one line of SQL and its expected text output.

var evalSchema = types.Schema{
	{Name: "i", Type: types.Int},
	{Name: "j", Type: types.Int},
	{Name: "f", Type: types.Double},
	{Name: "s", Type: types.Text},
	{Name: "b", Type: types.Bool},
	{Name: "ts", Type: types.Timestamp},
}

type oneRelation struct{ rel *catalog.Relation }

func (o oneRelation) Relation(name string) (*catalog.Relation, bool) {
	if name == o.rel.Name {
		return o.rel, true
	}
	return nil, false
}

var evalCatalog = oneRelation{&catalog.Relation{Name: "t", Schema: evalSchema, Topic: "t"}}

// evalRows is the batch: row 0 ordinary values, row 1 all NULL, row 2
// edge values (zero, negative, unicode, empty string).
func evalBatch() *exec.Batch {
	ms := func(s string) int64 {
		v, err := exec.ParseTimestamp(s)
		if err != nil {
			panic(err)
		}
		return v
	}
	col := func(t types.Type, vals ...any) *exec.Vec {
		v := &exec.Vec{T: t, N: len(vals), Null: make([]bool, len(vals))}
		for k, x := range vals {
			if x == nil {
				v.Null[k] = true
			}
		}
		switch t {
		case types.Int, types.Timestamp:
			v.I = make([]int64, len(vals))
			for k, x := range vals {
				switch y := x.(type) {
				case int:
					v.I[k] = int64(y)
				case string:
					v.I[k] = ms(y)
				}
			}
		case types.Double:
			v.F = make([]float64, len(vals))
			for k, x := range vals {
				if x != nil {
					v.F[k] = x.(float64)
				}
			}
		case types.Text:
			v.S = make([]string, len(vals))
			for k, x := range vals {
				if x != nil {
					v.S[k] = x.(string)
				}
			}
		case types.Bool:
			v.B = make([]bool, len(vals))
			for k, x := range vals {
				if x != nil {
					v.B[k] = x.(bool)
				}
			}
		}
		return v
	}
	return &exec.Batch{N: 3, Cols: []*exec.Vec{
		col(types.Int, 7, nil, 0),
		col(types.Int, 2, nil, -3),
		col(types.Double, 2.5, nil, -0.5),
		col(types.Text, "Hello", nil, "ñandú"),
		col(types.Bool, true, nil, false),
		col(types.Timestamp, "2026-01-01 10:00:00", nil, "2026-01-02 00:00:00.5"),
	}}
}

// evalSQL plans "SELECT <exprs> FROM t [WHERE ...]" and returns its rows as
// text (NULL for NULL), one string per row with values joined by "|".
func evalSQL(query string) ([]string, error) {
	st, err := sql.Parse(query)
	if err != nil {
		return nil, err
	}
	sel, ok := st.(*sql.Select)
	if !ok {
		return nil, fmt.Errorf("not a SELECT: %T", st)
	}
	p, err := planner.BuildQuery(evalCatalog, sel.Stmt, query)
	if err != nil {
		return nil, err
	}
	b, err := exec.FilterBatch(evalBatch(), p.Filter)
	if err != nil {
		return nil, err
	}
	rows, err := exec.Project(b, p.Project)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(rows))
	for r, row := range rows {
		vals := make([]string, len(row))
		for c, v := range row {
			switch {
			case v == nil:
				vals[c] = "NULL"
			case p.Output[c].Type == types.Bool:
				vals[c] = map[bool]string{true: "t", false: "f"}[v.(bool)]
			default:
				vals[c] = exec.FormatText(v)
			}
		}
		out[r] = strings.Join(vals, "|")
	}
	return out, nil
}

func TestSQLExpressions(t *testing.T) {
	cases := []struct {
		q    string
		want []string // rows over the batch: ordinary, all NULL, edge values
	}{
		{"SELECT i + j, i - j, i * j, i / j, i % j FROM t", []string{"9|5|14|3|1", "NULL|NULL|NULL|NULL|NULL", "-3|3|0|0|0"}},
		{"SELECT f / 2, i / 2.0, 7 / 2, -7 / 2, -7 % 3, 5.5 % 2 FROM t WHERE i = 7", []string{"1.25|3.5|3|-3|-1|1.5"}},
		{"SELECT 2 + 3 * 4, (2 + 3) * 4, -2 * 3, 7 % 3 * 2, -9223372036854775808 FROM t WHERE i = 7", []string{"14|20|-6|2|-9223372036854775808"}},
		{"SELECT i = j, i <> j, i < j, i <= j, i > j, i >= j, i != j FROM t", []string{"f|t|f|f|t|t|t", "NULL|NULL|NULL|NULL|NULL|NULL|NULL", "f|t|f|f|t|t|t"}},
		{"SELECT NULL = NULL, NULL IS NULL, i IS NULL, s IS NOT NULL FROM t WHERE i = 7", []string{"NULL|t|f|t"}},
		{"SELECT b AND i > 5, b OR i > 5, NOT b, b IS TRUE, b IS NOT FALSE FROM t", []string{"t|t|f|t|t", "NULL|NULL|NULL|f|t", "f|f|t|f|f"}},
		{"SELECT i FROM t WHERE i <> 0 AND 10 / i >= 1", []string{"7"}},
		{"SELECT i FROM t WHERE i = 0 OR 10 / i = 1", []string{"7", "0"}},
		{"SELECT i IN (1, 7), i NOT IN (1, NULL), s IN ('Hello', 'x'), 2.5 IN (i, f) FROM t", []string{"t|NULL|t|t", "NULL|NULL|NULL|NULL", "f|NULL|f|f"}},
		{"SELECT i BETWEEN 0 AND 7, i NOT BETWEEN 1 AND 10, f BETWEEN -1 AND 0 FROM t", []string{"t|f|f", "NULL|NULL|NULL", "t|t|t"}},
		{"SELECT s LIKE 'H%', s LIKE '_and_', s ILIKE 'hello', s NOT LIKE '%l%', s LIKE '%ú' FROM t", []string{"t|f|t|f|f", "NULL|NULL|NULL|NULL|NULL", "f|t|f|t|t"}},
		{`SELECT 'a%' LIKE 'a\%', 'ab' LIKE 'a\%', '10%' LIKE '10#%' ESCAPE '#', 'a\b' FROM t WHERE i = 7`, []string{`t|f|t|a\b`}},
		{"SELECT CASE WHEN i > 5 THEN 'big' WHEN i = 0 THEN 'zero' END, CASE i WHEN 7 THEN 1 ELSE 2.5 END, CASE WHEN i = 0 THEN 0 ELSE 10 / i END FROM t",
			[]string{"big|1|1", "NULL|2.5|NULL", "zero|2.5|0"}},
		{"SELECT CASE s WHEN 'Hello' THEN 'h' WHEN 'ñandú' THEN 'ñ' ELSE '?' END, CASE WHEN b THEN NULL END FROM t", []string{"h|NULL", "?|NULL", "ñ|NULL"}},
		{"SELECT COALESCE(i, j, 42), COALESCE(s, ''), NULLIF(i, 7), NULLIF(s, 'Hello') FROM t", []string{"7|Hello|NULL|NULL", "42||NULL|NULL", "0|ñandú|0|ñandú"}},
		{"SELECT COALESCE(i, 1 / 0) FROM t WHERE i IS NOT NULL", []string{"7", "0"}},
		{"SELECT s || 'x', 'a' || NULL, CONCAT(s, NULL, 1), s || 1, 'a' || 1 + 2, s || 'x' = 'Hellox' FROM t",
			[]string{"Hellox|NULL|Hello1|Hello1|a3|t", "NULL|NULL|1|NULL|a3|NULL", "ñandúx|NULL|ñandú1|ñandú1|a3|f"}},
		{"SELECT UPPER(s), LOWER(s), LENGTH(s), CHAR_LENGTH(s), OCTET_LENGTH(s) FROM t", []string{"HELLO|hello|5|5|5", "NULL|NULL|NULL|NULL|NULL", "ÑANDÚ|ñandú|5|5|7"}},
		{"SELECT SUBSTRING(s, 2, 3), SUBSTRING(s FROM 0 FOR 3), SUBSTR(s, 3), SUBSTRING(s FROM 4) FROM t", []string{"ell|He|llo|lo", "NULL|NULL|NULL|NULL", "and|ña|ndú|dú"}},
		{"SELECT TRIM('  x  '), TRIM(BOTH 'x' FROM 'xxaxx'), TRIM(LEADING 'x' FROM 'xxaxx'), TRIM(TRAILING 'x' FROM 'xxaxx'), TRIM('x' FROM 'xax'), LTRIM('  a'), RTRIM('xxaxx', 'x'), BTRIM('yay', 'y') FROM t WHERE i = 7",
			[]string{"x|a|axx|xxa|a|a|xxa|a"}},
		{"SELECT REPLACE(s, 'l', 'L'), STRPOS(s, 'l'), POSITION('dú' IN s) FROM t", []string{"HeLLo|3|0", "NULL|NULL|NULL", "ñandú|0|4"}},
		{"SELECT ABS(j), ABS(f), ROUND(f), ROUND(f, 1), ROUND(i, -1), ROUND(2.675, 2), FLOOR(f), CEIL(f), CEILING(-1.5) FROM t",
			[]string{"2|2.5|2|2.5|10|2.68|2|3|-1", "NULL|NULL|NULL|NULL|NULL|2.68|NULL|NULL|-1", "3|0.5|-0|-0.5|0|2.68|-1|-0|-1"}},
		{"SELECT CAST(i AS TEXT), f::bigint, '12'::int + 1, b::int, CAST('t' AS BOOLEAN), (-1)::text, 2.7::int, '1.5'::double precision FROM t WHERE i = 7",
			[]string{"7|2|13|1|t|-1|3|1.5"}},
		// Type modifiers are accepted and not enforced: VARCHAR(2) does not truncate.
		{"SELECT i::text || '!', (i + j)::text, f::text, b::text, CAST(s AS VARCHAR(2)), TRUE::text, i::int::text FROM t WHERE i = 7",
			[]string{"7!|9|2.5|true|Hello|true|7"}},
		{"SELECT ts + INTERVAL '1' HOUR, ts - INTERVAL '1 day', INTERVAL '30' MINUTE + ts FROM t",
			[]string{"2026-01-01 11:00:00|2025-12-31 10:00:00|2026-01-01 10:30:00", "NULL|NULL|NULL", "2026-01-02 01:00:00.5|2026-01-01 00:00:00.5|2026-01-02 00:30:00.5"}},
		{"SELECT (ts - TIMESTAMP '2026-01-01')::text, ts - TIMESTAMP '2026-01-01' > INTERVAL '1' HOUR, CAST(ts AS TEXT) FROM t",
			[]string{"10:00:00|t|2026-01-01 10:00:00", "NULL|NULL|NULL", "1 day 00:00:00.5|t|2026-01-02 00:00:00.5"}},
		{"SELECT (INTERVAL '1' DAY * 2)::text, (INTERVAL '90' MINUTE / 4)::text, '1 day 2 hours'::interval::text, (2 * INTERVAL '1 second' - INTERVAL '1' MILLISECOND)::text, (-INTERVAL '1' MINUTE)::text FROM t WHERE i = 7",
			[]string{"2 days|00:22:30|1 day 02:00:00|00:00:01.999|-00:01:00"}},
		{"SELECT ts FROM t WHERE ts >= '2026-01-02' AND s <> ''", []string{"2026-01-02 00:00:00.5"}},
	}
	for _, c := range cases {
		t.Run(c.q, func(t *testing.T) {
			got, err := evalSQL(c.q)
			if err != nil {
				t.Fatalf("%v (%s)", err, sql.CodeOf(err))
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// TestSQLExpressionErrors checks the SQLSTATE of type errors (at plan time)
// and of run-time errors.
func TestSQLExpressionErrors(t *testing.T) {
	cases := []struct{ q, code string }{
		{"SELECT s + 1 FROM t", "42883"},
		{"SELECT ts + 1 FROM t", "42883"},
		{"SELECT ts * 2 FROM t", "42883"},
		{"SELECT i || j FROM t", "42883"},
		{"SELECT i | j FROM t", "42883"},
		{"SELECT LOWER(i) FROM t", "42883"},
		{"SELECT ABS(s) FROM t", "42883"},
		{"SELECT LENGTH(s, s) FROM t", "42883"},
		{"SELECT nosuch(i) FROM t", "42883"},
		{"SELECT i LIKE '1%' FROM t", "42883"},
		{"SELECT i = s FROM t", "42883"},
		{"SELECT NULLIF(i, s) FROM t", "42883"},
		{"SELECT i FROM t WHERE i", "42804"},
		{"SELECT NOT i FROM t", "42804"},
		{"SELECT i AND b FROM t", "42804"},
		{"SELECT CASE WHEN i THEN 1 END FROM t", "42804"},
		{"SELECT CASE WHEN b THEN 1 ELSE b END FROM t", "42804"},
		{"SELECT COALESCE(i, s) FROM t", "42804"},
		{"SELECT CAST(b AS DOUBLE) FROM t", "42846"},
		{"SELECT CAST(s AS DATE) FROM t", "0A000"},
		{"SELECT s::jsonb FROM t", "0A000"},
		{"SELECT s::nosuchtype FROM t", "42704"},
		{"SELECT 'abc'::int FROM t", "22P02"},
		{"SELECT i IN ('a') FROM t", "22P02"},
		{"SELECT SUBSTRING(s, 'a') FROM t", "22P02"},
		{`SELECT s LIKE 'a\' FROM t`, "22025"},
		{"SELECT 1 / 0 FROM t", "22012"},
		{"SELECT i % 0 FROM t", "22012"},
		{"SELECT 1.5 / 0 FROM t", "22012"},
		{"SELECT 9223372036854775807 + i FROM t", "22003"},
		{"SELECT SUBSTRING(s, 1, -1) FROM t", "22011"},
		{"SELECT 'x'::interval FROM t", "22007"},
		{"SELECT s::boolean FROM t", "22P02"},
	}
	for _, c := range cases {
		t.Run(c.q, func(t *testing.T) {
			rows, err := evalSQL(c.q)
			if err == nil {
				t.Fatalf("want SQLSTATE %s, got rows %v", c.code, rows)
			}
			if got := sql.CodeOf(err); got != c.code {
				t.Fatalf("want SQLSTATE %s, got %s: %v", c.code, got, err)
			}
		})
	}
}
