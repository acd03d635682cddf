package pgcat

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/exec"
	"github.com/turbinesql/turbinesql/sql"
	"github.com/turbinesql/turbinesql/types"
)

// Func is a catalog function: called a row at a time with Go values
// (int64, float64, string, bool, nil).
type Func struct {
	Name       string
	Min, Max   int // argument counts
	Kind       string
	NArgs      int
	Ret        int64 // pg_type OID of the result, for pg_proc
	Strict     bool  // NULL in, NULL out
	ResultType func(args []types.Type) (types.Type, uint32)
	Eval       func(env Env, args []any) (any, error)
}

var funcs = map[string]*Func{}

// LookupFunc finds a catalog function by lower-case name.
func LookupFunc(name string) (*Func, bool) {
	f, ok := funcs[strings.ToLower(name)]
	return f, ok
}

// Functions lists the catalog functions by name, for pg_proc.
func Functions() []*Func {
	var out []*Func
	for _, f := range funcs {
		if !strings.HasPrefix(f.Name, "__") {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func fixed(t types.Type, oid uint32) func([]types.Type) (types.Type, uint32) {
	return func([]types.Type) (types.Type, uint32) { return t, oid }
}

func reg(name string, min, max int, t types.Type, oid uint32, strict bool, eval func(Env, []any) (any, error)) {
	funcs[name] = &Func{Name: name, Min: min, Max: max, Kind: "f", NArgs: min, Ret: int64(oid), Strict: strict,
		ResultType: fixed(t, oid), Eval: eval}
}

func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case float64:
		return int64(x), true
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// StatementContext is implemented by an Env that runs statements under a
// context: functions that wait (pg_sleep) stop when it ends.
type StatementContext interface {
	StatementContext() context.Context
}

// sleep is pg_sleep(seconds): it waits, or stops with the statement's
// context (statement_timeout, a cancel request, the client leaving). An
// Env without a context (planning) does not wait.
func sleep(env Env, arg any) error {
	var secs float64
	switch x := arg.(type) {
	case int64:
		secs = float64(x)
	case float64:
		secs = x
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return sql.Errorf("22P02", "invalid input syntax for type double precision: %q", x)
		}
		secs = f
	}
	sc, ok := env.(StatementContext)
	if !ok || !(secs > 0) {
		return nil
	}
	ctx := sc.StatementContext()
	if ctx == nil {
		return nil
	}
	t := time.NewTimer(time.Duration(min(secs, 1e9) * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pg_sleep: %w", context.Cause(ctx))
	}
}

func relByOID(env Env, oid int64) (*catalog.Relation, bool) {
	for _, r := range env.Relations() {
		if RelOID(r.Name) == oid {
			return r, true
		}
	}
	return nil, false
}

func indexByOID(env Env, oid int64) (*catalog.Relation, bool) {
	for _, r := range env.Relations() {
		if IndexOID(r.Name) == oid && len(primaryKey(r)) > 0 {
			return r, true
		}
	}
	return nil, false
}

// ClassOID resolves a relation name as regclass does: schema-qualified or
// not, quoted or not. ok is false when nothing has that name.
func ClassOID(env Env, name string) (int64, bool) {
	schema, rel := "", name
	if s, r, found := strings.Cut(name, "."); found {
		schema, rel = unquote(s), r
	}
	rel = unquote(rel)
	if schema == "" || schema == "public" {
		for _, r := range env.Relations() {
			if r.Name == rel {
				return RelOID(r.Name), true
			}
			if len(primaryKey(r)) > 0 && r.Name+"_pkey" == rel {
				return IndexOID(r.Name), true
			}
		}
	}
	if t, ok := Lookup(schema, rel); ok {
		return t.OID, true
	}
	return 0, false
}

func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return strings.ReplaceAll(s[1:len(s)-1], `""`, `"`)
	}
	return strings.ToLower(s)
}

// ClassName is the name regclass prints for an OID (the number itself when
// nothing has it, as PostgreSQL does).
func ClassName(env Env, oid int64) string {
	if r, ok := relByOID(env, oid); ok {
		return r.Name
	}
	if r, ok := indexByOID(env, oid); ok {
		return r.Name + "_pkey"
	}
	for _, t := range All() {
		if t.OID == oid {
			if t.Schema == "information_schema" {
				return "information_schema." + t.Name
			}
			return t.Name
		}
	}
	return strconv.FormatInt(oid, 10)
}

// regCast builds the function behind x::regclass and its kin: text in
// gives the OID (a text literal compared with an oid column), an OID in
// gives the name (what a client prints).
func regCast(name string, byName func(Env, string) (int64, error), byOID func(Env, int64) string) {
	funcs[name] = &Func{Name: name, Min: 1, Max: 1, Strict: true,
		ResultType: func(args []types.Type) (types.Type, uint32) {
			if len(args) == 1 && args[0] == types.Text {
				return types.Int, 26
			}
			return types.Text, 25
		},
		Eval: func(env Env, a []any) (any, error) {
			switch x := a[0].(type) {
			case string:
				if n, err := strconv.ParseInt(x, 10, 64); err == nil {
					return n, nil
				}
				return byName(env, x)
			case int64:
				return byOID(env, x), nil
			}
			return nil, sql.Errorf(sql.CodeDatatypeMismatch, "cannot cast %v to %s", a[0], strings.TrimPrefix(name, "__"))
		}}
}

func init() {
	str := types.Text
	reg("version", 0, 0, str, 25, false, func(Env, []any) (any, error) {
		return "PostgreSQL 16.0 (TurbineSQL), TurbineSQL streaming SQL engine", nil
	})
	reg("current_database", 0, 0, str, 19, false, func(e Env, _ []any) (any, error) { return e.Database(), nil })
	reg("current_catalog", 0, 0, str, 19, false, func(e Env, _ []any) (any, error) { return e.Database(), nil })
	reg("current_schema", 0, 0, str, 19, false, func(Env, []any) (any, error) { return "public", nil })
	reg("current_schemas", 1, 1, str, 1003, true, func(_ Env, a []any) (any, error) {
		if b, _ := a[0].(bool); b {
			return "{pg_catalog,public}", nil
		}
		return "{public}", nil
	})
	for _, n := range []string{"current_user", "session_user", "user", "current_role"} {
		reg(n, 0, 0, str, 19, false, func(e Env, _ []any) (any, error) { return e.User(), nil })
	}
	reg("current_setting", 1, 2, str, 25, true, func(e Env, a []any) (any, error) {
		n, _ := a[0].(string)
		if v, ok := e.Setting(n); ok {
			return v, nil
		}
		if len(a) == 2 && a[1] == true {
			return nil, nil
		}
		return nil, sql.Errorf("42704", "unrecognized configuration parameter %q", n)
	})
	reg("pg_sleep", 1, 1, str, 25, true, func(e Env, a []any) (any, error) {
		return "", sleep(e, a[0])
	})
	reg("pg_backend_pid", 0, 0, types.Int, 23, false, func(Env, []any) (any, error) { return int64(1), nil })
	reg("pg_is_in_recovery", 0, 0, types.Bool, 16, false, func(Env, []any) (any, error) { return false, nil })
	reg("pg_get_userbyid", 1, 1, str, 19, true, func(e Env, a []any) (any, error) {
		n, _ := toInt(a[0])
		for _, r := range e.Roles() {
			if RoleOID(e, r.Name) == n {
				return r.Name, nil
			}
		}
		if n == OIDSuperuser {
			return e.User(), nil
		}
		return fmt.Sprintf("unknown (OID=%v)", a[0]), nil
	})
	visible := func(Env, []any) (any, error) { return true, nil }
	for _, n := range []string{"pg_table_is_visible", "pg_type_is_visible", "pg_function_is_visible", "pg_collation_is_visible",
		"pg_opclass_is_visible", "pg_operator_is_visible", "pg_conversion_is_visible"} {
		reg(n, 1, 1, types.Bool, 16, true, visible)
	}
	for _, n := range []string{"has_table_privilege", "has_schema_privilege", "has_database_privilege", "has_column_privilege"} {
		reg(n, 2, 4, types.Bool, 16, true, visible)
	}
	reg("pg_relation_is_publishable", 1, 1, types.Bool, 16, true, func(Env, []any) (any, error) { return false, nil })
	reg("format_type", 2, 2, str, 25, false, func(_ Env, a []any) (any, error) {
		oid, ok := toInt(a[0])
		if !ok {
			return nil, nil
		}
		mod, ok := toInt(a[1])
		if !ok {
			mod = -1
		}
		s, _ := FormatType(oid, mod)
		return s, nil
	})
	reg("obj_description", 1, 2, str, 25, true, func(e Env, a []any) (any, error) {
		oid, _ := toInt(a[0])
		if len(a) == 2 && a[1] != "pg_class" {
			return nil, nil
		}
		if r, ok := relByOID(e, oid); ok {
			return Description(r), nil
		}
		return nil, nil
	})
	reg("col_description", 2, 2, str, 25, true, func(Env, []any) (any, error) { return nil, nil })
	reg("shobj_description", 2, 2, str, 25, true, func(Env, []any) (any, error) { return nil, nil })
	reg("pg_get_viewdef", 1, 2, str, 25, true, func(e Env, a []any) (any, error) {
		oid, _ := toInt(a[0])
		if r, ok := relByOID(e, oid); ok {
			return ViewDef(r), nil
		}
		return nil, nil
	})
	reg("pg_get_indexdef", 1, 3, str, 25, true, func(e Env, a []any) (any, error) {
		oid, _ := toInt(a[0])
		r, ok := indexByOID(e, oid)
		if !ok {
			return nil, nil
		}
		pk := primaryKey(r)
		if len(a) > 1 {
			if col, _ := toInt(a[1]); col > 0 {
				if int(col) > len(pk) {
					return "", nil
				}
				return pk[col-1], nil
			}
		}
		return fmt.Sprintf("CREATE UNIQUE INDEX %s_pkey ON public.%s USING btree (%s)", r.Name, r.Name, strings.Join(pk, ", ")), nil
	})
	reg("pg_get_constraintdef", 1, 2, str, 25, true, func(e Env, a []any) (any, error) {
		oid, _ := toInt(a[0])
		if r, ok := indexByOID(e, oid-2); ok {
			return "PRIMARY KEY (" + strings.Join(primaryKey(r), ", ") + ")", nil
		}
		return nil, nil
	})
	// TurbineSQL stores no expressions (defaults, partition bounds,
	// policies): every pg_get_expr input is NULL.
	reg("pg_get_expr", 2, 3, str, 25, true, func(_ Env, a []any) (any, error) { return a[0], nil })
	// No sequences: no column is serial.
	reg("pg_get_serial_sequence", 2, 2, str, 25, true, func(Env, []any) (any, error) { return nil, nil })
	reg("pg_get_statisticsobjdef_columns", 1, 1, str, 25, true, func(Env, []any) (any, error) { return nil, nil })
	reg("pg_get_partkeydef", 1, 1, str, 25, true, func(Env, []any) (any, error) { return nil, nil })
	reg("pg_get_function_result", 1, 1, str, 25, true, func(_ Env, a []any) (any, error) {
		oid, _ := toInt(a[0])
		if p, ok := libraryProc(oid); ok {
			t, _ := FormatType(int64(p.RetPGOID()), -1)
			return t, nil
		}
		return nil, nil
	})
	args := func(_ Env, a []any) (any, error) {
		oid, _ := toInt(a[0])
		if p, ok := libraryProc(oid); ok {
			return procArguments(p.Function), nil
		}
		return "", nil
	}
	reg("pg_get_function_arguments", 1, 1, str, 25, true, args)
	reg("pg_get_function_identity_arguments", 1, 1, str, 25, true, args)
	reg("pg_tablespace_location", 1, 1, str, 25, true, func(Env, []any) (any, error) { return "", nil })
	reg("pg_encoding_to_char", 1, 1, str, 19, true, func(_ Env, a []any) (any, error) {
		if n, _ := toInt(a[0]); n == 6 {
			return "UTF8", nil
		}
		return "", nil
	})
	// Sizes: a source or stream lives in Kafka, not in local relation
	// files; its size here is unknown (NULL), never a made-up 0.
	for _, n := range []string{"pg_relation_size", "pg_total_relation_size", "pg_table_size", "pg_indexes_size", "pg_database_size"} {
		reg(n, 1, 2, types.Int, 20, true, func(Env, []any) (any, error) { return nil, nil })
	}
	reg("pg_size_pretty", 1, 1, str, 25, true, func(_ Env, a []any) (any, error) {
		n, _ := toInt(a[0])
		return strconv.FormatInt(n, 10) + " bytes", nil
	})
	reg("quote_ident", 1, 1, str, 25, true, func(_ Env, a []any) (any, error) {
		s, _ := a[0].(string)
		if regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`).MatchString(s) {
			return s, nil
		}
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`, nil
	})
	reg("to_regclass", 1, 1, types.Int, 2205, true, func(e Env, a []any) (any, error) {
		if oid, ok := ClassOID(e, fmt.Sprint(a[0])); ok {
			return oid, nil
		}
		return nil, nil
	})
	reg("to_regtype", 1, 1, types.Int, 2206, true, func(_ Env, a []any) (any, error) {
		if oid := TypeOID(strings.ToLower(strings.TrimSpace(fmt.Sprint(a[0])))); oid != 0 {
			return oid, nil
		}
		return nil, nil
	})
	reg("array_to_string", 2, 3, str, 25, false, func(_ Env, a []any) (any, error) {
		s, ok := a[0].(string)
		if !ok {
			return nil, nil
		}
		sep, _ := a[1].(string)
		var parts []string
		for _, el := range ParseArray(s) {
			if el == nil {
				if len(a) == 3 && a[2] != nil {
					parts = append(parts, fmt.Sprint(a[2]))
				}
				continue
			}
			parts = append(parts, *el)
		}
		return strings.Join(parts, sep), nil
	})
	reg("array_upper", 2, 2, types.Int, 23, true, func(_ Env, a []any) (any, error) {
		n := len(ParseArray(fmt.Sprint(a[0])))
		if d, _ := toInt(a[1]); d != 1 || n == 0 {
			return nil, nil
		}
		return int64(n), nil
	})
	reg("array_length", 2, 2, types.Int, 23, true, func(_ Env, a []any) (any, error) {
		n := len(ParseArray(fmt.Sprint(a[0])))
		if d, _ := toInt(a[1]); d != 1 || n == 0 {
			return nil, nil
		}
		return int64(n), nil
	})
	reg("cardinality", 1, 1, types.Int, 23, true, func(_ Env, a []any) (any, error) {
		return int64(len(ParseArray(fmt.Sprint(a[0])))), nil
	})
	reg("json_build_object", 0, 100, types.Text, 114, false, func(_ Env, a []any) (any, error) {
		if len(a)%2 != 0 {
			return nil, sql.Errorf(sql.CodeInvalidParameter, "argument list must have even number of elements")
		}
		var b strings.Builder
		b.WriteString("{")
		for i := 0; i < len(a); i += 2 {
			if i > 0 {
				b.WriteString(", ")
			}
			k, _ := json.Marshal(fmt.Sprint(a[i]))
			v, _ := json.Marshal(a[i+1])
			b.Write(k)
			b.WriteString(" : ")
			b.Write(v)
		}
		b.WriteString("}")
		return b.String(), nil
	})

	regCast("__regclass", func(e Env, name string) (int64, error) {
		if oid, ok := ClassOID(e, name); ok {
			return oid, nil
		}
		return 0, sql.Errorf(sql.CodeUndefinedTable, "relation %q does not exist", name)
	}, ClassName)
	regCast("__regtype", func(_ Env, name string) (int64, error) {
		if oid := TypeOID(strings.ToLower(strings.TrimSpace(name))); oid != 0 {
			return oid, nil
		}
		return 0, sql.Errorf("42704", "type %q does not exist", name)
	}, func(_ Env, oid int64) string {
		if t, ok := typeByOID(oid); ok {
			return t.display
		}
		return strconv.FormatInt(oid, 10)
	})
	// regproc values are function names here (pg_type.typinput holds
	// 'array_in'), so 'pg_catalog.array_in'::regproc is the bare name.
	funcs["__regproc"] = &Func{Name: "__regproc", Min: 1, Max: 1, Strict: true, ResultType: fixed(types.Text, 25),
		Eval: func(_ Env, a []any) (any, error) {
			if n, ok := a[0].(int64); ok {
				fs := Functions()
				if i := int(n - 5000); i >= 0 && i < len(fs) {
					return fs[i].Name, nil
				}
				if p, ok := libraryProc(n); ok {
					return p.Name, nil
				}
				return strconv.FormatInt(n, 10), nil
			}
			return strings.TrimPrefix(strings.ToLower(fmt.Sprint(a[0])), "pg_catalog."), nil
		}}
	regCast("__regnamespace", func(_ Env, name string) (int64, error) {
		switch unquote(name) {
		case "pg_catalog":
			return OIDPgCatalog, nil
		case "public":
			return OIDPublic, nil
		case "information_schema":
			return OIDInformationSchema, nil
		}
		return 0, sql.Errorf("3F000", "schema %q does not exist", name)
	}, func(_ Env, oid int64) string {
		switch oid {
		case OIDPgCatalog:
			return "pg_catalog"
		case OIDPublic:
			return "public"
		case OIDInformationSchema:
			return "information_schema"
		}
		return strconv.FormatInt(oid, 10)
	})
	regCast("__regrole", func(e Env, name string) (int64, error) {
		if unquote(name) == e.User() {
			return OIDSuperuser, nil
		}
		return 0, sql.Errorf("42704", "role %q does not exist", name)
	}, func(e Env, oid int64) string {
		if oid == OIDSuperuser {
			return e.User()
		}
		return strconv.FormatInt(oid, 10)
	})
	funcs["__oid"] = &Func{Name: "__oid", Min: 1, Max: 1, Strict: true, ResultType: fixed(types.Int, 26),
		Eval: func(_ Env, a []any) (any, error) {
			if n, ok := toInt(a[0]); ok && n >= 0 && n <= 1<<32-1 {
				return n, nil
			}
			return nil, sql.Errorf("22P02", "invalid input syntax for type oid: %q", fmt.Sprint(a[0]))
		}}
	funcs[sql.ArrayCastFunc] = &Func{Name: sql.ArrayCastFunc, Min: 1, Max: 1, Strict: true, ResultType: fixed(types.Text, 25),
		Eval: func(_ Env, a []any) (any, error) {
			s := fmt.Sprint(a[0])
			if !strings.HasPrefix(s, "{") { // int2vector's text form: '1 2'
				s = "{" + strings.Join(strings.Fields(s), ",") + "}"
			}
			return s, nil
		}}
	funcs[sql.ArrayFunc] = &Func{Name: sql.ArrayFunc, Min: 0, Max: 1000,
		ResultType: func(args []types.Type) (types.Type, uint32) {
			for _, t := range args {
				if t != types.Unknown {
					return types.Text, ArrayOID(t.OID())
				}
			}
			return types.Text, 1009
		},
		Eval: func(_ Env, a []any) (any, error) { return FormatArray(a), nil }}
	funcs[sql.CIFunc] = &Func{Name: sql.CIFunc, Min: 1, Max: 1, Strict: true, ResultType: fixed(types.Text, 25),
		Eval: func(_ Env, a []any) (any, error) { return "(?i)" + fmt.Sprint(a[0]), nil }}
	funcs[sql.SubscriptFunc] = &Func{Name: sql.SubscriptFunc, Min: 2, Max: 2, Strict: true, ResultType: fixed(types.Text, 25),
		Eval: func(_ Env, a []any) (any, error) {
			els := ParseArray(fmt.Sprint(a[0]))
			i, _ := toInt(a[1])
			if i < 1 || int(i) > len(els) || els[i-1] == nil {
				return nil, nil
			}
			return *els[i-1], nil
		}}
}

// libraryOIDBase numbers the pg_proc rows of the engine's scalar function
// library (exec's kernels, one row per overload), after the catalog
// functions' 5000 + i.
const libraryOIDBase = 7000

// LibraryProc is one overload of a library function, with its pg_proc OID.
type LibraryProc struct {
	OID int64
	exec.Function
}

// LibraryProcs lists the library's functions as pg_proc rows: named
// functions only (operators such as ~ are pg_operator's, not pg_proc's).
func LibraryProcs() []LibraryProc {
	var out []LibraryProc
	for i, f := range exec.Signatures() {
		if strings.ContainsAny(f.Name, " ~") {
			continue
		}
		out = append(out, LibraryProc{OID: libraryOIDBase + int64(i), Function: f})
	}
	return out
}

func libraryProc(oid int64) (LibraryProc, bool) {
	for _, p := range LibraryProcs() {
		if p.OID == oid {
			return p, true
		}
	}
	return LibraryProc{}, false
}

// ArgOID is the pg_type OID of a library function's parameter:
// types.Unknown is PostgreSQL's "any".
func ArgOID(t types.Type) int64 {
	switch t {
	case types.Unknown:
		return 2276
	case types.Interval:
		return 1186
	}
	return int64(t.OID())
}

// procArguments prints a function's parameters as
// pg_get_function_arguments does: "text, VARIADIC "any"".
func procArguments(f exec.Function) string {
	parts := make([]string, len(f.Args))
	for i, t := range f.Args {
		parts[i], _ = FormatType(ArgOID(t), -1)
		if f.Variadic && i == len(f.Args)-1 {
			if t != types.Unknown {
				parts[i] += "[]"
			}
			parts[i] = "VARIADIC " + parts[i]
		}
	}
	return strings.Join(parts, ", ")
}

// FormatArray prints values as a PostgreSQL array literal.
func FormatArray(vals []any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		switch x := v.(type) {
		case nil:
			parts[i] = "NULL"
		case bool:
			parts[i] = map[bool]string{true: "t", false: "f"}[x]
		case string:
			if x == "" || strings.ContainsAny(x, `{},"\ `) || strings.EqualFold(x, "null") {
				x = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(x) + `"`
			}
			parts[i] = x
		default:
			parts[i] = fmt.Sprint(x)
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// ParseArray reads a one-dimensional array literal ('{a,"b c",NULL}');
// nil elements are NULLs.
func ParseArray(s string) []*string {
	s = strings.TrimSpace(s)
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil
	}
	body := s[1 : len(s)-1]
	var out []*string
	if strings.TrimSpace(body) == "" {
		return out
	}
	var cur strings.Builder
	quoted, inQuote := false, false
	flush := func() {
		v := cur.String()
		if !quoted && strings.EqualFold(strings.TrimSpace(v), "null") {
			out = append(out, nil)
		} else {
			if !quoted {
				v = strings.TrimSpace(v)
			}
			out = append(out, &v)
		}
		cur.Reset()
		quoted = false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case inQuote && c == '\\' && i+1 < len(body):
			i++
			cur.WriteByte(body[i])
		case c == '"':
			inQuote = !inQuote
			quoted = true
		case c == ',' && !inQuote:
			flush()
		default:
			cur.WriteByte(c)
		}
	}
	flush()
	return out
}
