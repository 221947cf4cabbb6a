package index

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"sort"
)

// Segment formats, told apart by their magic. A numeric segment is written in format 2, a
// string one in format 4 (formats 2 and 4 differ only in a string page's keys), and those are
// the formats read. Formats 1 and 3, and format 2 with string keys, were written only by
// development builds before 2026-12-06 (no release wrote them: docs/FORMATS.md); a reader
// refuses them with ErrRetiredFormat, whose fix is rebuilding the index.
const (
	btreeMagicV1 = "STWBT001" // retired
	btreeMagicV2 = "STWBT002"
	btreeMagicV3 = "STWBT003" // retired
	btreeMagic   = "STWBT004"
)

// writeMagic is the magic a writer of K keys gives its segment.
func writeMagic[K Key]() string {
	if KeyTypeOf[K]() == KeyString {
		return btreeMagic
	}
	return btreeMagicV2
}

// DefaultPageEntries is the number of (key, row id) pairs per BTREE page.
const DefaultPageEntries = 1024

// maxPageEntries bounds a page's entry count read from a segment.
const maxPageEntries = 1 << 20

// BTreeWriter streams sorted (key, row id) pairs into a BTREE segment:
//
//	magic | page* | lookup | trailer
//	lookup = (offset u64 | length u32 | count u32 | minKey | maxKey) per page
//
// A page (formats 2 to 4) is
//
//	count u32 | keys | base u64 | width u8 | (rowID - base) packed at width bits * count | crc32c u32
//
// numbers: keys are the order-preserving encodings of the keys (encodeInt, encodeFloat: a
// sorted page has no negative delta between them), in whichever of two forms is shorter:
//
//	deltas = 0 u8 | first u64 | width u8 | (key - key before) packed at width bits * (count-1)
//	runs   = 1 u8 | first u64 | distinct u32 | width u8 | steps packed at width bits * (distinct-1) |
//	         lwidth u8 | (run length - 1) packed at lwidth bits * distinct
//
// where runs lists each distinct key once (steps between them, each at least 1) and how many
// pairs hold it: a page of prices in cents holds ~100 distinct values in 1024 pairs. Strings
// are front-coded against the key before (shared is 0 for the first), in format 3 with the
// lengths packed and the suffixes coded over the page's alphabet (strkeys.go), in format 2 as
//
//	keys = (shared uvarint | suffixLen uvarint | suffix) * count
//
// Format 4 puts a form before a string page's keys: 0 for format 3's keys, or 1 for keys that
// a key code turns into numbers (codedkeys.go), stored as the code and the numbers as a
// numeric page's keys:
//
//	keys = 0 u8 | format 3 keys
//	keys = 1 u8 | width u8 | fixed u8 | symbols u8 | symbol bytes | shift u8 | numeric keys
//
// (fixed: every key's length, or 0xff for keys ended by symbol 0; see KeyCode; the numbers are
// the codes shifted down by shift bits, all of them zero in every code). Sorted random keys
// differ from the one before in fewer bits than their front-coded suffixes and lengths take:
// 16 hex digits a key, 10M keys, 5.5 bytes a key instead of 6.5. A writer with a code takes
// whichever form is shorter for each page (short keys, small pages: front coding).
//
// Packed values are least significant bit first in ceil(n*width/8) bytes, zero-padded (see
// pack.go). A sorted id column's page is thus about 1.4 bytes a row, where format 1 took 16:
//
//	page (format 1) = count u32 | key*count | rowID u64 * count | crc32c u32
type BTreeWriter[K Key] struct {
	w        *countingWriter
	perPage  int
	str      bool     // string keys
	sk       []uint64 // numbers: the page's keys, order-preserving encoded; coded strings: their codes
	code     *KeyCode // strings: set when they come coded as numbers (see KeyCode)
	keys     []K      // strings: the page's keys
	ids      []uint64
	strs     []byte   // addEntries' copy of the page's string keys: a builder reuses its buffers
	shifted  []uint64 // coded strings: the page's codes shifted down (see appendCodedKeys)
	sp       strPage  // strings: the page's keys front-coded
	scratch  []uint64 // the key deltas being packed
	page     []byte
	lookup   []byte
	pages    uint32
	entries  uint64
	last     K
	lastID   uint64
	started  bool
	finished bool
	// track: starts records where each lookup entry begins (a chunk writer's: its page
	// offsets are shifted once the chunk is placed). chunk is the chunk being written.
	track  bool
	starts []int
	chunk  *Chunk
	// AddSortedString's pages: the page's first key (a copy), the key before (the caller's,
	// or kept once detached).
	first, prev, kept []byte
}

// NewBTreeWriter writes a segment to w with pageEntries pairs per page (0 = DefaultPageEntries).
func NewBTreeWriter[K Key](w io.Writer, pageEntries int) (*BTreeWriter[K], error) {
	if pageEntries <= 0 {
		pageEntries = DefaultPageEntries
	}
	if pageEntries > maxPageEntries {
		return nil, fmt.Errorf("index: %d entries per page exceeds %d", pageEntries, maxPageEntries)
	}
	bw := &BTreeWriter[K]{w: &countingWriter{w: w}, perPage: pageEntries, str: KeyTypeOf[K]() == KeyString}
	if _, err := bw.w.Write([]byte(writeMagic[K]())); err != nil {
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
	if bw.str {
		bw.keys = append(bw.keys, k)
	} else {
		bw.sk = append(bw.sk, sortKeyOf(k))
	}
	bw.ids = append(bw.ids, id)
	if len(bw.ids) == bw.perPage {
		return bw.flush()
	}
	return nil
}

func (bw *BTreeWriter[K]) flush() error {
	n := len(bw.ids)
	if n == 0 {
		return nil
	}
	off := bw.w.off
	b := binary.LittleEndian.AppendUint32(bw.page[:0], uint32(n))
	var lo, hi K
	switch {
	case !bw.str:
		lo, hi = keyOfSort[K](bw.sk[0]), keyOfSort[K](bw.sk[n-1])
		b, bw.scratch = appendNumKeys(b, bw.sk, bw.scratch[:0])
	case bw.code != nil:
		var err error
		if b, lo, hi, err = bw.appendCodedKeys(b); err != nil {
			return err
		}
	case len(bw.keys) == 0: // front-coded as they came (AddSortedString)
		var err error
		if b, err = bw.sp.appendTo(b); err != nil {
			return err
		}
		lo, hi = any(arenaString(bw.first)).(K), any(arenaString(bw.prev)).(K)
	default:
		keys := any(bw.keys).([]string)
		lo, hi = bw.keys[0], bw.keys[n-1]
		var prev []byte
		for _, k := range keys {
			kb := stringBytes(k)
			shared := commonPrefix(prev, kb)
			bw.sp.add(shared, kb[shared:])
			prev = kb
		}
		var err error
		if b, err = bw.sp.appendTo(b); err != nil {
			return err
		}
	}
	return bw.writePage(b, off, lo, hi)
}

// writePage completes page b (its count and keys encoded, the row ids in bw.ids), writes it
// at off and enters it in the lookup table with its first and last keys.
func (bw *BTreeWriter[K]) writePage(b []byte, off int64, lo, hi K) error {
	n := len(bw.ids)
	base, top := bw.ids[0], bw.ids[0]
	for _, id := range bw.ids {
		base, top = min(base, id), max(top, id)
	}
	width := uint(bits.Len64(top - base))
	b = binary.LittleEndian.AppendUint64(b, base)
	b = appendPackedFrom(append(b, byte(width)), bw.ids, base, width)
	b = binary.LittleEndian.AppendUint32(b, checksum(b))
	bw.page = b
	if len(b) > maxSpanLen {
		return fmt.Errorf("%w: a page of %d bytes exceeds %d (use fewer entries per page)", ErrTooLarge, len(b), maxSpanLen)
	}
	if _, err := bw.w.Write(b); err != nil {
		return err
	}
	if bw.track {
		bw.starts = append(bw.starts, len(bw.lookup))
	}
	bw.lookup = binary.LittleEndian.AppendUint64(bw.lookup, uint64(off))
	bw.lookup = binary.LittleEndian.AppendUint32(bw.lookup, uint32(len(b)))
	bw.lookup = binary.LittleEndian.AppendUint32(bw.lookup, uint32(n))
	bw.lookup = appendKey(bw.lookup, lo)
	bw.lookup = appendKey(bw.lookup, hi)
	bw.pages++
	bw.entries += uint64(n)
	bw.keys, bw.ids, bw.strs = bw.keys[:0], bw.ids[:0], bw.strs[:0]
	bw.sk = bw.sk[:0]
	bw.sp.reset()
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
	return writeTail(bw.w, KeyTypeOf[K](), bw.pages, bw.entries, bw.lookup, writeMagic[K]())
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
	t, lookup, magic, err := readFrame(ctx, r, "btree", []string{btreeMagic, btreeMagicV3, btreeMagicV2, btreeMagicV1}, KeyTypeOf[K]())
	if err != nil {
		return nil, err
	}
	switch {
	case magic == writeMagic[K]():
	case magic == btreeMagic:
		return nil, corrupt("btree", 0, "format 4 holds string keys only")
	default:
		return nil, &retiredError{magic: magic}
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
			page := buf[p.off-start : p.off-start+p.length]
			if keys, ids, err = decodePage(page, p, keys[:0], ids[:0]); err != nil {
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

// decodePage decodes a page of format 2 (numbers) or 4 (strings).
func decodePage[K Key](b []byte, p btreePage[K], keys []K, ids []uint64) ([]K, []uint64, error) {
	body, err := pageBody(b, p)
	if err != nil {
		return nil, nil, err
	}
	bad := func(what string) error { return corrupt("btree", p.off, "page %s", what) }
	switch {
	case KeyTypeOf[K]() != KeyString:
		// ids serves as the keys' scratch, then holds the ids.
		if keys, body, ids, err = decodeNumKeys(body, p.count, keys, ids[:0], bad); err != nil {
			return nil, nil, err
		}
	case len(body) > 0 && body[0] == keysCoded:
		if keys, body, ids, err = decodeCodedKeys(body[1:], p.count, keys, ids[:0], bad); err != nil {
			return nil, nil, err
		}
	default:
		if len(body) == 0 || body[0] != keysFront {
			return nil, nil, bad("string keys in an unknown form")
		}
		body = body[1:]
		if keys, body, ids, err = decodeStrKeys(body, p.count, keys, ids[:0], bad); err != nil {
			return nil, nil, err
		}
	}
	if cmp.Compare(keys[0], p.min) != 0 || cmp.Compare(keys[len(keys)-1], p.max) != 0 {
		return nil, nil, bad("keys do not match its lookup entry")
	}
	if len(body) < 9 {
		return nil, nil, bad("row ids truncated")
	}
	base := binary.LittleEndian.Uint64(body)
	ids = slices.Grow(ids[:0], p.count)[:p.count]
	rest, ok := unpack(body[9:], uint(body[8]), ids)
	if !ok || len(rest) != 0 {
		return nil, nil, bad("row ids truncated or malformed")
	}
	for i, v := range ids {
		if base+v < base {
			return nil, nil, bad("row ids overflow")
		}
		ids[i] = base + v
	}
	return keys, ids, nil
}

// Forms of a page's numeric keys.
const (
	keysDeltas = 0
	keysRuns   = 1
)

// Forms of a format 4 page's string keys.
const (
	keysFront = 0 // front-coded, as in format 3
	keysCoded = 1 // coded as numbers by a key code
)

// appendNumKeys appends a page's sorted numeric keys (order-preserving encodings) in the
// shorter of their two forms; scratch is reused and returned.
func appendNumKeys(b []byte, sk, scratch []uint64) ([]byte, []uint64) {
	n := len(sk)
	d := slices.Grow(scratch[:0], 2*n)[:n-1]
	// Without branches: whether a delta is zero is a coin toss on a page of prices (a
	// hundred distinct values in 1024 pairs), and mispredicting it cost more than the rest
	// of the loop. nz is 1 for a step to the next distinct key, 0 within a run.
	distinct, run, longest, or := 1, uint64(0), uint64(0), uint64(0)
	for i := range d {
		v := sk[i+1] - sk[i]
		d[i] = v
		or |= v
		nz := (v | -v) >> 63
		distinct += int(nz)
		longest = max(longest, run)
		run = (run + 1) &^ -nz
	}
	longest = max(longest, run)
	// The steps between distinct keys are the nonzero deltas: their width is the deltas'.
	width, lwidth := uint(bits.Len64(or)), uint(bits.Len64(longest))
	deltaBits := (n - 1) * int(width)
	runsBits := 32 + 8 + (distinct-1)*int(width) + distinct*int(lwidth)
	if runsBits >= deltaBits {
		b = append(b, keysDeltas)
		b = binary.LittleEndian.AppendUint64(b, sk[0])
		return appendPacked(append(b, byte(width)), d, width), d
	}
	// Runs: steps and run lengths - 1 overwrite the deltas in place (never faster than they
	// are read: step k is written at k <= i), then the lengths follow the steps. Each delta
	// is written where the next step goes and kept only if it is one (k advances by nz): the
	// zeros after the last step land in a spare slot past the steps.
	steps, lens := d[:distinct], d[n-1:n-1+distinct]
	k, run := 0, uint64(0)
	for _, v := range d {
		nz := (v | -v) >> 63
		steps[k] = v
		lens[k] = run
		k += int(nz)
		run = (run + 1) &^ -nz
	}
	lens[k] = run
	steps = steps[:distinct-1]
	b = append(b, keysRuns)
	b = binary.LittleEndian.AppendUint64(b, sk[0])
	b = binary.LittleEndian.AppendUint32(b, uint32(distinct))
	b = appendPacked(append(b, byte(width)), steps, width)
	return appendPacked(append(b, byte(lwidth)), lens, lwidth), d
}

// decodeNumKeys reads n numeric keys in either form from the front of b onto keys, using
// scratch, and returns the bytes after them and scratch (grown).
func decodeNumKeys[K Key](b []byte, n int, keys []K, scratch []uint64, bad func(string) error) ([]K, []byte, []uint64, error) {
	if len(b) < 1+8 {
		return nil, nil, nil, bad("keys truncated")
	}
	form, k := b[0], binary.LittleEndian.Uint64(b[1:])
	b = b[9:]
	scratch = slices.Grow(scratch[:0], 2*n)
	switch form {
	case keysDeltas:
		if len(b) < 1 {
			return nil, nil, nil, bad("keys truncated")
		}
		d := scratch[:n-1]
		rest, ok := unpack(b[1:], uint(b[0]), d)
		if !ok {
			return nil, nil, nil, bad("key deltas truncated or malformed")
		}
		keys = append(keys, keyOfSort[K](k))
		for _, v := range d {
			if k+v < k {
				return nil, nil, nil, bad("key deltas overflow")
			}
			k += v
			keys = append(keys, keyOfSort[K](k))
		}
		return keys, rest, scratch, nil
	case keysRuns:
		if len(b) < 4+1 {
			return nil, nil, nil, bad("keys truncated")
		}
		distinct := int(binary.LittleEndian.Uint32(b))
		if distinct < 1 || distinct > n {
			return nil, nil, nil, bad("distinct key count out of range")
		}
		steps, lens := scratch[:distinct-1], scratch[distinct-1:2*distinct-1]
		rest, ok := unpack(b[5:], uint(b[4]), steps)
		if !ok || len(rest) < 1 {
			return nil, nil, nil, bad("key steps truncated or malformed")
		}
		if rest, ok = unpack(rest[1:], uint(rest[0]), lens); !ok {
			return nil, nil, nil, bad("key runs truncated or malformed")
		}
		total := 0
		for i, l := range lens {
			if l >= uint64(n) || total+int(l)+1 > n {
				return nil, nil, nil, bad("key runs do not add up to the page's count")
			}
			total += int(l) + 1
			if i > 0 {
				if v := steps[i-1]; v == 0 || k+v < k {
					return nil, nil, nil, bad("key steps zero or overflowing")
				}
				k += steps[i-1]
			}
			key := keyOfSort[K](k)
			for range l + 1 {
				keys = append(keys, key)
			}
		}
		if total != n {
			return nil, nil, nil, bad("key runs do not add up to the page's count")
		}
		return keys, rest, scratch, nil
	}
	return nil, nil, nil, bad("keys in an unknown form")
}

// pageBody checks a page's checksum and count and returns what lies between them.
func pageBody[K Key](b []byte, p btreePage[K]) ([]byte, error) {
	body := b[:len(b)-4]
	if checksum(body) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, corrupt("btree", p.off, "page checksum mismatch")
	}
	if int(binary.LittleEndian.Uint32(body)) != p.count {
		return nil, corrupt("btree", p.off, "page count disagrees with lookup table")
	}
	return body[4:], nil
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
