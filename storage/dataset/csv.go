package dataset

import (
	"context"
	"encoding/csv"
	"errors"
	"io"
	"strconv"
	"strings"
)

// csvSample is how many rows CSVSource reads ahead to infer column types.
const csvSample = 1000

// CSVSource reads a CSV file with a header row as a RowSource. A header cell "name:type"
// fixes the type; otherwise the type is inferred from the first 1000 rows (int64 if every
// value parses as one, else float64, else string). A later value that does not parse as its
// column's type fails with ErrInvalidArgument naming the line.
type CSVSource struct {
	r      *csv.Reader
	schema Schema
	ahead  [][]string
	line   int
	batch  int
}

// NewCSVSource reads the header and the type-inference sample from r.
func NewCSVSource(r io.Reader) (*CSVSource, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = false
	header, err := cr.Read()
	if err != nil {
		return nil, invalidf("csv header: %v", err)
	}
	c := &CSVSource{r: cr, batch: 8192, line: 1}
	for len(c.ahead) < csvSample {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, invalidf("csv: %v", err)
		}
		c.ahead = append(c.ahead, rec)
	}
	for i, h := range header {
		name, typ, hasType := strings.Cut(strings.TrimSpace(h), ":")
		f := Field{Name: strings.TrimSpace(name)}
		if hasType {
			if f.Type, err = ParseFieldType(strings.TrimSpace(typ)); err != nil {
				return nil, err
			}
		} else {
			f.Type = inferType(c.ahead, i)
		}
		c.schema.Fields = append(c.schema.Fields, f)
	}
	c.schema = NewSchema(c.schema.Fields...)
	if err := c.schema.validate(); err != nil {
		return nil, invalidf("csv header: %v", err)
	}
	return c, nil
}

func inferType(rows [][]string, col int) FieldType {
	t := Int64
	for _, rec := range rows {
		if col >= len(rec) {
			continue
		}
		v := strings.TrimSpace(rec[col])
		if t == Int64 {
			if _, err := strconv.ParseInt(v, 10, 64); err == nil {
				continue
			}
			t = Float64
		}
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return String
		}
	}
	return t
}

// Schema implements RowSource.
func (c *CSVSource) Schema() Schema { return c.schema }

// Next implements RowSource.
func (c *CSVSource) Next(ctx context.Context) (Batch, error) {
	if err := ctx.Err(); err != nil {
		return Batch{}, err
	}
	b := Batch{Columns: make([]Column, len(c.schema.Fields))}
	for b.Rows < c.batch {
		var rec []string
		if len(c.ahead) > 0 {
			rec, c.ahead = c.ahead[0], c.ahead[1:]
		} else {
			var err error
			rec, err = c.r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return Batch{}, invalidf("csv: %v", err)
			}
		}
		c.line++
		if err := c.appendRecord(&b, rec); err != nil {
			return Batch{}, err
		}
	}
	if b.Rows == 0 {
		return Batch{}, io.EOF
	}
	return b, nil
}

func (c *CSVSource) appendRecord(b *Batch, rec []string) error {
	if len(rec) != len(c.schema.Fields) {
		return invalidf("csv line %d: %d fields, header has %d", c.line, len(rec), len(c.schema.Fields))
	}
	for i, f := range c.schema.Fields {
		col := &b.Columns[i]
		switch f.Type {
		case Int64:
			v, err := strconv.ParseInt(strings.TrimSpace(rec[i]), 10, 64)
			if err != nil {
				return invalidf("csv line %d: column %q: %q is not an int64", c.line, f.Name, rec[i])
			}
			col.Int64 = append(col.Int64, v)
		case Float64:
			v, err := strconv.ParseFloat(strings.TrimSpace(rec[i]), 64)
			if err != nil {
				return invalidf("csv line %d: column %q: %q is not a float64", c.line, f.Name, rec[i])
			}
			col.Float64 = append(col.Float64, v)
		default:
			col.String = append(col.String, rec[i])
		}
	}
	b.Rows++
	return nil
}

var _ RowSource = (*CSVSource)(nil)
var _ RowSource = (*Generator)(nil)
