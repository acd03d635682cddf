// Package pgcat is PostgreSQL's system catalog (pg_catalog) and
// information_schema as virtual relations over TurbineSQL's catalog:
// sources are tables (relkind 'r') and streams materialized views (relkind
// 'm') in schema public, an upsert stream's group key is its primary key
// (an index <stream>_pkey and a constraint). Each table is an Arrow record
// batch built when a query reads it; the planner and the vectorised
// evaluator run every query over them, as over any relation. Catalog
// objects TurbineSQL has none of (policies, triggers, inheritance,
// publications, ...) are real tables with no rows.
//
// The package also holds the catalog's scalar functions (format_type,
// pg_get_indexdef, regclass lookups, ...), which answer from the same rows.
package pgcat

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/types"
)

// Env is what the catalog tables are built from: the declared relations
// and the session asking.
type Env interface {
	Relations() []*catalog.Relation
	User() string
	Database() string
	// Setting is a run-time setting's value (SHOW, current_setting).
	Setting(name string) (string, bool)
	SettingNames() []string
	// Roles are the users (pg_roles); admins are superusers.
	Roles() []Role
}

// Role is a user as pg_roles shows it.
type Role struct {
	Name  string
	Super bool
}

// RoleOID is a role's OID: the session's own user is the owner of every
// relation (10, PostgreSQL's bootstrap superuser), others derive from
// their names.
func RoleOID(env Env, name string) int64 {
	if name == env.User() {
		return OIDSuperuser
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return 16384 + int64(h.Sum32()%(1<<29))*2 + 1
}

// Column is a column of a virtual table: its engine type and the
// PostgreSQL type clients are told (oid, name, int2, ...).
type Column struct {
	Name string
	Type types.Type
	OID  uint32
}

// Table is one virtual relation.
type Table struct {
	Schema string // pg_catalog or information_schema
	Name   string
	OID    int64
	Cols   []Column
	rows   func(Env) [][]any
}

// Fields is the table's schema for the planner.
func (t *Table) Fields() types.Schema {
	s := make(types.Schema, len(t.Cols))
	for i, c := range t.Cols {
		s[i] = types.Field{Name: c.Name, Type: c.Type, OID: c.OID}
	}
	return s
}

// Rows builds the table's rows now (nil: no rows).
func (t *Table) Rows(env Env) [][]any {
	if t.rows == nil {
		return nil
	}
	return t.rows(env)
}

// Batch builds the table as an Arrow record batch.
func (t *Table) Batch(env Env, mem memory.Allocator) (arrow.RecordBatch, error) {
	rows := t.Rows(env)
	b := array.NewRecordBuilder(mem, t.Fields().Arrow())
	defer b.Release()
	for _, r := range rows {
		for c, v := range r {
			if err := appendValue(b.Field(c), v); err != nil {
				return nil, fmt.Errorf("%s.%s column %s: %w", t.Schema, t.Name, t.Cols[c].Name, err)
			}
		}
	}
	return b.NewRecordBatch(), nil
}

func appendValue(b array.Builder, v any) error {
	if v == nil {
		b.AppendNull()
		return nil
	}
	switch bb := b.(type) {
	case *array.Int64Builder:
		switch x := v.(type) {
		case int64:
			bb.Append(x)
			return nil
		case int:
			bb.Append(int64(x))
			return nil
		}
	case *array.Float64Builder:
		if x, ok := v.(float64); ok {
			bb.Append(x)
			return nil
		}
	case *array.StringBuilder:
		if x, ok := v.(string); ok {
			bb.Append(x)
			return nil
		}
	case *array.BooleanBuilder:
		if x, ok := v.(bool); ok {
			bb.Append(x)
			return nil
		}
	}
	return fmt.Errorf("value %v (%T) does not fit %s", v, v, b.Type())
}

// Namespace OIDs, as in PostgreSQL.
const (
	OIDPgCatalog         = 11
	OIDPublic            = 2200
	OIDInformationSchema = 13000
	OIDSuperuser         = 10
	OIDDatabase          = 16383
)

// RelOID is the OID a source or stream is shown with: derived from its
// name, so it stays the same between the queries of one \d command and
// across restarts.
func RelOID(name string) int64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return 16384 + int64(h.Sum32()%(1<<29))*2
}

// IndexOID is the OID of an upsert stream's primary-key index (odd, so it
// never meets a relation's).
func IndexOID(name string) int64 { return RelOID(name) + 1 }

// tables holds every virtual table by schema and name.
var tables = map[string]map[string]*Table{"pg_catalog": {}, "information_schema": {}}

// Lookup finds a virtual table. An unqualified name is looked up in
// pg_catalog, which PostgreSQL's search_path always holds first.
func Lookup(schema, name string) (*Table, bool) {
	schema, name = strings.ToLower(schema), strings.ToLower(name)
	if schema == "" {
		schema = "pg_catalog"
	}
	ts, ok := tables[schema]
	if !ok {
		return nil, false
	}
	t, ok := ts[name]
	return t, ok
}

// IsSystemSchema reports whether schema holds virtual tables.
func IsSystemSchema(schema string) bool {
	_, ok := tables[strings.ToLower(schema)]
	return ok
}

// All lists the virtual tables, by schema then name.
func All() []*Table {
	var out []*Table
	for _, ts := range tables {
		for _, t := range ts {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Schema != out[j].Schema {
			return out[i].Schema < out[j].Schema
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// def declares a table. spec lists its columns as "name:type" with
// PostgreSQL type names; rows returns values in that order (nil: no rows).
func def(schema, name string, oid int64, spec string, rows func(Env) [][]any) *Table {
	t := &Table{Schema: schema, Name: name, OID: oid, rows: rows}
	for _, f := range strings.Fields(spec) {
		n, ty, _ := strings.Cut(f, ":")
		c, ok := pgColumnTypes[ty]
		if !ok {
			panic("pgcat: unknown column type " + ty + " in " + name) // a constant spec: caught by any test
		}
		c.Name = n
		t.Cols = append(t.Cols, c)
	}
	tables[schema][name] = t
	return t
}

// pgColumnTypes maps the PostgreSQL type of a catalog column to the engine
// type it is carried as. Arrays travel as their text form ('{a,b}', and
// '1 2' for int2vector and oidvector), which is what the text protocol
// sends.
var pgColumnTypes = map[string]Column{
	"oid": {Type: types.Int, OID: 26}, "regproc": {Type: types.Text, OID: 25}, "int2": {Type: types.Int, OID: 21},
	"int4": {Type: types.Int, OID: 23}, "int8": {Type: types.Int, OID: 20}, "float4": {Type: types.Double, OID: 700},
	"float8": {Type: types.Double, OID: 701}, "bool": {Type: types.Bool, OID: 16}, "name": {Type: types.Text, OID: 19},
	"char": {Type: types.Text, OID: 18}, "text": {Type: types.Text, OID: 25},
	"text[]": {Type: types.Text, OID: 1009}, "oid[]": {Type: types.Text, OID: 1028}, "int2[]": {Type: types.Text, OID: 1005},
	"char[]": {Type: types.Text, OID: 1002}, "int2vector": {Type: types.Text, OID: 22}, "oidvector": {Type: types.Text, OID: 30},
	"varchar": {Type: types.Text, OID: 1043}, "ts": {Type: types.Timestamp, OID: 1114},
}

// record fills a row of t from named values. A column not named gets the
// value PostgreSQL's catalogs hold for the objects TurbineSQL has: 0 for
// numbers, false for booleans, the empty string for name and "char", NULL
// for text and arrays.
func record(t *Table, vals map[string]any) []any {
	row := make([]any, len(t.Cols))
	for i, c := range t.Cols {
		if v, ok := vals[c.Name]; ok {
			row[i] = v
			continue
		}
		switch {
		case c.Type == types.Int:
			row[i] = int64(0)
		case c.Type == types.Double:
			row[i] = float64(0)
		case c.Type == types.Bool:
			row[i] = false
		case c.OID == 19 || c.OID == 18:
			row[i] = ""
		}
	}
	return row
}

// intArrayColumns are the catalog's arrays of integers (int2vector,
// oidvector, int2[], oid[]): their elements are numbers.
var intArrayColumns = map[string]bool{"indkey": true, "indclass": true, "indcollation": true, "indoption": true,
	"conkey": true, "confkey": true, "conpfeqop": true, "conppeqop": true, "conffeqop": true, "conexclop": true,
	"proargtypes": true, "proallargtypes": true, "stxkeys": true, "partattrs": true, "prattrs": true, "polroles": true,
	"tgattr": true}

// IntArrayColumn reports whether a catalog column of this name is an array
// of integers.
func IntArrayColumn(name string) bool { return intArrayColumns[strings.ToLower(name)] }

// ArrayOID is the array type of an element type (text[] for text), 0 if
// there is none.
func ArrayOID(elem uint32) uint32 {
	if t, ok := typeByOID(int64(elem)); ok {
		return uint32(t.array)
	}
	return 0
}
