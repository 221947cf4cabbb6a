package dataset

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/index"
)

// PredicateOp is the kind of a Predicate.
type PredicateOp int

// Predicate kinds.
const (
	OpEq    PredicateOp = iota // column = Value
	OpRange                    // Lo <=/< column <=/< Hi; a nil bound is open
	OpIn                       // column IN Values
)

// Predicate selects rows by one column. Values are int64 (or int), float64 (or an integer for
// a float64 column) or string, matching the column type.
type Predicate struct {
	Column      string
	Op          PredicateOp
	Value       any
	Lo, Hi      any
	LoInclusive bool
	HiInclusive bool
	Values      []any
}

// Eq selects rows where column = v.
func Eq(column string, v any) Predicate { return Predicate{Column: column, Op: OpEq, Value: v} }

// Between selects lo <= column <= hi; a nil bound is open.
func Between(column string, lo, hi any) Predicate {
	return Predicate{Column: column, Op: OpRange, Lo: lo, Hi: hi, LoInclusive: true, HiInclusive: true}
}

// In selects rows where column is one of vs.
func In(column string, vs ...any) Predicate { return Predicate{Column: column, Op: OpIn, Values: vs} }

// QueryResult holds matching row ids in ascending order and the index used, if any.
type QueryResult struct {
	RowIDs []uint64
	Index  string // stored name of the index used; "" for a full scan
}

// Query answers p through an index on the column when there is one, scanning fragments the
// index does not cover; otherwise it scans.
func (d *Dataset) Query(ctx context.Context, p Predicate) (QueryResult, error) {
	f, ok := d.m.Schema.Field(p.Column)
	if !ok {
		return QueryResult{}, &SchemaError{Field: p.Column}
	}
	var ix *IndexMeta
	for i := range d.m.Indices {
		if d.m.Indices[i].FieldIDs[0] == f.ID {
			ix = &d.m.Indices[i]
			break
		}
	}
	return d.query(ctx, f, p, ix)
}

// QueryIndex answers p through the named index (case-folded lookup).
func (d *Dataset) QueryIndex(ctx context.Context, name string, p Predicate) (QueryResult, error) {
	ix, err := d.FindIndex(name)
	if err != nil {
		return QueryResult{}, err
	}
	f, _ := d.m.Schema.FieldByID(ix.FieldIDs[0])
	if f.Name != p.Column {
		return QueryResult{}, invalidf("index %q is on %q, not %q", ix.Name, f.Name, p.Column)
	}
	return d.query(ctx, f, p, &ix)
}

// Scan answers p by reading the column of every fragment: the reference for index answers.
func (d *Dataset) Scan(ctx context.Context, p Predicate) (QueryResult, error) {
	f, ok := d.m.Schema.Field(p.Column)
	if !ok {
		return QueryResult{}, &SchemaError{Field: p.Column}
	}
	return d.query(ctx, f, p, nil)
}

func (d *Dataset) query(ctx context.Context, f Field, p Predicate, ix *IndexMeta) (QueryResult, error) {
	switch f.Type {
	case Int64:
		return queryTyped[int64](ctx, d, f, p, ix)
	case Float64:
		return queryTyped[float64](ctx, d, f, p, ix)
	default:
		return queryTyped[string](ctx, d, f, p, ix)
	}
}

func queryTyped[K index.Key](ctx context.Context, d *Dataset, f Field, p Predicate, ix *IndexMeta) (QueryResult, error) {
	ranges, err := predicateRanges[K](f, p)
	if err != nil {
		return QueryResult{}, err
	}
	var res QueryResult
	frags := d.m.Fragments
	var ids []uint64
	if ix != nil {
		res.Index = ix.Name
		ids, err = searchIndex(ctx, d, *ix, ranges)
		if err != nil {
			return QueryResult{}, err
		}
		covered := map[uint64]bool{}
		for _, id := range ix.FragmentIDs {
			covered[id] = true
		}
		frags = slices.DeleteFunc(slices.Clone(frags), func(fr Fragment) bool { return covered[fr.ID] })
	}
	raw := rawMatcher(ranges, &ids)
	for _, fr := range frags {
		err := scanColumn(ctx, d, fr, f, func(keys []K, first uint64) error {
			for i, k := range keys {
				if index.InRanges(ranges, k) {
					ids = append(ids, first+uint64(i))
				}
			}
			return nil
		}, raw)
		if err != nil {
			return QueryResult{}, err
		}
	}
	slices.Sort(ids)
	res.RowIDs = slices.Compact(ids)
	return res, nil
}

// rawMatcher is a full scan's test for plain string pages (nil for other key types): each
// value is compared where it lies in the page buffer instead of as a Go string allocated and
// copied per row.
func rawMatcher[K index.Key](ranges []index.Range[K], ids *[]uint64) rawStrings {
	rs, ok := any(ranges).([]index.Range[string])
	if !ok {
		return nil
	}
	return func(data []byte, offs []uint32, first uint64) error {
		for i := range len(offs) - 1 {
			if index.BytesInRanges(rs, data[offs[i]:offs[i+1]]) {
				*ids = append(*ids, first+uint64(i))
			}
		}
		return nil
	}
}

func searchIndex[K index.Key](ctx context.Context, d *Dataset, ix IndexMeta, ranges []index.Range[K]) ([]uint64, error) {
	ids, err := searchIndexRaw(ctx, d, ix, ranges)
	if err != nil && errors.Is(err, storage.ErrCorrupt) && !errors.Is(err, index.ErrCorruptSegment) {
		// A short or unreadable segment object is a broken index, whatever layer noticed.
		err = fmt.Errorf("%w: %w", index.ErrCorruptSegment, err)
	}
	return ids, err
}

func searchIndexRaw[K index.Key](ctx context.Context, d *Dataset, ix IndexMeta, ranges []index.Range[K]) ([]uint64, error) {
	r, err := indexReader[K](ctx, d, ix)
	if err != nil {
		return nil, err
	}
	switch r := r.(type) {
	case *index.BTreeReader[K]:
		var ids []uint64
		for _, rg := range ranges {
			if err := r.Scan(ctx, rg, func(_ K, id uint64) bool { ids = append(ids, id); return true }); err != nil {
				return nil, err
			}
		}
		return ids, nil
	case *index.BitmapReader[K]:
		all := roaring64.New()
		for _, rg := range ranges {
			bm, err := r.Search(ctx, rg)
			if err != nil {
				return nil, err
			}
			all.Or(bm)
		}
		return all.ToArray(), nil
	}
	return nil, fmt.Errorf("dataset: unexpected index reader %T", r)
}

// indexReader opens (once per Dataset) the segment reader of ix.
func indexReader[K index.Key](ctx context.Context, d *Dataset, ix IndexMeta) (any, error) {
	d.mu.Lock()
	r, ok := d.readers[ix.UUID]
	d.mu.Unlock()
	if ok {
		return r, nil
	}
	file := ix.Files[0]
	rr := &rangeReader{ctx: ctx, s: d.store, key: file.Path, size: file.Size}
	var err error
	switch ix.Type {
	case BTree:
		r, err = index.OpenBTree[K](ctx, rr)
	case Bitmap:
		r, err = index.OpenBitmap[K](ctx, rr)
	default:
		err = fmt.Errorf("%w: index type %q", ErrNotSupported, ix.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("dataset: index %q (%s): %w", ix.Name, d.fullKey(file.Path), err)
	}
	d.mu.Lock()
	d.readers[ix.UUID] = r
	d.mu.Unlock()
	return r, nil
}

func predicateRanges[K index.Key](f Field, p Predicate) ([]index.Range[K], error) {
	conv := func(v any) (K, error) { return convertKey[K](f, v) }
	switch p.Op {
	case OpEq:
		k, err := conv(p.Value)
		if err != nil {
			return nil, err
		}
		return []index.Range[K]{index.Point(k)}, nil
	case OpIn:
		out := make([]index.Range[K], 0, len(p.Values))
		for _, v := range p.Values {
			k, err := conv(v)
			if err != nil {
				return nil, err
			}
			out = append(out, index.Point(k))
		}
		slices.SortFunc(out, func(a, b index.Range[K]) int { return cmp.Compare(a.Lo.Value, b.Lo.Value) })
		return slices.CompactFunc(out, func(a, b index.Range[K]) bool { return cmp.Compare(a.Lo.Value, b.Lo.Value) == 0 }), nil
	case OpRange:
		var rg index.Range[K]
		if p.Lo != nil {
			k, err := conv(p.Lo)
			if err != nil {
				return nil, err
			}
			rg.Lo = &index.Bound[K]{Value: k, Inclusive: p.LoInclusive}
		}
		if p.Hi != nil {
			k, err := conv(p.Hi)
			if err != nil {
				return nil, err
			}
			rg.Hi = &index.Bound[K]{Value: k, Inclusive: p.HiInclusive}
		}
		return []index.Range[K]{rg}, nil
	}
	return nil, invalidf("unknown predicate op %d", p.Op)
}

func convertKey[K index.Key](f Field, v any) (K, error) {
	var k K
	var ok bool
	switch kp := any(&k).(type) {
	case *int64:
		switch x := v.(type) {
		case int64:
			*kp, ok = x, true
		case int:
			*kp, ok = int64(x), true
		}
	case *float64:
		switch x := v.(type) {
		case float64:
			*kp, ok = x, true
		case int64:
			*kp, ok = float64(x), true
		case int:
			*kp, ok = float64(x), true
		}
	case *string:
		*kp, ok = v.(string)
	}
	if !ok {
		return k, &SchemaError{Field: f.Name, Want: FieldType(fmt.Sprintf("%T", v)), Got: f.Type}
	}
	return k, nil
}
