package pgcat

import (
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/turbinesql/turbinesql/catalog"
	"github.com/turbinesql/turbinesql/sql"
)

// systemOID is a virtual table's OID: PostgreSQL's own for the well-known
// catalogs ('pg_class'::regclass is 1259 everywhere), else one below 16384
// derived from the name.
func systemOID(schema, name string) int64 {
	if oid, ok := map[string]int64{"pg_type": 1247, "pg_attribute": 1249, "pg_proc": 1255, "pg_class": 1259,
		"pg_namespace": 2615, "pg_description": 2609, "pg_index": 2610, "pg_constraint": 2606, "pg_database": 1262,
		"pg_am": 2601, "pg_attrdef": 2604, "pg_authid": 1260}[name]; ok && schema == "pg_catalog" {
		return oid
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(schema + "." + name))
	return 12000 + int64(h.Sum32()%4000)
}

func init() {
	pg := func(name, spec string, rows func(Env) [][]any) *Table {
		return def("pg_catalog", name, systemOID("pg_catalog", name), spec, rows)
	}
	is := func(name, spec string, rows func(Env) [][]any) *Table {
		return def("information_schema", name, systemOID("information_schema", name), spec, rows)
	}

	var ns *Table
	ns = pg("pg_namespace", "oid:oid nspname:name nspowner:oid nspacl:text[]", func(Env) [][]any {
		var out [][]any
		for _, n := range []struct {
			oid  int64
			name string
		}{{OIDPgCatalog, "pg_catalog"}, {OIDPublic, "public"}, {OIDInformationSchema, "information_schema"}} {
			out = append(out, record(ns, map[string]any{"oid": n.oid, "nspname": n.name, "nspowner": int64(OIDSuperuser)}))
		}
		return out
	})

	var class *Table
	class = pg("pg_class", "oid:oid relname:name relnamespace:oid reltype:oid reloftype:oid relowner:oid relam:oid "+
		"relfilenode:oid reltablespace:oid relpages:int4 reltuples:float4 relallvisible:int4 reltoastrelid:oid "+
		"relhasindex:bool relisshared:bool relpersistence:char relkind:char relnatts:int2 relchecks:int2 "+
		"relhasrules:bool relhastriggers:bool relhassubclass:bool relrowsecurity:bool relforcerowsecurity:bool "+
		"relispopulated:bool relreplident:char relispartition:bool relrewrite:oid relfrozenxid:int8 relminmxid:int8 "+
		"relacl:text[] reloptions:text[] relpartbound:text", func(env Env) [][]any {
		var out [][]any
		base := func(oid int64, name string, nsp int64, kind string, natts int) map[string]any {
			return map[string]any{"oid": oid, "relname": name, "relnamespace": nsp, "relowner": int64(OIDSuperuser),
				"relpersistence": "p", "relkind": kind, "relnatts": int64(natts), "relispopulated": true,
				"relreplident": "d", "reltuples": float64(-1)}
		}
		for _, r := range env.Relations() {
			v := base(RelOID(r.Name), r.Name, OIDPublic, relKind(r), len(r.Schema))
			v["relam"] = int64(2) // heap
			v["relhasindex"] = len(primaryKey(r)) > 0
			out = append(out, record(class, v))
			if len(primaryKey(r)) > 0 {
				iv := base(IndexOID(r.Name), r.Name+"_pkey", OIDPublic, "i", len(primaryKey(r)))
				iv["relam"] = int64(403) // btree
				out = append(out, record(class, iv))
			}
		}
		for _, t := range All() {
			kind, nsp := "r", int64(OIDPgCatalog)
			if t.Schema == "information_schema" {
				kind, nsp = "v", OIDInformationSchema
			}
			out = append(out, record(class, base(t.OID, t.Name, nsp, kind, len(t.Cols))))
		}
		return out
	})

	var attr *Table
	attr = pg("pg_attribute", "attrelid:oid attname:name atttypid:oid attstattarget:int4 attlen:int2 attnum:int2 "+
		"attndims:int4 attcacheoff:int4 atttypmod:int4 attbyval:bool attalign:char attstorage:char attcompression:char "+
		"attnotnull:bool atthasdef:bool atthasmissing:bool attidentity:char attgenerated:char attisdropped:bool "+
		"attislocal:bool attinhcount:int4 attcollation:oid attacl:text[] attoptions:text[] attfdwoptions:text[]",
		func(env Env) [][]any {
			var out [][]any
			col := func(rel int64, num int, name string, oid int64, notNull bool) {
				t, _ := typeByOID(oid)
				storage := "p"
				if t.len < 0 {
					storage = "x"
				}
				coll := int64(0)
				if t.category == "S" {
					coll = 100 // default collation
				}
				out = append(out, record(attr, map[string]any{"attrelid": rel, "attname": name, "atttypid": oid,
					"attstattarget": int64(-1), "attlen": t.len, "attnum": int64(num), "atttypmod": int64(-1),
					"attbyval": t.len > 0 && t.len <= 8, "attalign": "d", "attstorage": storage, "attislocal": true,
					"attcollation": coll, "attnotnull": notNull}))
			}
			for _, r := range env.Relations() {
				for i, f := range r.Schema {
					col(RelOID(r.Name), i+1, f.Name, int64(f.Type.OID()), notNull(r, i))
				}
				for i, k := range primaryKey(r) {
					if c := r.Schema.Index(k); c >= 0 {
						col(IndexOID(r.Name), i+1, r.Schema[c].Name, int64(r.Schema[c].Type.OID()), false)
					}
				}
			}
			for _, t := range All() {
				for i, c := range t.Cols {
					col(t.OID, i+1, c.Name, int64(c.OID), false)
				}
			}
			return out
		})

	var typ *Table
	typ = pg("pg_type", "oid:oid typname:name typnamespace:oid typowner:oid typlen:int2 typbyval:bool typtype:char "+
		"typcategory:char typispreferred:bool typisdefined:bool typdelim:char typrelid:oid typsubscript:regproc "+
		"typelem:oid typarray:oid typinput:regproc typoutput:regproc typreceive:regproc typsend:regproc "+
		"typmodin:regproc typmodout:regproc typanalyze:regproc typalign:char typstorage:char typnotnull:bool "+
		"typbasetype:oid typtypmod:int4 typndims:int4 typcollation:oid typdefaultbin:text typdefault:text typacl:text[]",
		func(Env) [][]any {
			var out [][]any
			for _, t := range pgTypes {
				in, outf, recv, send := t.name+"in", t.name+"out", t.name+"recv", t.name+"send"
				if t.elem != 0 {
					in, outf, recv, send = "array_in", "array_out", "array_recv", "array_send"
				}
				coll := int64(0)
				if t.category == "S" {
					coll = 100
				}
				out = append(out, record(typ, map[string]any{"oid": t.oid, "typname": t.name, "typnamespace": int64(OIDPgCatalog),
					"typowner": int64(OIDSuperuser), "typlen": t.len, "typbyval": t.len > 0 && t.len <= 8, "typtype": "b",
					"typcategory": t.category, "typisdefined": true, "typdelim": ",", "typelem": t.elem, "typarray": t.array,
					"typinput": in, "typoutput": outf, "typreceive": recv, "typsend": send, "typsubscript": "-",
					"typmodin": "-", "typmodout": "-", "typanalyze": "-", "typalign": "i", "typstorage": "p",
					"typtypmod": int64(-1), "typcollation": coll}))
			}
			return out
		})

	var index *Table
	index = pg("pg_index", "indexrelid:oid indrelid:oid indnatts:int2 indnkeyatts:int2 indisunique:bool "+
		"indnullsnotdistinct:bool indisprimary:bool indisexclusion:bool indimmediate:bool indisclustered:bool "+
		"indisvalid:bool indcheckxmin:bool indisready:bool indislive:bool indisreplident:bool indkey:int2vector "+
		"indcollation:oidvector indclass:oidvector indoption:int2vector indexprs:text indpred:text", func(env Env) [][]any {
		var out [][]any
		for _, r := range env.Relations() {
			pk := primaryKey(r)
			if len(pk) == 0 {
				continue
			}
			out = append(out, record(index, map[string]any{"indexrelid": IndexOID(r.Name), "indrelid": RelOID(r.Name),
				"indnatts": int64(len(pk)), "indnkeyatts": int64(len(pk)), "indisunique": true, "indisprimary": true,
				"indimmediate": true, "indisvalid": true, "indisready": true, "indislive": true,
				"indkey": attnums(r, pk, " ")}))
		}
		return out
	})

	var con *Table
	con = pg("pg_constraint", "oid:oid conname:name connamespace:oid contype:char condeferrable:bool condeferred:bool "+
		"convalidated:bool conrelid:oid contypid:oid conindid:oid conparentid:oid confrelid:oid confupdtype:char "+
		"confdeltype:char confmatchtype:char conislocal:bool coninhcount:int4 connoinherit:bool conkey:int2[] "+
		"confkey:int2[] conpfeqop:oid[] conppeqop:oid[] conffeqop:oid[] confdelsetcols:int2[] conexclop:oid[] conbin:text",
		func(env Env) [][]any {
			var out [][]any
			for _, r := range env.Relations() {
				pk := primaryKey(r)
				if len(pk) == 0 {
					continue
				}
				out = append(out, record(con, map[string]any{"oid": IndexOID(r.Name) + 2, "conname": r.Name + "_pkey",
					"connamespace": int64(OIDPublic), "contype": "p", "convalidated": true, "conrelid": RelOID(r.Name),
					"conindid": IndexOID(r.Name), "confupdtype": " ", "confdeltype": " ", "confmatchtype": " ",
					"conislocal": true, "connoinherit": true, "conkey": "{" + attnums(r, pk, ",") + "}"}))
			}
			return out
		})

	var desc *Table
	desc = pg("pg_description", "objoid:oid classoid:oid objsubid:int4 description:text", func(env Env) [][]any {
		var out [][]any
		for _, r := range env.Relations() {
			out = append(out, record(desc, map[string]any{"objoid": RelOID(r.Name), "classoid": int64(1259),
				"description": Description(r)}))
		}
		return out
	})

	var proc *Table
	proc = pg("pg_proc", "oid:oid proname:name pronamespace:oid proowner:oid prolang:oid procost:float4 prorows:float4 "+
		"provariadic:oid prosupport:regproc prokind:char prosecdef:bool proleakproof:bool proisstrict:bool "+
		"proretset:bool provolatile:char proparallel:char pronargs:int2 pronargdefaults:int2 prorettype:oid "+
		"proargtypes:oidvector proallargtypes:oid[] proargmodes:char[] proargnames:text[] proargdefaults:text "+
		"protrftypes:oid[] prosrc:text probin:text prosqlbody:text proconfig:text[] proacl:text[]", func(Env) [][]any {
		var out [][]any
		for i, f := range Functions() {
			out = append(out, record(proc, map[string]any{"oid": int64(5000 + i), "proname": f.Name,
				"pronamespace": int64(OIDPgCatalog), "proowner": int64(OIDSuperuser), "prolang": int64(12),
				"procost": float64(1), "prosupport": "-", "prokind": f.Kind, "proisstrict": true, "provolatile": "s",
				"proparallel": "s", "pronargs": int64(f.NArgs), "prorettype": f.Ret, "proargtypes": "",
				"prosrc": f.Name}))
		}
		for _, p := range LibraryProcs() {
			argTypes := make([]string, len(p.Args))
			for i, t := range p.Args {
				argTypes[i] = strconv.FormatInt(ArgOID(t), 10)
			}
			variadic := int64(0)
			if p.Variadic {
				variadic = ArgOID(p.Args[len(p.Args)-1])
			}
			out = append(out, record(proc, map[string]any{"oid": p.OID, "proname": p.Name,
				"pronamespace": int64(OIDPgCatalog), "proowner": int64(OIDSuperuser), "prolang": int64(12),
				"procost": float64(1), "prosupport": "-", "prokind": "f", "proisstrict": p.Strict, "provolatile": "i",
				"proparallel": "s", "pronargs": int64(len(p.Args)), "prorettype": int64(p.RetPGOID()),
				"proargtypes": strings.Join(argTypes, " "), "provariadic": variadic, "prosrc": p.Name}))
		}
		return out
	})

	var db *Table
	db = pg("pg_database", "oid:oid datname:name datdba:oid encoding:int4 datlocprovider:char datistemplate:bool "+
		"datallowconn:bool datconnlimit:int4 datfrozenxid:int8 datminmxid:int8 dattablespace:oid datcollate:text "+
		"datctype:text daticulocale:text datcollversion:text datacl:text[]", func(env Env) [][]any {
		return [][]any{record(db, map[string]any{"oid": int64(OIDDatabase), "datname": env.Database(),
			"datdba": int64(OIDSuperuser), "encoding": int64(6), "datlocprovider": "c", "datallowconn": true,
			"datconnlimit": int64(-1), "dattablespace": int64(1663), "datcollate": "C", "datctype": "C"})}
	})

	roleSpec := "rolname:name rolsuper:bool rolinherit:bool rolcreaterole:bool rolcreatedb:bool rolcanlogin:bool " +
		"rolreplication:bool rolconnlimit:int4 rolpassword:text rolvaliduntil:ts rolbypassrls:bool rolconfig:text[] oid:oid"
	var roles *Table
	roleRows := func(env Env) [][]any {
		var out [][]any
		for _, r := range env.Roles() {
			out = append(out, record(roles, map[string]any{"rolname": r.Name, "rolsuper": r.Super, "rolinherit": true,
				"rolcreaterole": r.Super, "rolcreatedb": r.Super, "rolcanlogin": true, "rolconnlimit": int64(-1),
				"rolpassword": "********", "rolvaliduntil": nil, "rolconfig": nil, "oid": RoleOID(env, r.Name)}))
		}
		return out
	}
	roles = pg("pg_roles", roleSpec, roleRows)
	var user *Table
	user = pg("pg_user", "usename:name usesysid:oid usecreatedb:bool usesuper:bool userepl:bool usebypassrls:bool "+
		"passwd:text valuntil:ts useconfig:text[]", func(env Env) [][]any {
		var out [][]any
		for _, r := range env.Roles() {
			out = append(out, record(user, map[string]any{"usename": r.Name, "usesysid": RoleOID(env, r.Name),
				"usecreatedb": r.Super, "usesuper": r.Super, "passwd": "********", "valuntil": nil, "useconfig": nil}))
		}
		return out
	})

	var settings *Table
	settings = pg("pg_settings", "name:text setting:text unit:text category:text short_desc:text extra_desc:text "+
		"context:text vartype:text source:text min_val:text max_val:text enumvals:text[] boot_val:text reset_val:text "+
		"sourcefile:text sourceline:int4 pending_restart:bool", func(env Env) [][]any {
		var out [][]any
		for _, n := range env.SettingNames() {
			v, _ := env.Setting(n)
			out = append(out, record(settings, map[string]any{"name": n, "setting": v, "category": "Client Connection Defaults",
				"context": "user", "vartype": "string", "source": "default", "boot_val": v, "reset_val": v, "sourceline": nil}))
		}
		return out
	})

	var am *Table
	am = pg("pg_am", "oid:oid amname:name amhandler:regproc amtype:char", func(Env) [][]any {
		return [][]any{
			record(am, map[string]any{"oid": int64(2), "amname": "heap", "amhandler": "heap_tableam_handler", "amtype": "t"}),
			record(am, map[string]any{"oid": int64(403), "amname": "btree", "amhandler": "bthandler", "amtype": "i"}),
		}
	})
	var ts *Table
	ts = pg("pg_tablespace", "oid:oid spcname:name spcowner:oid spcacl:text[] spcoptions:text[]", func(Env) [][]any {
		return [][]any{record(ts, map[string]any{"oid": int64(1663), "spcname": "pg_default", "spcowner": int64(OIDSuperuser)})}
	})

	// Catalogs of objects TurbineSQL does not have: real tables, no rows.
	pg("pg_attrdef", "oid:oid adrelid:oid adnum:int2 adbin:text", nil)
	pg("pg_collation", "oid:oid collname:name collnamespace:oid collowner:oid collprovider:char collisdeterministic:bool "+
		"collencoding:int4 collcollate:text collctype:text", nil)
	pg("pg_inherits", "inhrelid:oid inhparent:oid inhseqno:int4 inhdetachpending:bool", nil)
	pg("pg_policy", "oid:oid polname:name polrelid:oid polcmd:char polpermissive:bool polroles:oid[] polqual:text polwithcheck:text", nil)
	pg("pg_statistic_ext", "oid:oid stxrelid:oid stxname:name stxnamespace:oid stxowner:oid stxstattarget:int4 stxkeys:int2vector stxkind:char[] stxexprs:text", nil)
	pg("pg_publication", "oid:oid pubname:name pubowner:oid puballtables:bool pubinsert:bool pubupdate:bool pubdelete:bool pubtruncate:bool pubviaroot:bool", nil)
	pg("pg_publication_rel", "oid:oid prpubid:oid prrelid:oid prqual:text prattrs:int2vector", nil)
	pg("pg_publication_namespace", "oid:oid pnpubid:oid pnnspid:oid", nil)
	pg("pg_trigger", "oid:oid tgrelid:oid tgparentid:oid tgname:name tgfoid:oid tgtype:int2 tgenabled:char tgisinternal:bool tgconstrrelid:oid tgconstrindid:oid tgconstraint:oid tgdeferrable:bool tginitdeferred:bool tgnargs:int2 tgattr:int2vector tgargs:text tgqual:text", nil)
	pg("pg_rewrite", "oid:oid rulename:name ev_class:oid ev_type:char ev_enabled:char is_instead:bool ev_qual:text ev_action:text", nil)
	pg("pg_foreign_table", "ftrelid:oid ftserver:oid ftoptions:text[]", nil)
	pg("pg_partitioned_table", "partrelid:oid partstrat:char partnatts:int2 partdefid:oid partattrs:int2vector partclass:oidvector partcollation:oidvector partexprs:text", nil)
	pg("pg_extension", "oid:oid extname:name extowner:oid extnamespace:oid extrelocatable:bool extversion:text extconfig:oid[] extcondition:text[]", nil)
	pg("pg_enum", "oid:oid enumtypid:oid enumsortorder:float4 enumlabel:name", nil)
	pg("pg_range", "rngtypid:oid rngsubtype:oid rngmultitypid:oid rngcollation:oid rngsubopc:oid rngcanonical:regproc rngsubdiff:regproc", nil)
	pg("pg_depend", "classid:oid objid:oid objsubid:int4 refclassid:oid refobjid:oid refobjsubid:int4 deptype:char", nil)
	pg("pg_sequence", "seqrelid:oid seqtypid:oid seqstart:int8 seqincrement:int8 seqmax:int8 seqmin:int8 seqcache:int8 seqcycle:bool", nil)
	pg("pg_event_trigger", "oid:oid evtname:name evtevent:name evtowner:oid evtfoid:oid evtenabled:char evttags:text[]", nil)
	pg("pg_conversion", "oid:oid conname:name connamespace:oid conowner:oid conforencoding:int4 contoencoding:int4 conproc:regproc condefault:bool", nil)
	pg("pg_opclass", "oid:oid opcmethod:oid opcname:name opcnamespace:oid opcowner:oid opcfamily:oid opcintype:oid opcdefault:bool opckeytype:oid", nil)
	pg("pg_auth_members", "oid:oid roleid:oid member:oid grantor:oid admin_option:bool inherit_option:bool set_option:bool", nil)
	pg("pg_shdescription", "objoid:oid classoid:oid description:text", nil)
	pg("pg_foreign_server", "oid:oid srvname:name srvowner:oid srvfdw:oid srvtype:text srvversion:text srvacl:text[] srvoptions:text[]", nil)
	pg("pg_foreign_data_wrapper", "oid:oid fdwname:name fdwowner:oid fdwhandler:oid fdwvalidator:oid fdwacl:text[] fdwoptions:text[]", nil)
	pg("pg_stat_activity", "datid:oid datname:name pid:int4 usesysid:oid usename:name application_name:text client_addr:text state:text query:text", nil)

	var views *Table
	views = pg("pg_views", "schemaname:name viewname:name viewowner:name definition:text", nil)
	_ = views
	var matviews *Table
	matviews = pg("pg_matviews", "schemaname:name matviewname:name matviewowner:name tablespace:name hasindexes:bool ispopulated:bool definition:text",
		func(env Env) [][]any {
			var out [][]any
			for _, r := range env.Relations() {
				if r.Kind == catalog.KindStream {
					out = append(out, record(matviews, map[string]any{"schemaname": "public", "matviewname": r.Name,
						"matviewowner": env.User(), "tablespace": nil, "hasindexes": len(primaryKey(r)) > 0,
						"ispopulated": true, "definition": ViewDef(r)}))
				}
			}
			return out
		})
	var tablesV *Table
	tablesV = pg("pg_tables", "schemaname:name tablename:name tableowner:name tablespace:name hasindexes:bool hasrules:bool hastriggers:bool rowsecurity:bool",
		func(env Env) [][]any {
			var out [][]any
			for _, r := range env.Relations() {
				if r.Kind == catalog.KindSource {
					out = append(out, record(tablesV, map[string]any{"schemaname": "public", "tablename": r.Name,
						"tableowner": env.User(), "tablespace": nil}))
				}
			}
			return out
		})

	// information_schema
	var schemata *Table
	schemata = is("schemata", "catalog_name:name schema_name:name schema_owner:name default_character_set_catalog:name "+
		"default_character_set_schema:name default_character_set_name:name sql_path:text", func(env Env) [][]any {
		var out [][]any
		for _, n := range []string{"information_schema", "pg_catalog", "public"} {
			out = append(out, record(schemata, map[string]any{"catalog_name": env.Database(), "schema_name": n,
				"schema_owner": env.User(), "default_character_set_catalog": nil, "default_character_set_schema": nil,
				"default_character_set_name": nil}))
		}
		return out
	})
	var itables *Table
	itables = is("tables", "table_catalog:name table_schema:name table_name:name table_type:text "+
		"self_referencing_column_name:name reference_generation:text user_defined_type_catalog:name "+
		"user_defined_type_schema:name user_defined_type_name:name is_insertable_into:text is_typed:text commit_action:text",
		func(env Env) [][]any {
			var out [][]any
			for _, r := range env.Relations() {
				typ, ins := "BASE TABLE", "YES"
				if r.Kind == catalog.KindStream {
					typ, ins = "VIEW", "NO"
				}
				out = append(out, record(itables, map[string]any{"table_catalog": env.Database(), "table_schema": "public",
					"table_name": r.Name, "table_type": typ, "self_referencing_column_name": nil,
					"user_defined_type_catalog": nil, "user_defined_type_schema": nil, "user_defined_type_name": nil,
					"is_insertable_into": ins, "is_typed": "NO"}))
			}
			return out
		})
	var icols *Table
	icols = is("columns", "table_catalog:name table_schema:name table_name:name column_name:name ordinal_position:int4 "+
		"column_default:text is_nullable:text data_type:text character_maximum_length:int4 character_octet_length:int4 "+
		"numeric_precision:int4 numeric_precision_radix:int4 numeric_scale:int4 datetime_precision:int4 "+
		"interval_type:text udt_catalog:name udt_schema:name udt_name:name is_identity:text is_generated:text "+
		"is_updatable:text", func(env Env) [][]any {
		var out [][]any
		for _, r := range env.Relations() {
			for i, f := range r.Schema {
				t, _ := typeByOID(int64(f.Type.OID()))
				v := map[string]any{"table_catalog": env.Database(), "table_schema": "public", "table_name": r.Name,
					"column_name": f.Name, "ordinal_position": int64(i + 1), "is_nullable": "YES", "data_type": t.display,
					"character_maximum_length": nil, "character_octet_length": nil, "numeric_precision": nil,
					"numeric_precision_radix": nil, "numeric_scale": nil, "datetime_precision": nil,
					"udt_catalog": env.Database(), "udt_schema": "pg_catalog", "udt_name": t.name, "is_identity": "NO",
					"is_generated": "NEVER", "is_updatable": "NO"}
				if notNull(r, i) {
					v["is_nullable"] = "NO"
				}
				switch t.name {
				case "int8":
					v["numeric_precision"], v["numeric_precision_radix"], v["numeric_scale"] = int64(64), int64(2), int64(0)
				case "float8":
					v["numeric_precision"], v["numeric_precision_radix"] = int64(53), int64(2)
				case "text":
					v["character_octet_length"] = int64(1073741824)
				case "timestamp":
					v["datetime_precision"] = int64(6)
				}
				if r.Kind == catalog.KindSource {
					v["is_updatable"] = "YES"
				}
				out = append(out, record(icols, v))
			}
		}
		return out
	})
	var tcons *Table
	tcons = is("table_constraints", "constraint_catalog:name constraint_schema:name constraint_name:name "+
		"table_catalog:name table_schema:name table_name:name constraint_type:text is_deferrable:text "+
		"initially_deferred:text enforced:text nulls_distinct:text", func(env Env) [][]any {
		var out [][]any
		for _, r := range env.Relations() {
			if len(primaryKey(r)) > 0 {
				out = append(out, record(tcons, map[string]any{"constraint_catalog": env.Database(), "constraint_schema": "public",
					"constraint_name": r.Name + "_pkey", "table_catalog": env.Database(), "table_schema": "public",
					"table_name": r.Name, "constraint_type": "PRIMARY KEY", "is_deferrable": "NO", "initially_deferred": "NO",
					"enforced": "YES", "nulls_distinct": nil}))
			}
		}
		return out
	})
	var kcu *Table
	kcu = is("key_column_usage", "constraint_catalog:name constraint_schema:name constraint_name:name "+
		"table_catalog:name table_schema:name table_name:name column_name:name ordinal_position:int4 "+
		"position_in_unique_constraint:int4", func(env Env) [][]any {
		var out [][]any
		for _, r := range env.Relations() {
			for i, k := range primaryKey(r) {
				out = append(out, record(kcu, map[string]any{"constraint_catalog": env.Database(), "constraint_schema": "public",
					"constraint_name": r.Name + "_pkey", "table_catalog": env.Database(), "table_schema": "public",
					"table_name": r.Name, "column_name": k, "ordinal_position": int64(i + 1), "position_in_unique_constraint": nil}))
			}
		}
		return out
	})
	var iviews *Table
	iviews = is("views", "table_catalog:name table_schema:name table_name:name view_definition:text check_option:text "+
		"is_updatable:text is_insertable_into:text is_trigger_updatable:text is_trigger_deletable:text "+
		"is_trigger_insertable_into:text", func(env Env) [][]any {
		var out [][]any
		for _, r := range env.Relations() {
			if r.Kind == catalog.KindStream {
				out = append(out, record(iviews, map[string]any{"table_catalog": env.Database(), "table_schema": "public",
					"table_name": r.Name, "view_definition": ViewDef(r), "check_option": "NONE", "is_updatable": "NO",
					"is_insertable_into": "NO", "is_trigger_updatable": "NO", "is_trigger_deletable": "NO",
					"is_trigger_insertable_into": "NO"}))
			}
		}
		return out
	})
}

func relKind(r *catalog.Relation) string {
	if r.Kind == catalog.KindStream {
		return "m"
	}
	return "r"
}

// primaryKey is the primary key of a relation: an upsert stream's group
// key columns; nil for anything else.
func primaryKey(r *catalog.Relation) []string {
	if r.Stream == nil || !r.Stream.Upsert {
		return nil
	}
	return r.Stream.PrimaryKey
}

// notNull reports whether column i of r refuses NULL: a source's
// event-time column, for INSERT (catalog.Source.NotNullTime).
func notNull(r *catalog.Relation, i int) bool {
	return r.Source != nil && r.Source.NotNullTime() == i
}

// PrimaryKey is exported for DESCRIBE.
func PrimaryKey(r *catalog.Relation) []string { return primaryKey(r) }

// attnums lists the column numbers of cols in r, joined by sep.
func attnums(r *catalog.Relation, cols []string, sep string) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = strconv.Itoa(r.Schema.Index(c) + 1)
	}
	return strings.Join(parts, sep)
}

// Description is a relation's comment (obj_description, \d+).
func Description(r *catalog.Relation) string {
	if r.Kind == catalog.KindStream {
		return "stream reading " + r.Stream.Input + ", writing Kafka topic " + r.Topic
	}
	return "source on Kafka topic " + r.Topic
}

// ViewDef is a stream's SELECT (pg_get_viewdef); NULL for a source.
func ViewDef(r *catalog.Relation) any {
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
