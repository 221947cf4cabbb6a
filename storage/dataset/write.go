package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/uuid"
	"github.com/parquet-go/parquet-go"

	"github.com/cba1309c/steward/storage"
)

// Column holds one column of a Batch; only the slice matching the field type is set.
type Column struct {
	Int64   []int64
	Float64 []float64
	String  []string
}

// Batch is a set of rows in columnar form, one Column per schema field, in schema order.
type Batch struct {
	Rows    int
	Columns []Column
}

// RowSource streams rows for Create and Append.
type RowSource interface {
	// Schema lists the columns (field ids are ignored).
	Schema() Schema
	// Next returns the next batch, or io.EOF after the last one.
	Next(ctx context.Context) (Batch, error)
}

// BeforeUploadFunc is the custody hook: called with the exact key (relative to the store the
// dataset was opened on) before each object is written. An error stops the write before it
// happens and fails the operation with ErrUploadRefused.
type BeforeUploadFunc func(ctx context.Context, key string) error

// WriteOptions tunes Create and Append. The zero value is ready to use.
type WriteOptions struct {
	// RowsPerFragment cuts fragments. Default: 1<<20.
	RowsPerFragment int
	// InvocationID is recorded in the transaction. Default: none.
	InvocationID string
	// BeforeUpload is the custody hook for fragment uploads. Default: none.
	BeforeUpload BeforeUploadFunc
	// TempDir stages fragments before upload. Default: os.TempDir().
	TempDir string
}

// WriteResult reports a committed write.
type WriteResult struct {
	Version int64
	Rows    int64
	Created []string // fragment keys, relative to the store
}

// Create writes src as version 1 of a new dataset at prefix. If version 1 already exists it
// fails with ErrDatasetExists; the fragments it uploaded are reported in the result.
func Create(ctx context.Context, store storage.Store, prefix string, src RowSource, opts WriteOptions) (*Dataset, WriteResult, error) {
	schema := NewSchema(src.Schema().Fields...)
	if err := schema.validate(); err != nil {
		return nil, WriteResult{}, invalidf("schema: %v", err)
	}
	d := newDataset(store, prefix)
	d.m = &Manifest{FormatVersion: FormatVersion, Schema: schema}
	m := &Manifest{Schema: schema, Transaction: Transaction{Op: OpCreate, InvocationID: opts.InvocationID}}
	res, err := d.writeFragments(ctx, m, src, opts)
	if err != nil {
		return nil, res, err
	}
	m.FormatVersion, m.Version, m.CreatedAt = FormatVersion, 1, nowUTC()
	if err := putManifest(ctx, d.store, m); err != nil {
		if errors.Is(err, storage.ErrExists) {
			err = fmt.Errorf("%w: %q", ErrDatasetExists, prefix)
		}
		return nil, res, err
	}
	res.Version = 1
	return d.withManifest(m), res, nil
}

// Append adds src's rows as new fragments and commits version Version()+1.
func (d *Dataset) Append(ctx context.Context, src RowSource, opts WriteOptions) (*Dataset, WriteResult, error) {
	if !d.m.Schema.sameColumns(src.Schema()) {
		return nil, WriteResult{}, fmt.Errorf("%w: appended rows have another schema", ErrSchemaMismatch)
	}
	m := d.m.clone()
	m.Transaction = Transaction{Op: OpAppend, InvocationID: opts.InvocationID}
	res, err := d.writeFragments(ctx, m, src, opts)
	if err != nil {
		return nil, res, err
	}
	nd, err := d.commit(ctx, m)
	if err != nil {
		return nil, res, err
	}
	res.Version = nd.Version()
	return nd, res, nil
}

// writeFragments drains src into fragments added to m.
func (d *Dataset) writeFragments(ctx context.Context, m *Manifest, src RowSource, opts WriteOptions) (WriteResult, error) {
	per := opts.RowsPerFragment
	if per <= 0 {
		per = 1 << 20
	}
	var res WriteResult
	fw := newFragmentWriter(m.Schema, per)
	flush := func() error {
		if fw.rows == 0 {
			return nil
		}
		frag, key, err := d.uploadFragment(ctx, fw, m, opts)
		if key != "" {
			res.Created = append(res.Created, key)
		}
		if err != nil {
			return err
		}
		m.Fragments = append(m.Fragments, frag)
		m.NextFragmentID++
		m.NextRowID += uint64(frag.Rows)
		res.Rows += frag.Rows
		fw.reset()
		return nil
	}
	for {
		b, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, err
		}
		if err := checkBatch(m.Schema, b); err != nil {
			return res, err
		}
		for off := 0; off < b.Rows; {
			n := min(b.Rows-off, per-fw.rows)
			fw.add(b, off, n)
			off += n
			if fw.rows == per {
				if err := flush(); err != nil {
					return res, err
				}
			}
		}
	}
	return res, flush()
}

func checkBatch(s Schema, b Batch) error {
	if len(b.Columns) != len(s.Fields) {
		return invalidf("batch has %d columns, schema %d", len(b.Columns), len(s.Fields))
	}
	for i, f := range s.Fields {
		c := b.Columns[i]
		n := map[FieldType]int{Int64: len(c.Int64), Float64: len(c.Float64), String: len(c.String)}[f.Type]
		if n != b.Rows {
			return invalidf("column %q has %d %s values for %d rows", f.Name, n, f.Type, b.Rows)
		}
	}
	return nil
}

// fragmentWriter buffers one fragment's rows in columnar form.
type fragmentWriter struct {
	schema Schema
	cols   []Column
	rows   int
}

func newFragmentWriter(s Schema, capacity int) *fragmentWriter {
	fw := &fragmentWriter{schema: s, cols: make([]Column, len(s.Fields))}
	for i, f := range s.Fields {
		switch f.Type {
		case Int64:
			fw.cols[i].Int64 = make([]int64, 0, min(capacity, 1<<20))
		case Float64:
			fw.cols[i].Float64 = make([]float64, 0, min(capacity, 1<<20))
		case String:
			fw.cols[i].String = make([]string, 0, min(capacity, 1<<20))
		}
	}
	return fw
}

func (fw *fragmentWriter) add(b Batch, off, n int) {
	for i := range fw.cols {
		c, src := &fw.cols[i], b.Columns[i]
		switch fw.schema.Fields[i].Type {
		case Int64:
			c.Int64 = append(c.Int64, src.Int64[off:off+n]...)
		case Float64:
			c.Float64 = append(c.Float64, src.Float64[off:off+n]...)
		case String:
			c.String = append(c.String, src.String[off:off+n]...)
		}
	}
	fw.rows += n
}

func (fw *fragmentWriter) reset() {
	for i := range fw.cols {
		c := &fw.cols[i]
		c.Int64, c.Float64 = c.Int64[:0], c.Float64[:0]
		clear(c.String)
		c.String = c.String[:0]
	}
	fw.rows = 0
}

// writeParquet encodes the buffered rows as one Parquet file.
func (fw *fragmentWriter) writeParquet(w io.Writer) error {
	ps := fw.schema.parquetSchema()
	colIndex := make([]int, len(fw.schema.Fields))
	for i, f := range fw.schema.Fields {
		leaf, ok := ps.Lookup(f.Name)
		if !ok {
			return fmt.Errorf("dataset: parquet schema lost column %q", f.Name)
		}
		colIndex[i] = leaf.ColumnIndex
	}
	pw := parquet.NewWriter(w, ps, parquet.MaxRowsPerRowGroup(1<<20), parquet.PageBufferSize(1<<20))
	const chunk = 1024
	rows := make([]parquet.Row, chunk)
	for i := range rows {
		rows[i] = make(parquet.Row, len(fw.cols))
	}
	for start := 0; start < fw.rows; start += chunk {
		n := min(chunk, fw.rows-start)
		for r := range n {
			row := rows[r]
			for i, c := range fw.cols {
				ci := colIndex[i]
				var v parquet.Value
				switch fw.schema.Fields[i].Type {
				case Int64:
					v = parquet.Int64Value(c.Int64[start+r])
				case Float64:
					v = parquet.DoubleValue(c.Float64[start+r])
				case String:
					v = parquet.ByteArrayValue([]byte(c.String[start+r]))
				}
				row[ci] = v.Level(0, 0, ci)
			}
		}
		if _, err := pw.WriteRows(rows[:n]); err != nil {
			return err
		}
	}
	return pw.Close()
}

// uploadFragment stages the buffered rows in a temp file and uploads it under data/. The key
// is returned once the custody hook has accepted it (it may exist even if the upload failed).
func (d *Dataset) uploadFragment(ctx context.Context, fw *fragmentWriter, m *Manifest, opts WriteOptions) (Fragment, string, error) {
	rel := dataDir + uuid.NewString() + ".parquet"
	tmp, err := os.CreateTemp(opts.TempDir, "steward-fragment-*.parquet")
	if err != nil {
		return Fragment{}, "", err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := fw.writeParquet(tmp); err != nil {
		return Fragment{}, "", fmt.Errorf("dataset: encode fragment: %w", err)
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return Fragment{}, "", err
	}
	key, err := d.upload(ctx, rel, tmp, size, opts.BeforeUpload)
	if err != nil {
		return Fragment{}, key, err
	}
	return Fragment{ID: m.NextFragmentID, Path: rel, Rows: int64(fw.rows), FirstRowID: m.NextRowID, Size: size}, key, nil
}

// upload asks the custody hook, then writes f (from its start) to rel. It returns the full key
// once the hook has accepted it.
func (d *Dataset) upload(ctx context.Context, rel string, f *os.File, size int64, hook BeforeUploadFunc) (string, error) {
	key := d.fullKey(rel)
	if hook != nil {
		if err := hook(ctx, key); err != nil {
			return "", fmt.Errorf("%w: %s: %w", ErrUploadRefused, key, err)
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return key, err
	}
	return key, d.store.Put(ctx, rel, f, size)
}
