package pgcat

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/types"
)

type fakeEnv struct{ rels []*catalog.Relation }

func (f fakeEnv) Relations() []*catalog.Relation { return f.rels }
func (fakeEnv) User() string                     { return "alice" }
func (fakeEnv) Database() string                 { return "shop" }
func (fakeEnv) Setting(n string) (string, bool)  { return "v-" + n, n == "server_version" }
func (fakeEnv) SettingNames() []string           { return []string{"server_version"} }
func (fakeEnv) Roles() []Role                    { return []Role{{Name: "alice", Super: true}, {Name: "bob"}} }

func env() fakeEnv {
	src := types.Schema{{Name: "user_id", Type: types.Text}, {Name: "amount", Type: types.Int}, {Name: "ts", Type: types.Timestamp}}
	up := &catalog.Stream{Name: "totals", Topic: "totals", Input: "clicks", Upsert: true, PrimaryKey: []string{"user_id"},
		Schema: types.Schema{{Name: "user_id", Type: types.Text}, {Name: "n", Type: types.Int}},
		SQL:    "CREATE STREAM totals AS SELECT user_id, COUNT(*) AS n FROM clicks GROUP BY user_id"}
	return fakeEnv{rels: []*catalog.Relation{
		{Name: "clicks", Kind: catalog.KindSource, Schema: src, Topic: "clicks", Source: &catalog.Source{Name: "clicks"}},
		{Name: "totals", Kind: catalog.KindStream, Schema: up.Schema, Topic: "totals", Stream: up},
	}}
}

// Every virtual table builds as an Arrow batch: each row's values fit the
// declared column types (a wrong spec or row fails here, not in a client).
func TestEveryTableBuilds(t *testing.T) {
	e := env()
	for _, tb := range All() {
		rec, err := tb.Batch(e, memory.DefaultAllocator)
		if err != nil {
			t.Errorf("%s.%s: %v", tb.Schema, tb.Name, err)
			continue
		}
		if int(rec.NumCols()) != len(tb.Cols) {
			t.Errorf("%s: %d columns, declared %d", tb.Name, rec.NumCols(), len(tb.Cols))
		}
		rec.Release()
	}
}

func TestUpsertStreamPrimaryKey(t *testing.T) {
	e := env()
	idx, _ := Lookup("pg_catalog", "pg_index")
	rows := idx.Rows(e)
	if len(rows) != 1 {
		t.Fatalf("pg_index rows %v", rows)
	}
	cols := idx.Fields()
	row := map[string]any{}
	for i, c := range cols {
		row[c.Name] = rows[0][i]
	}
	if row["indrelid"] != RelOID("totals") || row["indexrelid"] != IndexOID("totals") || row["indisprimary"] != true || row["indkey"] != "1" {
		t.Errorf("pg_index row %v", row)
	}
	fn, _ := LookupFunc("pg_get_indexdef")
	if got, _ := fn.Eval(e, []any{IndexOID("totals"), int64(0), true}); got != "CREATE UNIQUE INDEX totals_pkey ON public.totals USING btree (user_id)" {
		t.Errorf("pg_get_indexdef: %v", got)
	}
	if oid, ok := ClassOID(e, "public.totals_pkey"); !ok || oid != IndexOID("totals") || ClassName(e, oid) != "totals_pkey" {
		t.Errorf("regclass of the index: %v %v", oid, ok)
	}
	if oid, ok := ClassOID(e, "pg_class"); !ok || oid != 1259 {
		t.Errorf("'pg_class'::regclass = %v", oid)
	}
	if _, ok := ClassOID(e, "nothing"); ok {
		t.Error("regclass of a missing relation")
	}
}

func TestArrays(t *testing.T) {
	for _, tc := range []struct {
		vals []any
		text string
	}{
		{[]any{"a", "b c", nil, "", `q"x`, "NULL"}, `{a,"b c",NULL,"","q\"x","NULL"}`},
		{[]any{int64(1), int64(-2)}, "{1,-2}"},
		{nil, "{}"},
	} {
		if got := FormatArray(tc.vals); got != tc.text {
			t.Errorf("FormatArray(%v) = %s, want %s", tc.vals, got, tc.text)
		}
		els := ParseArray(tc.text)
		if len(els) != len(tc.vals) {
			t.Fatalf("ParseArray(%s): %d elements", tc.text, len(els))
		}
		for i, el := range els {
			switch want := tc.vals[i].(type) {
			case nil:
				if el != nil {
					t.Errorf("%s[%d] = %q, want NULL", tc.text, i, *el)
				}
			case string:
				if el == nil || *el != want {
					t.Errorf("%s[%d] = %v, want %q", tc.text, i, el, want)
				}
			}
		}
	}
}

func TestFormatType(t *testing.T) {
	for _, tc := range []struct {
		oid, mod int64
		want     string
	}{{20, -1, "bigint"}, {1043, 24, "character varying(20)"}, {1114, -1, "timestamp without time zone"}, {1009, -1, "text[]"}, {99999, -1, "???"}} {
		if got, _ := FormatType(tc.oid, tc.mod); got != tc.want {
			t.Errorf("format_type(%d, %d) = %s, want %s", tc.oid, tc.mod, got, tc.want)
		}
	}
}
