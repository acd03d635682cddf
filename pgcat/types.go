package pgcat

import "github.com/turbinesql/turbinesql/types"

// pgType is a row of pg_type: the types TurbineSQL sends or accepts, and
// their array types.
type pgType struct {
	oid      int64
	name     string
	display  string // format_type's name
	len      int64
	category string
	array    int64 // its array type; for an array type, 0
	elem     int64 // an array type's element type
}

var pgTypes = []pgType{
	{16, "bool", "boolean", 1, "B", 1000, 0},
	{17, "bytea", "bytea", -1, "U", 1001, 0},
	{18, "char", "\"char\"", 1, "Z", 1002, 0},
	{19, "name", "name", 64, "S", 1003, 0},
	{20, "int8", "bigint", 8, "N", 1016, 0},
	{21, "int2", "smallint", 2, "N", 1005, 0},
	{22, "int2vector", "int2vector", -1, "A", 0, 21},
	{23, "int4", "integer", 4, "N", 1007, 0},
	{24, "regproc", "regproc", 4, "N", 1008, 0},
	{25, "text", "text", -1, "S", 1009, 0},
	{26, "oid", "oid", 4, "N", 1028, 0},
	{30, "oidvector", "oidvector", -1, "A", 0, 26},
	{700, "float4", "real", 4, "N", 1021, 0},
	{701, "float8", "double precision", 8, "N", 1022, 0},
	{705, "unknown", "unknown", -2, "X", 0, 0},
	{1000, "_bool", "boolean[]", -1, "A", 0, 16},
	{1001, "_bytea", "bytea[]", -1, "A", 0, 17},
	{1002, "_char", "\"char\"[]", -1, "A", 0, 18},
	{1003, "_name", "name[]", -1, "A", 0, 19},
	{1005, "_int2", "smallint[]", -1, "A", 0, 21},
	{1007, "_int4", "integer[]", -1, "A", 0, 23},
	{1008, "_regproc", "regproc[]", -1, "A", 0, 24},
	{1009, "_text", "text[]", -1, "A", 0, 25},
	{1015, "_varchar", "character varying[]", -1, "A", 0, 1043},
	{1016, "_int8", "bigint[]", -1, "A", 0, 20},
	{1021, "_float4", "real[]", -1, "A", 0, 700},
	{1022, "_float8", "double precision[]", -1, "A", 0, 701},
	{1028, "_oid", "oid[]", -1, "A", 0, 26},
	{1043, "varchar", "character varying", -1, "S", 1015, 0},
	{1114, "timestamp", "timestamp without time zone", 8, "D", 1115, 0},
	{1115, "_timestamp", "timestamp without time zone[]", -1, "A", 0, 1114},
	{1184, "timestamptz", "timestamp with time zone", 8, "D", 1185, 0},
	{1185, "_timestamptz", "timestamp with time zone[]", -1, "A", 0, 1184},
	{1186, "interval", "interval", 16, "T", 1187, 0},
	{1187, "_interval", "interval[]", -1, "A", 0, 1186},
	{2205, "regclass", "regclass", 4, "N", 2210, 0},
	{2206, "regtype", "regtype", 4, "N", 2211, 0},
	{2210, "_regclass", "regclass[]", -1, "A", 0, 2205},
	{2211, "_regtype", "regtype[]", -1, "A", 0, 2206},
	{2276, "any", "\"any\"", 4, "P", 0, 0},
}

func typeByOID(oid int64) (pgType, bool) {
	for _, t := range pgTypes {
		if t.oid == oid {
			return t, true
		}
	}
	return pgType{}, false
}

// TypeOID is the pg_type OID of a type name as regtype reads it (int8,
// bigint, pg_catalog.int4, character varying, text[]), 0 if unknown.
func TypeOID(name string) int64 {
	for _, t := range pgTypes {
		if name == t.name || name == t.display || name == "pg_catalog."+t.name {
			return t.oid
		}
	}
	switch name {
	case "int", "integer":
		return 23
	case "double", "float":
		return 701
	case "boolean":
		return 16
	case "varchar":
		return 1043
	}
	return 0
}

// FormatType is format_type(oid, typmod): the SQL name of a type.
func FormatType(oid, typmod int64) (string, bool) {
	t, ok := typeByOID(oid)
	if !ok {
		return "???", oid != 0
	}
	if (oid == 1043 || oid == 18) && typmod > 4 {
		return t.display + "(" + itoa(typmod-4) + ")", true
	}
	return t.display, true
}

// TypeName is the pg_type name of a column type (text, int8, ...).
func TypeName(t types.Type) string {
	if pt, ok := typeByOID(int64(t.OID())); ok {
		return pt.name
	}
	return "text"
}

func itoa(n int64) string {
	neg := n < 0
	if neg {
		n = -n
	}
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			break
		}
	}
	if neg {
		b = append([]byte{'-'}, b...)
	}
	return string(b)
}
