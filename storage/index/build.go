package index

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// BuildOptions tunes the builders. The zero value is ready to use.
type BuildOptions struct {
	// MemoryBudget bounds the bytes a BTREE build holds in sorted runs and sort scratch;
	// beyond it, the runs held are merged into a spill file in TempDir. Default:
	// DefaultMemoryBudget (256 MiB).
	MemoryBudget int64
	// RunEntries is how many (key, row id) pairs a BTREE build sorts as one run, on a
	// background goroutine while the next run fills. Default: DefaultRunEntries (1<<20), or
	// DefaultStringRunEntries (1<<19) for string keys.
	RunEntries int
	// TempDir holds spill files, removed by Close. Default: os.TempDir().
	TempDir string
	// PageEntries is the BTREE page size in pairs. Default: DefaultPageEntries.
	PageEntries int
}

// BitmapBuilder collects one roaring bitmap per distinct key. Memory grows with the number of
// distinct keys and the compressed size of their bitmaps, which is what BITMAP is meant for
// (low-cardinality columns); MaxKeys stops a build on a high-cardinality column early.
type BitmapBuilder[K Key] struct {
	// MaxKeys fails the build once more distinct keys than this appear. Default (0): 1<<20.
	MaxKeys int
	maps    map[K]*bitmapAcc
	nan     *bitmapAcc // NaN keys: a map cannot find a NaN again, so they get one slot
}

// ErrTooManyKeys: a BITMAP build saw more distinct keys than BitmapBuilder.MaxKeys.
var ErrTooManyKeys = errors.New("index: too many distinct keys for a BITMAP index")

type bitmapAcc struct {
	bm  *roaring64.Bitmap
	buf []uint64
}

// NewBitmapBuilder returns an empty builder.
func NewBitmapBuilder[K Key]() *BitmapBuilder[K] {
	return &BitmapBuilder[K]{maps: map[K]*bitmapAcc{}}
}

// Add records keys[i] at row id firstRowID+i.
func (b *BitmapBuilder[K]) Add(keys []K, firstRowID uint64) error {
	for i, k := range keys {
		var acc *bitmapAcc
		if k != k { // NaN
			if b.nan == nil {
				b.nan = &bitmapAcc{bm: roaring64.New()}
			}
			acc = b.nan
		} else {
			acc = b.maps[k]
		}
		if acc == nil {
			var err error
			if acc, err = b.newAcc(); err != nil {
				return err
			}
			b.maps[k] = acc
		}
		acc.add(firstRowID + uint64(i))
	}
	return nil
}

// AddStrings records string keys without a Go string per row: key i is
// data[offs[i]:offs[i+1]] at row id firstRowID+i (as BTreeBuilder.AddStrings takes them). A
// key's string is made once, when the key is first seen; data may be reused after the call.
func (b *BitmapBuilder[K]) AddStrings(data []byte, offs []uint32, firstRowID uint64) error {
	m, ok := any(b.maps).(map[string]*bitmapAcc)
	if !ok {
		return errors.New("index: AddStrings on a builder of numeric keys")
	}
	if err := CheckStringOffsets(data, offs); err != nil {
		return fmt.Errorf("index: AddStrings: %w", err)
	}
	for i := 0; i+1 < len(offs); i++ {
		v := data[offs[i]:offs[i+1]]
		acc := m[string(v)] // looked up by the bytes: no string is made
		if acc == nil {
			var err error
			if acc, err = b.newAcc(); err != nil {
				return err
			}
			m[string(v)] = acc
		}
		acc.add(firstRowID + uint64(i))
	}
	return nil
}

// newAcc is the accumulator of a key not seen before, unless that key is one too many.
func (b *BitmapBuilder[K]) newAcc() (*bitmapAcc, error) {
	limit := b.MaxKeys
	if limit <= 0 {
		limit = 1 << 20
	}
	if len(b.maps) >= limit {
		return nil, fmt.Errorf("%w: more than %d", ErrTooManyKeys, limit)
	}
	return &bitmapAcc{bm: roaring64.New()}, nil
}

// add records row id id, in batches of 4096 into the bitmap.
func (a *bitmapAcc) add(id uint64) {
	a.buf = append(a.buf, id)
	if len(a.buf) == 4096 {
		a.bm.AddMany(a.buf)
		a.buf = a.buf[:0]
	}
}

func (b *BitmapBuilder[K]) nanOr(i int, k K) *bitmapAcc {
	if i == 0 && b.nan != nil {
		return b.nan // NaN sorts first under cmp.Compare
	}
	return b.maps[k]
}

// Finish writes the segment and returns the number of row ids indexed.
func (b *BitmapBuilder[K]) Finish(w io.Writer) (uint64, error) {
	keys := make([]K, 0, len(b.maps)+1)
	for k := range b.maps {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare[K])
	if b.nan != nil {
		var nan K
		switch p := any(&nan).(type) {
		case *float64:
			*p = math.NaN()
		}
		keys = slices.Insert(keys, 0, nan)
	}
	bw, err := NewBitmapWriter[K](w)
	if err != nil {
		return 0, err
	}
	var n uint64
	for i, k := range keys {
		acc := b.nanOr(i, k)
		acc.bm.AddMany(acc.buf)
		acc.buf = nil
		if err := bw.Add(k, acc.bm); err != nil {
			return 0, err
		}
		n += acc.bm.GetCardinality()
	}
	return n, bw.Close()
}
