package index

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sort"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

const bitmapMagic = "STWBM001"

// maxBitmapKeys bounds the distinct keys a reader accepts from a lookup table.
const maxBitmapKeys = 1 << 24

// BitmapWriter streams (key, bitmap) entries, in key order, into a BITMAP segment:
//
//	magic | (roaring64 bytes | crc32c u32)* | lookup | trailer
//	lookup = (key | offset u64 | length u32) per key   (length includes the crc)
type BitmapWriter[K Key] struct {
	w        *countingWriter
	lookup   []byte
	keys     uint32
	entries  uint64
	last     K
	buf      bytes.Buffer
	finished bool
}

// NewBitmapWriter starts a segment on w.
func NewBitmapWriter[K Key](w io.Writer) (*BitmapWriter[K], error) {
	bw := &BitmapWriter[K]{w: &countingWriter{w: w}}
	if _, err := bw.w.Write([]byte(bitmapMagic)); err != nil {
		return nil, err
	}
	return bw, nil
}

// Add writes the bitmap of row ids holding key k. Keys must be strictly increasing.
func (bw *BitmapWriter[K]) Add(k K, ids *roaring64.Bitmap) error {
	if bw.keys > 0 && cmp.Compare(k, bw.last) <= 0 {
		return fmt.Errorf("%w: %v after %v", ErrUnsorted, k, bw.last)
	}
	bw.last = k
	ids.RunOptimize()
	bw.buf.Reset()
	if _, err := ids.WriteTo(&bw.buf); err != nil {
		return err
	}
	b := binary.LittleEndian.AppendUint32(bw.buf.Bytes(), checksum(bw.buf.Bytes()))
	if len(b) > maxSpanLen {
		return fmt.Errorf("%w: a bitmap of %d bytes exceeds %d", ErrTooLarge, len(b), maxSpanLen)
	}
	off := bw.w.off
	if _, err := bw.w.Write(b); err != nil {
		return err
	}
	bw.lookup = appendKey(bw.lookup, k)
	bw.lookup = binary.LittleEndian.AppendUint64(bw.lookup, uint64(off))
	bw.lookup = binary.LittleEndian.AppendUint32(bw.lookup, uint32(len(b)))
	bw.keys++
	bw.entries += ids.GetCardinality()
	return nil
}

// Close writes the lookup table and trailer; it does not close the underlying writer.
func (bw *BitmapWriter[K]) Close() error {
	if bw.finished {
		return nil
	}
	bw.finished = true
	return writeTail(bw.w, KeyTypeOf[K](), bw.keys, bw.entries, bw.lookup, bitmapMagic)
}

type bitmapEntry[K Key] struct {
	key    K
	off    int64
	length int64
}

// BitmapReader answers lookups on one BITMAP segment; the key table stays in memory and
// bitmaps are read on demand. It is safe for concurrent use.
type BitmapReader[K Key] struct {
	r       RangeReader
	entries []bitmapEntry[K]
	rows    uint64
}

// OpenBitmap reads and validates a segment's trailer and key table.
func OpenBitmap[K Key](ctx context.Context, r RangeReader) (*BitmapReader[K], error) {
	t, lookup, _, err := readFrame(ctx, r, "bitmap", []string{bitmapMagic}, KeyTypeOf[K]())
	if err != nil {
		return nil, err
	}
	if t.count > maxBitmapKeys || uint64(t.count) > uint64(len(lookup))/13 {
		return nil, corrupt("bitmap", int64(t.lookupOff), "%d keys cannot fit a %d-byte lookup table", t.count, len(lookup))
	}
	d := &lookupDecoder{b: lookup}
	entries := make([]bitmapEntry[K], 0, t.count)
	next := int64(len(bitmapMagic))
	for i := range int(t.count) {
		e := bitmapEntry[K]{key: lookupKey[K](d)}
		e.off, e.length = int64(d.u64()), int64(d.u32())
		switch {
		case d.bad:
			return nil, corrupt("bitmap", int64(t.lookupOff), "lookup entry %d truncated", i)
		case e.off != next || e.length < 4 || e.length > maxSpanLen || e.off+e.length > int64(t.lookupOff):
			return nil, corrupt("bitmap", int64(t.lookupOff), "bitmap %d at [%d,+%d) is not contiguous", i, e.off, e.length)
		case i > 0 && cmp.Compare(entries[i-1].key, e.key) >= 0:
			return nil, corrupt("bitmap", int64(t.lookupOff), "key %d out of order", i)
		}
		next = e.off + e.length
		entries = append(entries, e)
	}
	if len(d.b) != 0 || next != int64(t.lookupOff) {
		return nil, corrupt("bitmap", int64(t.lookupOff), "lookup table does not account for the segment")
	}
	return &BitmapReader[K]{r: r, entries: entries, rows: t.entries}, nil
}

// Keys is the number of distinct keys.
func (br *BitmapReader[K]) Keys() int { return len(br.entries) }

// Rows is the number of row ids over all bitmaps, as recorded by the writer.
func (br *BitmapReader[K]) Rows() uint64 { return br.rows }

// Equal returns the row ids holding k.
func (br *BitmapReader[K]) Equal(ctx context.Context, k K) (*roaring64.Bitmap, error) {
	return br.In(ctx, []K{k})
}

// In returns the row ids holding any of keys.
func (br *BitmapReader[K]) In(ctx context.Context, keys []K) (*roaring64.Bitmap, error) {
	out := roaring64.New()
	for _, k := range keys {
		i := sort.Search(len(br.entries), func(i int) bool { return cmp.Compare(br.entries[i].key, k) >= 0 })
		if i == len(br.entries) || cmp.Compare(br.entries[i].key, k) != 0 {
			continue
		}
		bm, err := br.load(ctx, br.entries[i])
		if err != nil {
			return nil, err
		}
		out.Or(bm)
	}
	return out, nil
}

// Search returns the row ids of every key in rg.
func (br *BitmapReader[K]) Search(ctx context.Context, rg Range[K]) (*roaring64.Bitmap, error) {
	out := roaring64.New()
	first := sort.Search(len(br.entries), func(i int) bool { return !rg.below(br.entries[i].key) })
	for i := first; i < len(br.entries) && !rg.above(br.entries[i].key); i++ {
		bm, err := br.load(ctx, br.entries[i])
		if err != nil {
			return nil, err
		}
		out.Or(bm)
	}
	return out, nil
}

func (br *BitmapReader[K]) load(ctx context.Context, e bitmapEntry[K]) (bm *roaring64.Bitmap, err error) {
	b, err := br.r.ReadRange(ctx, e.off, e.length)
	if err != nil {
		return nil, err
	}
	body := b[:len(b)-4]
	if checksum(body) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, corrupt("bitmap", e.off, "bitmap checksum mismatch")
	}
	// The checksum makes a malformed body unlikely; the recover keeps a forged one from
	// crashing the process inside the roaring decoder.
	defer func() {
		if r := recover(); r != nil {
			bm, err = nil, corrupt("bitmap", e.off, "roaring decode panicked: %v", r)
		}
	}()
	bm = roaring64.New()
	n, err := bm.ReadFrom(bytes.NewReader(body))
	if err != nil || n != int64(len(body)) {
		return nil, corrupt("bitmap", e.off, "roaring decode: %d of %d bytes: %v", n, len(body), err)
	}
	return bm, nil
}

// VerifyBitmap decodes every bitmap of a segment and checks the row count.
func VerifyBitmap[K Key](ctx context.Context, r RangeReader) (uint64, error) {
	br, err := OpenBitmap[K](ctx, r)
	if err != nil {
		return 0, err
	}
	var rows uint64
	for _, e := range br.entries {
		bm, err := br.load(ctx, e)
		if err != nil {
			return 0, err
		}
		rows += bm.GetCardinality()
	}
	if rows != br.rows {
		return 0, corrupt("bitmap", -1, "bitmaps hold %d rows, trailer says %d", rows, br.rows)
	}
	return rows, nil
}
