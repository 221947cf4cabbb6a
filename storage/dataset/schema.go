package dataset

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
)

// FieldType is a column type.
type FieldType string

// Supported column types.
const (
	Int64   FieldType = "int64"
	Float64 FieldType = "float64"
	String  FieldType = "string"
)

func (t FieldType) valid() bool { return t == Int64 || t == Float64 || t == String }

// ParseFieldType accepts the type names used in manifests and CSV headers.
func ParseFieldType(s string) (FieldType, error) {
	switch t := FieldType(strings.ToLower(s)); t {
	case Int64, Float64, String:
		return t, nil
	}
	return "", invalidf("unknown field type %q (want int64, float64 or string)", s)
}

// Field is one column. ID is stable across versions; fields are never renumbered.
type Field struct {
	ID   int32     `json:"id"`
	Name string    `json:"name"`
	Type FieldType `json:"type"`
}

// Schema is the ordered list of columns.
type Schema struct {
	Fields []Field `json:"fields"`
}

// NewSchema numbers fields 0..n-1 in order.
func NewSchema(fields ...Field) Schema {
	out := Schema{Fields: make([]Field, len(fields))}
	for i, f := range fields {
		f.ID = int32(i)
		out.Fields[i] = f
	}
	return out
}

// Field returns the field named name (exact match).
func (s Schema) Field(name string) (Field, bool) {
	for _, f := range s.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// FieldByID returns the field with the given id.
func (s Schema) FieldByID(id int32) (Field, bool) {
	for _, f := range s.Fields {
		if f.ID == id {
			return f, true
		}
	}
	return Field{}, false
}

func (s Schema) validate() error {
	if len(s.Fields) == 0 {
		return fmt.Errorf("schema has no fields")
	}
	names := map[string]bool{}
	ids := map[int32]bool{}
	for _, f := range s.Fields {
		switch {
		case f.Name == "" || len(f.Name) > 255 || !utf8.ValidString(f.Name):
			return fmt.Errorf("bad field name %q", f.Name)
		case !f.Type.valid():
			return fmt.Errorf("field %q has unknown type %q", f.Name, f.Type)
		case names[f.Name] || ids[f.ID] || f.ID < 0:
			return fmt.Errorf("duplicate or negative field %q id %d", f.Name, f.ID)
		}
		names[f.Name], ids[f.ID] = true, true
	}
	return nil
}

// sameColumns reports whether two schemas have the same names and types in the same order.
func (s Schema) sameColumns(o Schema) bool {
	if len(s.Fields) != len(o.Fields) {
		return false
	}
	for i, f := range s.Fields {
		if f.Name != o.Fields[i].Name || f.Type != o.Fields[i].Type {
			return false
		}
	}
	return true
}

// CheckSchema verifies the schema contract a caller relies on: every named field exists with
// the given type. A violation is a *SchemaError (ErrSchemaMismatch).
func (s Schema) CheckSchema(contract map[string]FieldType) error {
	for name, want := range contract {
		f, ok := s.Field(name)
		if !ok {
			return &SchemaError{Field: name, Want: want}
		}
		if f.Type != want {
			return &SchemaError{Field: name, Want: want, Got: f.Type}
		}
	}
	return nil
}

// parquetSchema maps the schema to Parquet. Columns are required (no nulls) and plain-encoded,
// uncompressed: a scan reads them straight out of the page buffers.
func (s Schema) parquetSchema() *parquet.Schema {
	g := parquet.Group{}
	for _, f := range s.Fields {
		switch f.Type {
		case Int64:
			g[f.Name] = parquet.Leaf(parquet.Int64Type)
		case Float64:
			g[f.Name] = parquet.Leaf(parquet.DoubleType)
		case String:
			g[f.Name] = parquet.String()
		}
	}
	return parquet.NewSchema("steward", g)
}

func parquetKind(t FieldType) parquet.Kind {
	switch t {
	case Int64:
		return parquet.Int64
	case Float64:
		return parquet.Double
	}
	return parquet.ByteArray
}
