package index

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// BuildOptions tunes the builders. The zero value is ready to use.
type BuildOptions struct {
	// RunEntries is how many (key, row id) pairs a BTREE build sorts in memory before spilling a
	// run to TempDir; it bounds build memory. Default: 1<<20.
	RunEntries int
	// TempDir holds spilled runs, removed by Close. Default: os.TempDir().
	TempDir string
	// PageEntries is the BTREE page size in pairs. Default: DefaultPageEntries.
	PageEntries int
}

type pair[K Key] struct {
	k  K
	id uint64
}

func comparePairs[K Key](a, b pair[K]) int {
	if c := cmp.Compare(a.k, b.k); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// BTreeBuilder turns an unsorted stream of keys into a BTREE segment with bounded memory: an
// external merge sort whose runs are sorted in a background goroutine while the caller keeps
// adding (so reading and sorting overlap on two cores).
type BTreeBuilder[K Key] struct {
	opts    BuildOptions
	buf     []pair[K]
	runs    []*os.File
	pending chan error // result of the in-flight spill, if any
	spare   []pair[K]
}

// NewBTreeBuilder returns an empty builder.
func NewBTreeBuilder[K Key](opts BuildOptions) *BTreeBuilder[K] {
	if opts.RunEntries <= 0 {
		opts.RunEntries = 1 << 20
	}
	return &BTreeBuilder[K]{opts: opts}
}

// Add records keys[i] at row id firstRowID+i.
func (b *BTreeBuilder[K]) Add(keys []K, firstRowID uint64) error {
	for i, k := range keys {
		if b.buf == nil {
			b.buf = b.spare[:0]
			if b.buf == nil {
				b.buf = make([]pair[K], 0, b.opts.RunEntries)
			}
			b.spare = nil
		}
		b.buf = append(b.buf, pair[K]{k, firstRowID + uint64(i)})
		if len(b.buf) == b.opts.RunEntries {
			if err := b.spill(); err != nil {
				return err
			}
		}
	}
	return nil
}

// spill hands the full buffer to a background sort+write, after the previous one is done.
func (b *BTreeBuilder[K]) spill() error {
	if err := b.wait(); err != nil {
		return err
	}
	f, err := os.CreateTemp(b.opts.TempDir, "steward-btree-run-*")
	if err != nil {
		return err
	}
	b.runs = append(b.runs, f)
	run := b.buf
	b.buf = nil
	b.pending = make(chan error, 1)
	go func() {
		slices.SortFunc(run, comparePairs[K])
		w := bufio.NewWriterSize(f, 1<<20)
		var rec []byte
		for _, p := range run {
			rec = appendKey(rec[:0], p.k)
			rec = binary.LittleEndian.AppendUint64(rec, p.id)
			w.Write(rec) // error surfaces in Flush
		}
		err := w.Flush()
		b.spare = run // reused by Add after wait()
		b.pending <- err
	}()
	return nil
}

func (b *BTreeBuilder[K]) wait() error {
	if b.pending == nil {
		return nil
	}
	err := <-b.pending
	b.pending = nil
	return err
}

// Finish merges everything added into a segment on w and returns the number of pairs.
func (b *BTreeBuilder[K]) Finish(w io.Writer) (uint64, error) {
	if err := b.wait(); err != nil {
		return 0, err
	}
	slices.SortFunc(b.buf, comparePairs[K])
	bw, err := NewBTreeWriter[K](w, b.opts.PageEntries)
	if err != nil {
		return 0, err
	}
	h := &mergeHeap[K]{}
	if len(b.buf) > 0 {
		h.cursors = append(h.cursors, &cursor[K]{mem: b.buf})
	}
	for _, f := range b.runs {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
		h.cursors = append(h.cursors, &cursor[K]{file: bufio.NewReaderSize(f, 256<<10)})
	}
	var live []*cursor[K]
	for _, c := range h.cursors {
		ok, err := c.next()
		if err != nil {
			return 0, err
		}
		if ok {
			live = append(live, c)
		}
	}
	h.cursors = live
	heap.Init(h)
	var n uint64
	for h.Len() > 0 {
		c := h.cursors[0]
		if err := bw.Add(c.cur.k, c.cur.id); err != nil {
			return 0, err
		}
		n++
		ok, err := c.next()
		if err != nil {
			return 0, err
		}
		if ok {
			heap.Fix(h, 0)
		} else {
			heap.Pop(h)
		}
	}
	return n, bw.Close()
}

// Close removes spilled runs. Safe to call more than once.
func (b *BTreeBuilder[K]) Close() error {
	_ = b.wait()
	var errs []error
	for _, f := range b.runs {
		f.Close()
		if err := os.Remove(f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	b.runs, b.buf, b.spare = nil, nil, nil
	return errors.Join(errs...)
}

type cursor[K Key] struct {
	mem  []pair[K]
	file *bufio.Reader
	cur  pair[K]
}

func (c *cursor[K]) next() (bool, error) {
	if c.file == nil {
		if len(c.mem) == 0 {
			return false, nil
		}
		c.cur, c.mem = c.mem[0], c.mem[1:]
		return true, nil
	}
	k, err := readKey[K](c.file)
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var idb [8]byte
	if _, err := io.ReadFull(c.file, idb[:]); err != nil {
		return false, fmt.Errorf("index: spilled run truncated: %w", err)
	}
	c.cur = pair[K]{k, binary.LittleEndian.Uint64(idb[:])}
	return true, nil
}

func readKey[K Key](r *bufio.Reader) (k K, err error) {
	var b [8]byte
	switch p := any(&k).(type) {
	case *int64:
		if _, err = io.ReadFull(r, b[:]); err == nil {
			*p = int64(binary.LittleEndian.Uint64(b[:]))
		}
	case *float64:
		if _, err = io.ReadFull(r, b[:]); err == nil {
			*p = math.Float64frombits(binary.LittleEndian.Uint64(b[:]))
		}
	case *string:
		var l uint64
		if l, err = binary.ReadUvarint(r); err == nil {
			s := make([]byte, l)
			if _, err = io.ReadFull(r, s); err == nil {
				*p = string(s)
			}
		}
	}
	return k, err
}

type mergeHeap[K Key] struct{ cursors []*cursor[K] }

func (h *mergeHeap[K]) Len() int { return len(h.cursors) }
func (h *mergeHeap[K]) Less(i, j int) bool {
	return comparePairs(h.cursors[i].cur, h.cursors[j].cur) < 0
}
func (h *mergeHeap[K]) Swap(i, j int) { h.cursors[i], h.cursors[j] = h.cursors[j], h.cursors[i] }
func (h *mergeHeap[K]) Push(x any)    { h.cursors = append(h.cursors, x.(*cursor[K])) }
func (h *mergeHeap[K]) Pop() any {
	c := h.cursors[len(h.cursors)-1]
	h.cursors = h.cursors[:len(h.cursors)-1]
	return c
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
	limit := b.MaxKeys
	if limit <= 0 {
		limit = 1 << 20
	}
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
			if len(b.maps) >= limit {
				return fmt.Errorf("%w: more than %d", ErrTooManyKeys, limit)
			}
			acc = &bitmapAcc{bm: roaring64.New()}
			b.maps[k] = acc
		}
		acc.buf = append(acc.buf, firstRowID+uint64(i))
		if len(acc.buf) == 4096 {
			acc.bm.AddMany(acc.buf)
			acc.buf = acc.buf[:0]
		}
	}
	return nil
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
