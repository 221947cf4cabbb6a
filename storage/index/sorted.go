package index

import (
	"encoding/binary"
	"math/bits"
)

// What a builder (storage/index/build) needs of the format beyond Add: a builder sorts its pairs
// itself and hands them over in (key, row id) order, as their encodings, front-coded as they
// come, or as pages it encoded on other cores. Every path writes the bytes Add writes of the
// same pairs; the builder's tests compare the two byte for byte.

// SortKeyInt64 and SortKeyFloat64 are the order-preserving encodings of numbers that numeric
// pages store: their unsigned order is cmp.Compare's order (every NaN one value, -0 as +0).
func SortKeyInt64(v int64) uint64 { return encodeInt(v) }

// SortKeyFloat64: see SortKeyInt64.
func SortKeyFloat64(f float64) uint64 { return encodeFloat(f) }

// CommonPrefix is the length of the prefix a and b share.
func CommonPrefix(a, b []byte) int { return commonPrefix(a, b) }

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	a, b = a[:n], b[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		// The first differing byte of a word is its lowest set byte of the xor (little endian).
		if x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:]); x != 0 {
			return i + bits.TrailingZeros64(x)/8
		}
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// PageEntries is the writer's pairs per page.
func (bw *BTreeWriter[K]) PageEntries() int { return bw.perPage }

// Room is how many more pairs the page being filled takes before it is written.
func (bw *BTreeWriter[K]) Room() int { return bw.perPage - len(bw.ids) }

// SetKeyCode makes a string writer take its keys as codes of c (AddEncoded) and write each page
// in format 4's coded form, or front-coded where that is shorter. Call it before the first pair.
func (bw *BTreeWriter[K]) SetKeyCode(c *KeyCode) { bw.code = c }

// AddEncoded appends pairs that come in (key, row id) order as their keys' encodings: SortKeyInt64
// or SortKeyFloat64 for numbers, codes of the writer's KeyCode for strings.
func (bw *BTreeWriter[K]) AddEncoded(sk, ids []uint64) error {
	for len(ids) > 0 {
		n := min(len(ids), bw.Room())
		bw.sk = append(bw.sk, sk[:n]...)
		bw.ids = append(bw.ids, ids[:n]...)
		sk, ids = sk[n:], ids[n:]
		if len(bw.ids) == bw.perPage {
			if err := bw.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// AddSortedString appends a pair of a string writer without a key code, pairs coming in (key,
// row id) order, and front-codes the key at once: shared, when not negative, is the length of
// the prefix s shares with the key before (a caller that sorted by prefixes knows it). s must
// stay unchanged until the next call or Detach.
func (bw *BTreeWriter[K]) AddSortedString(s []byte, id uint64, shared int) error {
	if len(bw.ids) == 0 {
		bw.first, bw.prev, shared = append(bw.first[:0], s...), nil, 0
	}
	if shared < 0 {
		shared = commonPrefix(bw.prev, s)
	}
	bw.sp.add(shared, s[shared:])
	bw.prev = s
	bw.ids = append(bw.ids, id)
	if len(bw.ids) == bw.perPage {
		return bw.flush()
	}
	return nil
}

// Detach copies the last key AddSortedString took, before the caller reuses its buffer.
func (bw *BTreeWriter[K]) Detach() {
	bw.kept = append(bw.kept[:0], bw.prev...)
	bw.prev = bw.kept
}

// Chunk holds pages a chunk writer encoded apart from their segment, with their lookup
// entries, until AppendChunk writes them into it.
type Chunk struct {
	pages   appendWriter
	lookup  []byte
	starts  []int // where each of lookup's entries starts (its offset comes first)
	count   uint32
	entries uint64
}

type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// NewChunk returns a chunk whose pages buffer starts with capacity bytes.
func NewChunk(capacity int) *Chunk { return &Chunk{pages: appendWriter{b: make([]byte, 0, capacity)}} }

// Entries is the number of pairs in the chunk.
func (c *Chunk) Entries() uint64 { return c.entries }

// NewChunkWriter returns a writer of pages alone (no magic, no lookup table, no trailer) into
// chunks, for pages encoded on several cores and appended to one segment in order. Pages split
// as the segment's writer would split them (every chunk but the last ends on a page boundary)
// come out byte for byte as that writer writes them.
func NewChunkWriter[K Key](perPage int, code *KeyCode) *BTreeWriter[K] {
	return &BTreeWriter[K]{perPage: perPage, str: KeyTypeOf[K]() == KeyString, code: code, track: true}
}

// StartChunk empties c, and makes c where the pages of a chunk writer go from now on.
func (bw *BTreeWriter[K]) StartChunk(c *Chunk) {
	c.pages.b = c.pages.b[:0]
	bw.w = &countingWriter{w: &c.pages}
	bw.lookup, bw.starts, bw.pages, bw.entries = c.lookup[:0], c.starts[:0], 0, 0
	bw.chunk = c
}

// EndChunk writes the page being filled into the chunk StartChunk began.
func (bw *BTreeWriter[K]) EndChunk() error {
	if err := bw.flush(); err != nil {
		return err
	}
	c := bw.chunk
	c.lookup, c.starts, c.count, c.entries = bw.lookup, bw.starts, bw.pages, bw.entries
	return nil
}

// AppendChunk writes c's pages after bw's and enters them in its lookup table. bw must have no
// page being filled.
func (bw *BTreeWriter[K]) AppendChunk(c *Chunk) error {
	base := uint64(bw.w.off)
	if _, err := bw.w.Write(c.pages.b); err != nil {
		return err
	}
	for _, at := range c.starts {
		binary.LittleEndian.PutUint64(c.lookup[at:], binary.LittleEndian.Uint64(c.lookup[at:])+base)
	}
	bw.lookup = append(bw.lookup, c.lookup...)
	bw.pages += c.count
	bw.entries += c.entries
	return nil
}
