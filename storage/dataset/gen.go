package dataset

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
)

// GeneratorSchema is the schema of the built-in generator:
//
//	id       int64   0, 1, 2, ... (unique, sorted)
//	category string  one of 16 values "cat-00".."cat-15" (low cardinality: BITMAP)
//	price    float64 uniform in [0, 10000), in cents (BTREE range queries)
//	name     string  16 random hex digits (high cardinality: BTREE on strings)
func GeneratorSchema() Schema {
	return NewSchema(
		Field{Name: "id", Type: Int64}, Field{Name: "category", Type: String},
		Field{Name: "price", Type: Float64}, Field{Name: "name", Type: String},
	)
}

// Categories is the number of distinct generator categories.
const Categories = 16

// Generator is a deterministic RowSource: the same rows and seed give the same data.
type Generator struct {
	rows, next int64
	batch      int
	r          *rand.Rand
	cats       [Categories]string
}

// NewGenerator returns a generator of rows rows from seed.
func NewGenerator(rows int64, seed uint64) *Generator {
	g := &Generator{rows: rows, batch: 8192, r: rand.New(rand.NewPCG(seed, 0x5eed))}
	for i := range g.cats {
		g.cats[i] = fmt.Sprintf("cat-%02d", i)
	}
	return g
}

// Schema implements RowSource.
func (g *Generator) Schema() Schema { return GeneratorSchema() }

// Next implements RowSource.
func (g *Generator) Next(ctx context.Context) (Batch, error) {
	if g.next >= g.rows {
		return Batch{}, io.EOF
	}
	if err := ctx.Err(); err != nil {
		return Batch{}, err
	}
	n := int(min(int64(g.batch), g.rows-g.next))
	b := Batch{Rows: n, Columns: []Column{
		{Int64: make([]int64, n)}, {String: make([]string, n)},
		{Float64: make([]float64, n)}, {String: make([]string, n)},
	}}
	var hex [16]byte
	for i := range n {
		b.Columns[0].Int64[i] = g.next + int64(i)
		b.Columns[1].String[i] = g.cats[g.r.IntN(Categories)]
		b.Columns[2].Float64[i] = float64(g.r.IntN(1_000_000)) / 100
		b.Columns[3].String[i] = string(strconv.AppendUint(hex[:0], g.r.Uint64()|1<<63, 16))
	}
	g.next += int64(n)
	return b, nil
}
