// Package types is the SQL type system shared by every layer: the five
// column types, their Arrow and PostgreSQL counterparts, and value
// formatting. It is a leaf: it imports nothing of the engine.
package types

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// Type is a SQL column type.
type Type uint8

const (
	Unknown Type = iota // the type of a NULL literal before coercion
	Text
	Int       // BIGINT
	Double    // DOUBLE PRECISION
	Bool      // BOOLEAN
	Timestamp // TIMESTAMP (without time zone, UTC), millisecond precision
	Interval  // INTERVAL literals only (milliseconds); never a column type
)

// Parse maps a SQL type name to a Type.
func Parse(name string) (Type, bool) {
	switch strings.ToUpper(strings.TrimSpace(name)) {
	case "TEXT", "VARCHAR", "STRING", "CHAR", "CHARACTER VARYING":
		return Text, true
	case "BIGINT", "INT", "INTEGER", "INT8", "INT4", "SMALLINT", "LONG":
		return Int, true
	case "DOUBLE", "DOUBLE PRECISION", "REAL", "FLOAT", "FLOAT8", "FLOAT4", "NUMERIC", "DECIMAL":
		return Double, true
	case "BOOLEAN", "BOOL":
		return Bool, true
	case "TIMESTAMP", "DATETIME":
		return Timestamp, true
	}
	return Unknown, false
}

func (t Type) String() string {
	switch t {
	case Text:
		return "TEXT"
	case Int:
		return "BIGINT"
	case Double:
		return "DOUBLE"
	case Bool:
		return "BOOLEAN"
	case Timestamp:
		return "TIMESTAMP"
	case Interval:
		return "INTERVAL"
	}
	return "UNKNOWN"
}

// Arrow is the Arrow data type a column of this type is stored as.
func (t Type) Arrow() arrow.DataType {
	switch t {
	case Text:
		return arrow.BinaryTypes.String
	case Int:
		return arrow.PrimitiveTypes.Int64
	case Double:
		return arrow.PrimitiveTypes.Float64
	case Bool:
		return arrow.FixedWidthTypes.Boolean
	case Timestamp:
		return arrow.FixedWidthTypes.Timestamp_ms
	}
	return arrow.Null
}

// OID is the PostgreSQL type OID clients see.
func (t Type) OID() uint32 {
	switch t {
	case Text:
		return 25
	case Int:
		return 20
	case Double:
		return 701
	case Bool:
		return 16
	case Timestamp:
		return 1114
	}
	return 25
}

// Numeric reports whether arithmetic applies.
func (t Type) Numeric() bool { return t == Int || t == Double }

// Field is a named, typed column. OID, when set, is the PostgreSQL type
// clients are told instead of Type's (a catalog column of type oid or name).
type Field struct {
	Name string
	Type Type
	OID  uint32
}

// PGOID is the PostgreSQL type OID of the field.
func (f Field) PGOID() uint32 {
	if f.OID != 0 {
		return f.OID
	}
	return f.Type.OID()
}

// Schema is an ordered list of fields.
type Schema []Field

// Index finds a field by case-insensitive name, -1 if absent.
func (s Schema) Index(name string) int {
	for i, f := range s {
		if strings.EqualFold(f.Name, name) {
			return i
		}
	}
	return -1
}

// Arrow builds the Arrow schema.
func (s Schema) Arrow() *arrow.Schema {
	fs := make([]arrow.Field, len(s))
	for i, f := range s {
		fs[i] = arrow.Field{Name: f.Name, Type: f.Type.Arrow(), Nullable: true}
	}
	return arrow.NewSchema(fs, nil)
}

func (s Schema) String() string {
	parts := make([]string, len(s))
	for i, f := range s {
		parts[i] = fmt.Sprintf("%s %s", f.Name, f.Type)
	}
	return strings.Join(parts, ", ")
}
