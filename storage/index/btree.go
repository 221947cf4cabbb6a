package index

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"sort"
)

const btreeMagic = "STWBT001"

// DefaultPageEntries is the number of (key, row id) pairs per BTREE page.
const DefaultPageEntries = 1024

// maxPageEntries bounds a page's entry count read from a segment.
const maxPageEntries = 1 << 20

// BTreeWriter streams sorted (key, row id) pairs into a BTREE segment:
//
//	magic | page* | lookup | trailer
//	page   = count u32 | key*count | rowID u64 * count | crc32c u32
//	lookup = (offset u64 | length u32 | count u32 | minKey | maxKey) per page
type BTreeWriter[K Key] struct {
	w        *countingWriter
	perPage  int
	keys     []K
	ids      []uint64
	strs     []byte // addEntries' copy of the page's string keys: a builder reuses its buffers
	page     []byte
	lookup   []byte
	pages    uint32
	entries  uint64
	last     K
	lastID   uint64
	started  bool
	finished bool
}

// NewBTreeWriter writes a segment to w with pageEntries pairs per page (0 = DefaultPageEntries).
func NewBTreeWriter[K Key](w io.Writer, pageEntries int) (*BTreeWriter[K], error) {
	if pageEntries <= 0 {
		pageEntries = DefaultPageEntries
	}
	if pageEntries > maxPageEntries {
		return nil, fmt.Errorf("index: %d entries per page exceeds %d", pageEntries, maxPageEntries)
	}
	bw := &BTreeWriter[K]{w: &countingWriter{w: w}, perPage: pageEntries}
	if _, err := bw.w.Write([]byte(btreeMagic)); err != nil {
		return nil, err
	}
	return bw, nil
}

// Add appends one pair. Pairs must come in (key, row id) order.
func (bw *BTreeWriter[K]) Add(k K, id uint64) error {
	if bw.started {
		if c := cmp.Compare(k, bw.last); c < 0 || (c == 0 && id <= bw.lastID) {
			return fmt.Errorf("%w: (%v, %d) after (%v, %d)", ErrUnsorted, k, id, bw.last, bw.lastID)
		}
	}
	bw.started, bw.last, bw.lastID = true, k, id
	bw.keys = append(bw.keys, k)
	bw.ids = append(bw.ids, id)
	if len(bw.keys) == bw.perPage {
		return bw.flush()
	}
	return nil
}

func (bw *BTreeWriter[K]) flush() error {
	if len(bw.keys) == 0 {
		return nil
	}
	off := bw.w.off
	b := binary.LittleEndian.AppendUint32(bw.page[:0], uint32(len(bw.keys)))
	b = appendKeys(b, bw.keys)
	for _, id := range bw.ids {
		b = binary.LittleEndian.AppendUint64(b, id)
	}
	b = binary.LittleEndian.AppendUint32(b, checksum(b))
	bw.page = b
	if len(b) > maxSpanLen {
		return fmt.Errorf("%w: a page of %d bytes exceeds %d (use fewer entries per page)", ErrTooLarge, len(b), maxSpanLen)
	}
	if _, err := bw.w.Write(b); err != nil {
		return err
	}
	bw.lookup = binary.LittleEndian.AppendUint64(bw.lookup, uint64(off))
	bw.lookup = binary.LittleEndian.AppendUint32(bw.lookup, uint32(len(b)))
	bw.lookup = binary.LittleEndian.AppendUint32(bw.lookup, uint32(len(bw.keys)))
	bw.lookup = appendKey(bw.lookup, bw.keys[0])
	bw.lookup = appendKey(bw.lookup, bw.keys[len(bw.keys)-1])
	bw.pages++
	bw.entries += uint64(len(bw.keys))
	bw.keys, bw.ids, bw.strs = bw.keys[:0], bw.ids[:0], bw.strs[:0]
	return nil
}

// addEntries appends pairs a builder has already sorted, skipping Add's order check.
func addEntries[K Key](bw *BTreeWriter[K], es []entry) error {
	for len(es) > 0 {
		n := min(len(es), bw.perPage-len(bw.keys))
		switch ks := any(&bw.keys).(type) {
		case *[]int64:
			for _, e := range es[:n] {
				*ks = append(*ks, decodeInt(e.k))
			}
		case *[]float64:
			for _, e := range es[:n] {
				*ks = append(*ks, decodeFloat(e.k))
			}
		case *[]string:
			// e.s points into a merge buffer that is refilled once es is consumed: the page
			// keeps its own copy. A grown strs leaves the keys before it in the old array.
			for _, e := range es[:n] {
				at := len(bw.strs)
				bw.strs = append(bw.strs, e.s...)
				*ks = append(*ks, arenaString(bw.strs[at:]))
			}
		}
		for _, e := range es[:n] {
			bw.ids = append(bw.ids, e.id)
		}
		es = es[n:]
		if len(bw.keys) == bw.perPage {
			if err := bw.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close writes the last page, the lookup table and the trailer. It does not close the
// underlying writer.
func (bw *BTreeWriter[K]) Close() error {
	if bw.finished {
		return nil
	}
	bw.finished = true
	if err := bw.flush(); err != nil {
		return err
	}
	return writeTail(bw.w, KeyTypeOf[K](), bw.pages, bw.entries, bw.lookup, btreeMagic)
}

type btreePage[K Key] struct {
	off      int64
	length   int64
	count    int
	min, max K
}

// BTreeReader answers lookups on one BTREE segment. It keeps the lookup table in memory and
// reads pages on demand. It is safe for concurrent use.
type BTreeReader[K Key] struct {
	r       RangeReader
	pages   []btreePage[K]
	entries uint64
}

// OpenBTree reads and validates a segment's trailer and lookup table.
func OpenBTree[K Key](ctx context.Context, r RangeReader) (*BTreeReader[K], error) {
	t, lookup, err := readFrame(ctx, r, "btree", btreeMagic, KeyTypeOf[K]())
	if err != nil {
		return nil, err
	}
	if uint64(t.count) > uint64(len(lookup))/16 {
		return nil, corrupt("btree", int64(t.lookupOff), "%d pages cannot fit a %d-byte lookup table", t.count, len(lookup))
	}
	d := &lookupDecoder{b: lookup}
	pages := make([]btreePage[K], 0, t.count)
	next := int64(len(btreeMagic))
	var total uint64
	for i := range int(t.count) {
		p := btreePage[K]{off: int64(d.u64()), length: int64(d.u32()), count: int(d.u32())}
		p.min, p.max = lookupKey[K](d), lookupKey[K](d)
		switch {
		case d.bad:
			return nil, corrupt("btree", int64(t.lookupOff), "lookup entry %d truncated", i)
		case p.off != next || p.length < 8 || p.length > maxSpanLen || p.off+p.length > int64(t.lookupOff):
			return nil, corrupt("btree", int64(t.lookupOff), "page %d at [%d,+%d) is not contiguous", i, p.off, p.length)
		case p.count <= 0 || p.count > maxPageEntries || cmp.Compare(p.min, p.max) > 0:
			return nil, corrupt("btree", int64(t.lookupOff), "page %d has bad count or bounds", i)
		case i > 0 && cmp.Compare(pages[i-1].max, p.min) > 0:
			return nil, corrupt("btree", int64(t.lookupOff), "page %d overlaps its predecessor", i)
		}
		next = p.off + p.length
		total += uint64(p.count)
		pages = append(pages, p)
	}
	if len(d.b) != 0 || next != int64(t.lookupOff) || total != t.entries {
		return nil, corrupt("btree", int64(t.lookupOff), "lookup table does not account for the segment")
	}
	return &BTreeReader[K]{r: r, pages: pages, entries: t.entries}, nil
}

// Entries is the number of (key, row id) pairs in the segment.
func (br *BTreeReader[K]) Entries() uint64 { return br.entries }

// Pages is the number of pages in the segment.
func (br *BTreeReader[K]) Pages() int { return len(br.pages) }

// Search returns the row ids of all keys in rg, in key order (not sorted by row id).
func (br *BTreeReader[K]) Search(ctx context.Context, rg Range[K]) ([]uint64, error) {
	var out []uint64
	err := br.Scan(ctx, rg, func(_ K, id uint64) bool { out = append(out, id); return true })
	return out, err
}

// Scan calls fn for each pair with a key in rg, in order, until fn returns false.
func (br *BTreeReader[K]) Scan(ctx context.Context, rg Range[K], fn func(K, uint64) bool) error {
	// First page that can hold a key >= lo: its max is not below the range.
	first := sort.Search(len(br.pages), func(i int) bool { return !rg.below(br.pages[i].max) })
	last := first
	for last < len(br.pages) && !rg.above(br.pages[last].min) {
		last++
	}
	if first == last {
		return nil
	}
	// Pages are contiguous: fetch them in runs of up to maxRunLen bytes (one page at least).
	var keys []K
	var ids []uint64
	for lo := first; lo < last; {
		start, hi := br.pages[lo].off, lo+1
		for hi < last && br.pages[hi].off+br.pages[hi].length-start <= maxRunLen {
			hi++
		}
		end := br.pages[hi-1].off + br.pages[hi-1].length
		buf, err := br.r.ReadRange(ctx, start, end-start)
		if err != nil {
			return err
		}
		for _, p := range br.pages[lo:hi] {
			keys, ids, err = decodePage(buf[p.off-start:p.off-start+p.length], p, keys[:0], ids[:0])
			if err != nil {
				return err
			}
			for j, k := range keys {
				if rg.above(k) || !rg.below(k) && !fn(k, ids[j]) {
					return nil
				}
			}
		}
		lo = hi
	}
	return nil
}

func decodePage[K Key](b []byte, p btreePage[K], keys []K, ids []uint64) ([]K, []uint64, error) {
	body := b[:len(b)-4]
	if checksum(body) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, nil, corrupt("btree", p.off, "page checksum mismatch")
	}
	if int(binary.LittleEndian.Uint32(body)) != p.count {
		return nil, nil, corrupt("btree", p.off, "page count disagrees with lookup table")
	}
	body = body[4:]
	for range p.count {
		k, n := decodeKey[K](body)
		if n <= 0 {
			return nil, nil, corrupt("btree", p.off, "page key truncated")
		}
		if len(keys) > 0 && cmp.Compare(keys[len(keys)-1], k) > 0 {
			return nil, nil, corrupt("btree", p.off, "page keys out of order")
		}
		keys = append(keys, k)
		body = body[n:]
	}
	if len(body) != 8*p.count || cmp.Compare(keys[0], p.min) != 0 || cmp.Compare(keys[len(keys)-1], p.max) != 0 {
		return nil, nil, corrupt("btree", p.off, "page body does not match its lookup entry")
	}
	for i := range p.count {
		ids = append(ids, binary.LittleEndian.Uint64(body[8*i:]))
	}
	return keys, ids, nil
}

// VerifyBTree decodes every page of a segment: a full consistency check.
func VerifyBTree[K Key](ctx context.Context, r RangeReader) (uint64, error) {
	br, err := OpenBTree[K](ctx, r)
	if err != nil {
		return 0, err
	}
	var n uint64
	err = br.Scan(ctx, Range[K]{}, func(K, uint64) bool { n++; return true })
	if err == nil && n != br.entries {
		err = corrupt("btree", -1, "pages hold %d entries, trailer says %d", n, br.entries)
	}
	return n, err
}
