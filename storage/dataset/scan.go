package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"

	"github.com/cba1309c/steward/storage/index"
)

// readBufferSize is the Parquet read size: large enough that a column chunk on S3 takes a
// handful of range requests.
const readBufferSize = 4 << 20

// rawStrings receives a plain string page without a Go string per value: value i is
// data[offs[i]:offs[i+1]], at row id first+i. data and offs are valid only during the call.
type rawStrings func(data []byte, offs []uint32, first uint64) error

// scanColumn streams one column of one fragment to fn in page-sized batches, with the row id
// of each batch's first value. Strings are copied; keys passed to fn stay valid. With raw set
// (string columns only), plain pages go to raw instead, and only the others (dictionary pages,
// written by other tools) are converted for fn.
func scanColumn[K index.Key](ctx context.Context, d *Dataset, frag Fragment, field Field, fn func(keys []K, first uint64) error, raw rawStrings) error {
	fail := func(err error) error { return &FragmentError{FragmentID: frag.ID, Path: frag.Path, Err: err} }
	ra := &rangeReader{ctx: ctx, s: d.store, key: frag.Path, size: frag.Size}
	f, err := openParquet(ra, frag.Size)
	if err != nil {
		// A missing object surfaces here (ReadAt of the footer): keep its class.
		return fail(err)
	}
	leaf, ok := f.Schema().Lookup(field.Name)
	if !ok || leaf.Node.Type().Kind() != parquetKind(field.Type) || leaf.MaxDefinitionLevel != 0 {
		return fail(&CorruptError{Key: d.fullKey(frag.Path), Reason: fmt.Sprintf("column %q is missing or not a required %s", field.Name, field.Type)})
	}
	if f.NumRows() != frag.Rows {
		return fail(&CorruptError{Key: d.fullKey(frag.Path), Reason: fmt.Sprintf("holds %d rows, manifest says %d", f.NumRows(), frag.Rows)})
	}
	row := frag.FirstRowID
	var keys []K
	var vals []parquet.Value
	for _, rg := range f.RowGroups() {
		pages := rg.ColumnChunks()[leaf.ColumnIndex].Pages()
		for {
			if err := ctx.Err(); err != nil {
				pages.Close()
				return err
			}
			p, err := pages.ReadPage()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				pages.Close()
				return fail(classifyParquet(d.fullKey(frag.Path), err))
			}
			if n, ok, err := plainStrings(p, raw, row); ok || err != nil {
				parquet.Release(p)
				if err != nil {
					pages.Close()
					if errors.Is(err, errRawPage) {
						return fail(&CorruptError{Key: d.fullKey(frag.Path), Reason: "page", Err: err})
					}
					return err
				}
				row += uint64(n)
				continue
			}
			keys, vals, err = pageKeys(p, keys[:0], vals)
			parquet.Release(p)
			if err != nil {
				pages.Close()
				return fail(&CorruptError{Key: d.fullKey(frag.Path), Reason: "page", Err: err})
			}
			if err := fn(keys, row); err != nil {
				pages.Close()
				return err
			}
			row += uint64(len(keys))
		}
		pages.Close()
	}
	if row != frag.FirstRowID+uint64(frag.Rows) {
		return fail(&CorruptError{Key: d.fullKey(frag.Path), Reason: "column has fewer values than rows"})
	}
	return nil
}

func openParquet(ra io.ReaderAt, size int64) (f *parquet.File, err error) {
	defer func() { // parquet-go is not fuzzed by us; a malformed footer must not crash a worker
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("parquet decoder panicked: %v", r)
		}
	}()
	f, err = parquet.OpenFile(ra, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true),
		parquet.ReadBufferSize(readBufferSize))
	if err != nil {
		return nil, classifyParquet("", err)
	}
	return f, nil
}

// classifyParquet keeps storage errors (not found, unavailable, corrupt) as they are and
// turns decoder complaints into corruption.
func classifyParquet(key string, err error) error {
	var ce *CorruptError
	if errors.As(err, &ce) || isStorageErr(err) {
		return err
	}
	return &CorruptError{Key: key, Reason: "parquet", Err: err}
}

// errRawPage marks a plain string page that could not be read.
var errRawPage = errors.New("plain byte-array page unreadable")

// plainStrings hands a plain, null-free byte-array page to raw; ok is false when the page is
// not one (or raw is nil), and it must be converted instead. A decode failure or offsets out
// of order wrap errRawPage; raw's own errors come back as they are.
func plainStrings(p parquet.Page, raw rawStrings, first uint64) (n int, ok bool, err error) {
	if raw == nil || p.Dictionary() != nil || p.NumNulls() != 0 {
		return 0, false, nil
	}
	var data []byte
	var offs []uint32
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%w: %v", errRawPage, r)
			}
		}()
		vals := p.Data()
		data, offs = vals.ByteArray()
	}()
	if err != nil {
		return 0, false, err
	}
	if n = int(p.NumValues()); len(offs) != n+1 {
		return 0, false, nil
	}
	if err := index.CheckStringOffsets(data, offs); err != nil { // raw slices by them unchecked
		return 0, false, fmt.Errorf("%w: %w", errRawPage, err)
	}
	return n, true, raw(data, offs, first)
}

// pageKeys converts one page's values. Plain pages are read straight from the page buffers;
// anything else (dictionary pages, written by other tools) goes through parquet.Value.
func pageKeys[K index.Key](p parquet.Page, keys []K, vals []parquet.Value) (_ []K, _ []parquet.Value, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("page decode panicked: %v", r)
		}
	}()
	if p.NumNulls() != 0 {
		return nil, vals, fmt.Errorf("page has %d nulls", p.NumNulls())
	}
	n := int(p.NumValues())
	if p.Dictionary() == nil {
		data := p.Data()
		switch ks := any(&keys).(type) {
		case *[]int64:
			if v := data.Int64(); len(v) == n {
				*ks = append(*ks, v...)
				return keys, vals, nil
			}
		case *[]float64:
			if v := data.Double(); len(v) == n {
				*ks = append(*ks, v...)
				return keys, vals, nil
			}
		case *[]string:
			if b, offs := data.ByteArray(); len(offs) == n+1 {
				for i := range n {
					*ks = append(*ks, string(b[offs[i]:offs[i+1]]))
				}
				return keys, vals, nil
			}
		}
	}
	if cap(vals) < n {
		vals = make([]parquet.Value, n)
	}
	vals = vals[:n]
	got, err := p.Values().ReadValues(vals)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, vals, err
	}
	if got != n {
		return nil, vals, fmt.Errorf("page yielded %d of %d values", got, n)
	}
	for _, v := range vals {
		var k K
		switch kp := any(&k).(type) {
		case *int64:
			*kp = v.Int64()
		case *float64:
			*kp = v.Double()
		case *string:
			*kp = string(v.ByteArray())
		}
		keys = append(keys, k)
	}
	return keys, vals, nil
}
