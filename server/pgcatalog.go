package server

import (
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/pgwire"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// PostgreSQL clients ask the server about itself in SQL: psql's \d family
// reads pg_catalog.pg_class and pg_attribute, drivers look up types in
// pg_type, tools read information_schema, connection pools send SELECT 1.
// This file answers those queries from our catalog. It is not an emulation
// of pg_catalog: it recognises SELECTs over catalog tables, picks the
// table whose rows the query returns (pg_attribute over pg_class over
// pg_type; pg_namespace, pg_am and pg_description joined to it are read as
// columns of its rows), builds that table's rows from the catalog (sources
// are tables, relkind 'r'; streams are materialized views, relkind 'm'),
// keeps the rows its WHERE clause does not rule out and evaluates the
// select list and ORDER BY with the small evaluator of pgcatalog_eval.go.
// Catalog tables it does not know (pg_index, pg_constraint, pg_policy,
// pg_inherits, ...) are empty, which is the truth: TurbineSQL has no
// indexes, constraints, policies or inheritance. pgcatalog_test.go pins
// the queries psql 15, PgJDBC and psycopg send.

// Namespace OIDs, as in PostgreSQL.
const (
	oidPgCatalog         = 11
	oidPublic            = 2200
	oidInformationSchema = 13000
	oidBootstrapSuper    = 10
)

// catalogTables are the catalog tables that have rows here. Any other
// table in a catalog schema is empty.
var catalogTables = map[string]func(*session) *vtable{
	"pg_class":     (*session).pgClass,
	"pg_attribute": (*session).pgAttribute,
	"pg_type":      (*session).pgType,
	"pg_namespace": (*session).pgNamespace,
	"pg_database":  (*session).pgDatabase,
	"pg_settings":  (*session).pgSettings,
	"tables":       (*session).infoTables,
	"columns":      (*session).infoColumns,
	"schemata":     (*session).infoSchemata,
}

// joinedTables may be joined to the main table without changing its rows:
// the columns queries read from them (nspname, amname, ...) are part of
// the main table's rows.
var joinedTables = map[string]bool{
	"pg_namespace": true, "pg_am": true, "pg_class": true, "pg_description": true,
	"pg_attrdef": true, "pg_collation": true, "pg_type": true,
}

// vtable is a catalog table's rows. cols types every column any row may
// have; a column missing from a row is NULL.
type vtable struct {
	cols map[string]uint32
	rows []map[string]any
}

// catalogQuery answers text when it is a catalog query: a SELECT over
// pg_catalog or information_schema tables, or a SELECT without FROM of
// constants and session functions (SELECT 1, SELECT version(),
// current_setting('...')). ok is false for anything else, which the engine
// then runs.
func (s *session) catalogQuery(text string, params []pgwire.Param) (res *pgwire.Result, nparams int, ok bool) {
	if !looksLikeSelect(text) {
		return nil, 0, false
	}
	toks, lexed := pgLex(text)
	if !lexed {
		return nil, 0, false
	}
	// psql's \d asks about publications with a UNION of three SELECTs:
	// each part is answered and the rows concatenated.
	parts := splitUnion(toks)
	for i, part := range parts {
		r, n, ok := s.catalogSelect(part, params)
		if !ok {
			return nil, 0, false
		}
		if i == 0 {
			res, nparams = r, n
			continue
		}
		if len(r.Columns) != len(res.Columns) {
			return nil, 0, false
		}
		res.Rows = append(res.Rows, r.Rows...)
		nparams = max(nparams, n)
	}
	res.Tag = "SELECT " + strconv.Itoa(len(res.Rows))
	return res, nparams, true
}

// splitUnion cuts toks at top-level UNION [ALL]. A trailing ORDER BY stays
// with the last part, where it is ignored like any ORDER BY.
func splitUnion(toks []ptok) [][]ptok {
	var out [][]ptok
	depth, start := 0, 0
	for i := 0; i < len(toks); i++ {
		switch t := toks[i]; {
		case t.op("("):
			depth++
		case t.op(")"):
			depth--
		case depth == 0 && t.kw("union"):
			out = append(out, toks[start:i])
			if i+1 < len(toks) && (toks[i+1].kw("all") || toks[i+1].kw("distinct")) {
				i++
			}
			start = i + 1
		}
	}
	return append(out, toks[start:])
}

// catalogSelect answers one SELECT of a catalog query.
func (s *session) catalogSelect(toks []ptok, params []pgwire.Param) (res *pgwire.Result, nparams int, ok bool) {
	q, isSelect := splitSelect(toks)
	if !isSelect {
		return nil, 0, false
	}
	ev := &evaluator{s: s, params: params}
	if len(q.from) == 0 || q.from[0].values != nil {
		// SELECT 1, SELECT version(), and psql's \gdesc: SELECT name,
		// format_type(tp, tpm) FROM (VALUES ...) s(name, tp, tpm). The
		// whole query must be understood: otherwise the engine's error
		// (SELECT needs a FROM clause) is the answer.
		if len(q.from) > 1 {
			return nil, 0, false
		}
		ev.strict = true
		tbl := &vtable{cols: map[string]uint32{}, rows: []map[string]any{{}}}
		var main fromTable
		if len(q.from) == 1 {
			main = q.from[0]
			if tbl, ok = ev.valuesTable(main); !ok {
				return nil, 0, false
			}
		}
		ev.bind(tbl, q.from, main)
		ev.filter(q.where)
		res := ev.project(q)
		if ev.failed {
			return nil, 0, false
		}
		return res, q.nparams, true
	}
	if !s.isCatalogTable(q.from[0]) {
		return nil, 0, false
	}
	main, tbl := s.mainTable(q.from)
	ev.bind(tbl, q.from, main)
	ev.filter(q.where)
	return ev.project(q), q.nparams, true
}

// mainTable picks the table whose rows a catalog query returns: the one
// of finest grain among its inner-joined tables (a column of a relation in
// a namespace is a pg_attribute row), else the first. The result is empty
// when an inner-joined table is one that has no rows here.
func (s *session) mainTable(from []fromTable) (fromTable, *vtable) {
	main := from[0]
	for _, pref := range []string{"pg_attribute", "pg_class", "pg_type"} {
		found := false
		for _, ft := range from {
			if ft.name == pref && !ft.outer && (ft.schema == "" || ft.schema == "pg_catalog") {
				main, found = ft, true
				break
			}
		}
		if found {
			break
		}
	}
	tbl := &vtable{cols: map[string]uint32{}}
	infoSchema := main.name == "tables" || main.name == "columns" || main.name == "schemata"
	if build, ok := catalogTables[main.name]; ok && (main.schema == "information_schema") == infoSchema {
		tbl = build(s)
	}
	for _, ft := range from {
		if !ft.outer && !joinedTables[ft.name] && catalogTables[ft.name] == nil {
			tbl.rows = nil // an inner join with a table that has no rows
		}
	}
	return main, tbl
}

// looksLikeSelect is a cheap test run on every statement before the
// catalog query is lexed.
func looksLikeSelect(text string) bool {
	t := strings.TrimLeft(text, " \t\r\n(")
	return len(t) >= 6 && strings.EqualFold(t[:6], "select")
}

// isCatalogTable reports whether ft names a catalog table rather than one
// of ours.
func (s *session) isCatalogTable(ft fromTable) bool {
	switch ft.schema {
	case "pg_catalog", "information_schema":
		return true
	case "":
		if _, ours := s.srv.cat.Relation(ft.name); ours {
			return false
		}
		return strings.HasPrefix(ft.name, "pg_")
	}
	return false
}

// relOID is the OID a relation is shown with. It is derived from the name
// so that it stays the same between the queries of one \d command.
func relOID(name string) int64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return 16384 + int64(h.Sum32()%(1<<30))
}

// relByOID finds the relation a catalog OID stands for.
func (s *session) relByOID(oid int64) (*catalog.Relation, bool) {
	for _, r := range s.relations() {
		if relOID(r.Name) == oid {
			return r, true
		}
	}
	return nil, false
}

// relations lists sources then streams, each by name.
func (s *session) relations() []*catalog.Relation {
	var out []*catalog.Relation
	for _, src := range s.srv.cat.Sources() {
		if r, ok := s.srv.cat.Relation(src.Name); ok {
			out = append(out, r)
		}
	}
	for _, st := range s.srv.cat.Streams() {
		if r, ok := s.srv.cat.Relation(st.Name); ok {
			out = append(out, r)
		}
	}
	return out
}

func relKind(r *catalog.Relation) string {
	if r.Kind == catalog.KindStream {
		return "m"
	}
	return "r"
}

func relDescription(r *catalog.Relation) string {
	if r.Kind == catalog.KindStream {
		return "stream reading " + r.Stream.Input + ", writing Kafka topic " + r.Topic
	}
	return "source on Kafka topic " + r.Topic
}

// viewDef is what pg_get_viewdef shows for a stream: its SELECT.
func viewDef(r *catalog.Relation) any {
	if r.Stream == nil {
		return nil
	}
	if st, err := sql.Parse(r.Stream.SQL); err == nil {
		if cs, ok := st.(*sql.CreateStream); ok && cs.QueryText != "" {
			return cs.QueryText
		}
	}
	return r.Stream.SQL
}

// pgTypeOf is the PostgreSQL type a column of type t is sent as.
func pgTypeOf(t types.Type) int64 { return int64(t.OID()) }

// pgTypes are the rows of pg_type: the types TurbineSQL sends or accepts.
var pgTypes = []struct {
	oid      int64
	name     string
	display  string
	len      int64
	category string
}{
	{16, "bool", "boolean", 1, "B"},
	{18, "char", "\"char\"", 1, "Z"},
	{19, "name", "name", 64, "S"},
	{20, "int8", "bigint", 8, "N"},
	{21, "int2", "smallint", 2, "N"},
	{23, "int4", "integer", 4, "N"},
	{25, "text", "text", -1, "S"},
	{26, "oid", "oid", 4, "N"},
	{700, "float4", "real", 4, "N"},
	{701, "float8", "double precision", 8, "N"},
	{705, "unknown", "unknown", -2, "X"},
	{1043, "varchar", "character varying", -1, "S"},
	{1114, "timestamp", "timestamp without time zone", 8, "D"},
	{1184, "timestamptz", "timestamp with time zone", 8, "D"},
}

func typeDisplay(oid int64) any {
	for _, t := range pgTypes {
		if t.oid == oid {
			return t.display
		}
	}
	return nil
}

func (s *session) pgClass() *vtable {
	t := &vtable{cols: map[string]uint32{
		"oid": pgwire.OIDOid, "relname": pgwire.OIDName, "relnamespace": pgwire.OIDOid, "reltype": pgwire.OIDOid, "relowner": pgwire.OIDOid,
		"relam": pgwire.OIDOid, "relkind": pgwire.OIDChar, "relnatts": pgwire.OIDInt2, "relchecks": pgwire.OIDInt2,
		"relhasindex": pgwire.OIDBool, "relhasrules": pgwire.OIDBool, "relhastriggers": pgwire.OIDBool,
		"relrowsecurity": pgwire.OIDBool, "relforcerowsecurity": pgwire.OIDBool, "relhasoids": pgwire.OIDBool,
		"relispartition": pgwire.OIDBool, "relhassubclass": pgwire.OIDBool, "relispopulated": pgwire.OIDBool,
		"reltablespace": pgwire.OIDOid, "reloftype": pgwire.OIDOid, "relpersistence": pgwire.OIDChar, "relreplident": pgwire.OIDChar,
		"reltuples": pgwire.OIDFloat4, "relpages": pgwire.OIDInt4, "reltoastrelid": pgwire.OIDOid,
		"reloptions": pgwire.OIDText, "relacl": pgwire.OIDText, "relpartbound": pgwire.OIDText,
		"nspname": pgwire.OIDName, "amname": pgwire.OIDName, "description": pgwire.OIDText,
		"viewdef": pgwire.OIDText, "rel_oid": pgwire.OIDOid, "nsp_oid": pgwire.OIDOid,
	}}
	for _, r := range s.relations() {
		t.rows = append(t.rows, map[string]any{
			"oid": relOID(r.Name), "relname": r.Name, "relnamespace": int64(oidPublic), "reltype": int64(0),
			"relowner": int64(oidBootstrapSuper), "relam": int64(0), "relkind": relKind(r),
			"relnatts": int64(len(r.Schema)), "relchecks": int64(0), "relhasindex": false, "relhasrules": false,
			"relhastriggers": false, "relrowsecurity": false, "relforcerowsecurity": false, "relhasoids": false,
			"relispartition": false, "relhassubclass": false, "relispopulated": true, "reltablespace": int64(0),
			"reloftype": int64(0), "relpersistence": "p", "relreplident": "d", "reltuples": float64(-1),
			"relpages": int64(0), "reltoastrelid": int64(0), "nspname": "public", "amname": nil,
			"description": relDescription(r), "viewdef": viewDef(r),
			"rel_oid": relOID(r.Name), "nsp_oid": int64(oidPublic),
		})
	}
	return t
}

func (s *session) pgAttribute() *vtable {
	t := &vtable{cols: map[string]uint32{
		"attrelid": pgwire.OIDOid, "attname": pgwire.OIDName, "atttypid": pgwire.OIDOid, "attnum": pgwire.OIDInt2,
		"attlen": pgwire.OIDInt2, "atttypmod": pgwire.OIDInt4, "attnotnull": pgwire.OIDBool,
		"atthasdef": pgwire.OIDBool, "attisdropped": pgwire.OIDBool, "attidentity": pgwire.OIDChar,
		"attgenerated": pgwire.OIDChar, "attstorage": pgwire.OIDChar, "attcollation": pgwire.OIDOid, "attstattarget": pgwire.OIDInt4,
		"attcompression": pgwire.OIDChar, "attndims": pgwire.OIDInt4, "attislocal": pgwire.OIDBool,
		"relname": pgwire.OIDName, "nspname": pgwire.OIDName, "typname": pgwire.OIDName, "relkind": pgwire.OIDChar,
		"rel_oid": pgwire.OIDOid, "nsp_oid": pgwire.OIDOid, "type_oid": pgwire.OIDOid,
	}}
	for _, r := range s.relations() {
		for i, f := range r.Schema {
			storage, length, typname := "p", int64(8), ""
			for _, pt := range pgTypes {
				if pt.oid == pgTypeOf(f.Type) {
					length, typname = pt.len, pt.name
				}
			}
			if length < 0 {
				storage = "x"
			}
			t.rows = append(t.rows, map[string]any{
				"attrelid": relOID(r.Name), "attname": f.Name, "atttypid": pgTypeOf(f.Type), "attnum": int64(i + 1),
				"attlen": length, "atttypmod": int64(-1), "attnotnull": false, "atthasdef": false,
				"attisdropped": false, "attidentity": "", "attgenerated": "", "attstorage": storage,
				"attcollation": int64(0), "attstattarget": int64(-1), "attcompression": "", "attndims": int64(0),
				"attislocal": true, "relname": r.Name, "nspname": "public", "typname": typname, "relkind": relKind(r),
				"rel_oid": relOID(r.Name), "nsp_oid": int64(oidPublic), "type_oid": pgTypeOf(f.Type),
			})
		}
	}
	return t
}

func (s *session) pgType() *vtable {
	t := &vtable{cols: map[string]uint32{
		"oid": pgwire.OIDOid, "typname": pgwire.OIDName, "typnamespace": pgwire.OIDOid, "typowner": pgwire.OIDOid, "typlen": pgwire.OIDInt2,
		"typbyval": pgwire.OIDBool, "typtype": pgwire.OIDChar, "typcategory": pgwire.OIDChar, "typisdefined": pgwire.OIDBool,
		"typdelim": pgwire.OIDChar, "typrelid": pgwire.OIDOid, "typelem": pgwire.OIDOid, "typarray": pgwire.OIDOid, "typbasetype": pgwire.OIDOid,
		"typtypmod": pgwire.OIDInt4, "typndims": pgwire.OIDInt4, "typnotnull": pgwire.OIDBool,
		"typcollation": pgwire.OIDOid, "nspname": pgwire.OIDName, "type_oid": pgwire.OIDOid, "nsp_oid": pgwire.OIDOid,
	}}
	for _, pt := range pgTypes {
		t.rows = append(t.rows, map[string]any{
			"oid": pt.oid, "typname": pt.name, "typnamespace": int64(oidPgCatalog), "typowner": int64(oidBootstrapSuper),
			"typlen": pt.len, "typbyval": pt.len > 0 && pt.len <= 8, "typtype": "b", "typcategory": pt.category,
			"typisdefined": true, "typdelim": ",", "typrelid": int64(0), "typelem": int64(0), "typarray": int64(0),
			"typbasetype": int64(0), "typtypmod": int64(-1), "typndims": int64(0), "typnotnull": false,
			"typcollation": int64(0), "nspname": "pg_catalog", "type_oid": pt.oid, "nsp_oid": int64(oidPgCatalog),
		})
	}
	return t
}

func (s *session) pgNamespace() *vtable {
	t := &vtable{cols: map[string]uint32{"oid": pgwire.OIDOid, "nspname": pgwire.OIDName, "nspowner": pgwire.OIDOid,
		"nsp_oid": pgwire.OIDOid}}
	for _, n := range []struct {
		oid  int64
		name string
	}{{oidPgCatalog, "pg_catalog"}, {oidPublic, "public"}, {oidInformationSchema, "information_schema"}} {
		t.rows = append(t.rows, map[string]any{"oid": n.oid, "nspname": n.name, "nspowner": int64(oidBootstrapSuper),
			"nsp_oid": n.oid})
	}
	return t
}

func (s *session) pgDatabase() *vtable {
	return &vtable{
		cols: map[string]uint32{"oid": pgwire.OIDOid, "datname": pgwire.OIDName, "datdba": pgwire.OIDOid, "encoding": pgwire.OIDInt4,
			"datcollate": pgwire.OIDName, "datctype": pgwire.OIDName, "datallowconn": pgwire.OIDBool, "datistemplate": pgwire.OIDBool},
		rows: []map[string]any{{"oid": int64(16383), "datname": s.database, "datdba": int64(oidBootstrapSuper),
			"encoding": int64(6), "datcollate": "C", "datctype": "C", "datallowconn": true, "datistemplate": false}},
	}
}

func (s *session) pgSettings() *vtable {
	t := &vtable{cols: map[string]uint32{"name": pgwire.OIDText, "setting": pgwire.OIDText, "unit": pgwire.OIDText,
		"category": pgwire.OIDText, "short_desc": pgwire.OIDText, "context": pgwire.OIDText, "vartype": pgwire.OIDText,
		"source": pgwire.OIDText, "reset_val": pgwire.OIDText, "boot_val": pgwire.OIDText}}
	for _, name := range settingNames {
		v, _ := s.setting(name)
		t.rows = append(t.rows, map[string]any{"name": name, "setting": v, "context": "user", "vartype": "string",
			"source": "default", "reset_val": v, "boot_val": v})
	}
	return t
}

func (s *session) infoTables() *vtable {
	t := &vtable{cols: map[string]uint32{"table_catalog": pgwire.OIDName, "table_schema": pgwire.OIDName, "table_name": pgwire.OIDName,
		"table_type": pgwire.OIDText, "is_insertable_into": pgwire.OIDText, "is_typed": pgwire.OIDText}}
	for _, r := range s.relations() {
		typ, insertable := "BASE TABLE", "YES"
		if r.Kind == catalog.KindStream {
			typ, insertable = "VIEW", "NO"
		}
		t.rows = append(t.rows, map[string]any{"table_catalog": s.database, "table_schema": "public", "table_name": r.Name,
			"table_type": typ, "is_insertable_into": insertable, "is_typed": "NO"})
	}
	return t
}

func (s *session) infoColumns() *vtable {
	t := &vtable{cols: map[string]uint32{"table_catalog": pgwire.OIDName, "table_schema": pgwire.OIDName, "table_name": pgwire.OIDName,
		"column_name": pgwire.OIDName, "ordinal_position": pgwire.OIDInt4, "column_default": pgwire.OIDText,
		"is_nullable": pgwire.OIDText, "data_type": pgwire.OIDText, "udt_name": pgwire.OIDName, "udt_schema": pgwire.OIDName}}
	for _, r := range s.relations() {
		for i, f := range r.Schema {
			udt := ""
			for _, pt := range pgTypes {
				if pt.oid == pgTypeOf(f.Type) {
					udt = pt.name
				}
			}
			t.rows = append(t.rows, map[string]any{"table_catalog": s.database, "table_schema": "public",
				"table_name": r.Name, "column_name": f.Name, "ordinal_position": int64(i + 1), "is_nullable": "YES",
				"data_type": typeDisplay(pgTypeOf(f.Type)), "udt_name": udt, "udt_schema": "pg_catalog"})
		}
	}
	return t
}

func (s *session) infoSchemata() *vtable {
	t := &vtable{cols: map[string]uint32{"catalog_name": pgwire.OIDName, "schema_name": pgwire.OIDName, "schema_owner": pgwire.OIDName}}
	for _, n := range []string{"information_schema", "pg_catalog", "public"} {
		t.rows = append(t.rows, map[string]any{"catalog_name": s.database, "schema_name": n, "schema_owner": s.user})
	}
	return t
}

// settingNames are the settings SHOW, current_setting and pg_settings
// answer here, beyond those of show.go.
var settingNames = []string{
	"application_name", "client_encoding", "DateStyle", "default_transaction_isolation",
	"default_transaction_read_only", "extra_float_digits", "integer_datetimes", "IntervalStyle", "is_superuser",
	"lc_collate", "lc_ctype", "max_identifier_length", "search_path", "server_encoding", "server_version",
	"server_version_num", "session_authorization", "standard_conforming_strings", "TimeZone",
	"transaction_isolation", "transaction_read_only",
}

// setting is the value of a run-time setting for this session.
func (s *session) setting(name string) (string, bool) {
	switch strings.ToLower(name) {
	case "application_name":
		return "", true
	case "client_encoding", "server_encoding":
		return "UTF8", true
	case "datestyle":
		return "ISO, MDY", true
	case "default_transaction_isolation", "transaction_isolation":
		return "read committed", true
	case "default_transaction_read_only", "transaction_read_only", "is_superuser":
		return "off", true
	case "extra_float_digits":
		return "1", true
	case "integer_datetimes", "standard_conforming_strings":
		return "on", true
	case "intervalstyle":
		return "postgres", true
	case "lc_collate", "lc_ctype":
		return "C", true
	case "max_identifier_length":
		return "63", true
	case "search_path":
		return `"$user", public`, true
	case "server_version":
		return pgwire.ServerVersion, true
	case "server_version_num":
		return pgwire.ServerVersionNum, true
	case "session_authorization":
		return s.user, true
	case "timezone":
		return "UTC", true
	}
	return "", false
}

// valuesTable is the vtable of a VALUES list of constants.
func (ev *evaluator) valuesTable(ft fromTable) (*vtable, bool) {
	tbl := &vtable{cols: map[string]uint32{}}
	for r, row := range ft.values {
		if len(row) != len(ft.cols) {
			return nil, false
		}
		vals := map[string]any{}
		for i, e := range row {
			v, oid, ok := ev.literal(stripCasts(e))
			if !ok {
				return nil, false
			}
			if r == 0 {
				tbl.cols[ft.cols[i]] = oid
			}
			vals[ft.cols[i]] = v
		}
		tbl.rows = append(tbl.rows, vals)
	}
	return tbl, true
}
