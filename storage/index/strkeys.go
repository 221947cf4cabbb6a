package index

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
)

// String keys of a format 3 page, front-coded against the key before as in format 2 but with
// the lengths bit-packed and the suffixes' bytes coded over the page's own alphabet:
//
//	keys    = swidth u8 | shared packed at swidth bits * count |
//	          lwidth u8 | suffix length packed at lwidth bits * count | suffixes
//	suffixes = 8 u8 | the suffixes' bytes                                 (raw)
//	         | width u8 | symbols-1 u8 | symbol u8 * symbols (ascending) |
//	           each suffix byte's index among the symbols packed at width bits
//
// where width (1 to 7) is the fewest bits that number the symbols, and the coded form is
// written whenever the suffixes hold at least one and at most 128 distinct bytes. Hex digits,
// UUIDs and most ASCII text take 4 to 6 bits a byte instead of 8; the suffixes are the largest
// part of a page of high-cardinality strings (16 random hex digits: 10 bytes a pair of 15 in
// format 2), and every byte kept off the segment is one its store no longer hashes, signs and
// writes.

// rawSymbols marks suffixes stored as their bytes.
const rawSymbols = 8

// strPage gathers one page's string keys as they come, front-coded, until the page is written.
type strPage struct {
	shared, lens []uint64
	suffixes     []byte
	keyBytes     int // the page's keys' total length, bounded like its encoding (maxSpanLen)
}

func (sp *strPage) reset() {
	sp.shared, sp.lens, sp.suffixes, sp.keyBytes = sp.shared[:0], sp.lens[:0], sp.suffixes[:0], 0
}

// add takes the next key as the length of the prefix it shares with the key before and the
// rest.
func (sp *strPage) add(shared int, suffix []byte) {
	sp.shared = append(sp.shared, uint64(shared))
	sp.lens = append(sp.lens, uint64(len(suffix)))
	sp.suffixes = append(sp.suffixes, suffix...)
	sp.keyBytes += shared + len(suffix)
}

// appendTo appends the page's keys, front-coded (format 4's form 0, format 3's keys after
// it). A page whose keys add up to more than maxSpanLen bytes is refused: a reader would take
// it for corruption.
func (sp *strPage) appendTo(b []byte) ([]byte, error) {
	b, err := sp.appendLens(append(b, keysFront))
	if err != nil {
		return nil, err
	}
	return appendSymbols(b, sp.suffixes), nil
}

// appendLens appends the page's keys up to their suffixes: the shared prefixes' and the
// suffixes' lengths.
func (sp *strPage) appendLens(b []byte) ([]byte, error) {
	if sp.keyBytes > maxSpanLen {
		return nil, fmt.Errorf("%w: a page of %d bytes of keys exceeds %d (use fewer entries per page)", ErrTooLarge, sp.keyBytes, maxSpanLen)
	}
	var ors, orl uint64
	for i, s := range sp.shared {
		ors |= s
		orl |= sp.lens[i]
	}
	sw, lw := uint(bits.Len64(ors)), uint(bits.Len64(orl))
	b = appendPacked(append(b, byte(sw)), sp.shared, sw)
	return appendPacked(append(b, byte(lw)), sp.lens, lw), nil
}

// appendSymbols appends src coded over its own alphabet, or raw when that saves nothing.
func appendSymbols(b, src []byte) []byte {
	// Stores only: a set of bits or-ed in place would chain every byte to the one before.
	var seen [256]byte
	for _, c := range src {
		seen[c] = 1
	}
	n := 0
	for _, s := range seen {
		n += int(s)
	}
	if n == 0 || n > 128 {
		return append(append(b, rawSymbols), src...)
	}
	width := symbolWidth(n)
	b = append(b, byte(width), byte(n-1))
	var code [256]uint64
	k := uint64(0)
	for c, s := range seen {
		if s != 0 {
			code[c] = k
			k++
			b = append(b, byte(c))
		}
	}
	b = slices.Grow(b, packedLen(len(src), width)+8)
	// Eight codes at a time make one value of 8*width bits (at most 56), appended to the
	// stream as appendPackedFrom does; the codes of a group are independent of each other.
	var acc uint64
	var used uint
	group := 8 * width
	full := len(src) &^ 7
	for i := 0; i < full; i += 8 {
		s := src[i : i+8 : i+8]
		v := code[s[0]] | code[s[1]]<<width | code[s[2]]<<(2*width) | code[s[3]]<<(3*width) |
			code[s[4]]<<(4*width) | code[s[5]]<<(5*width) | code[s[6]]<<(6*width) | code[s[7]]<<(7*width)
		acc |= v << used
		if used+group < 64 {
			used += group
			continue
		}
		b = binary.LittleEndian.AppendUint64(b, acc)
		acc = v >> (64 - used) // Go defines v >> 64 as 0
		used = used + group - 64
	}
	for _, c := range src[full:] {
		acc |= code[c] << used
		used += width // under 64 before: under 64 + width now
		if used >= 64 {
			b = binary.LittleEndian.AppendUint64(b, acc)
			used -= 64
			acc = code[c] >> (width - used)
		}
	}
	for ; used > 0; used -= min(used, 8) {
		b = append(b, byte(acc))
		acc >>= 8
	}
	return b
}

// symbolWidth is the fewest bits (at least one) that number n symbols.
func symbolWidth(n int) uint { return max(1, uint(bits.Len(uint(n-1)))) }

// decodeSymbols fills dst with len(dst) bytes coded by appendSymbols at the front of b and
// returns the bytes after them; ok is false if they are malformed.
func decodeSymbols(b, dst []byte) (rest []byte, ok bool) {
	if len(b) < 1 {
		return nil, false
	}
	width := uint(b[0])
	if width == rawSymbols {
		if len(b)-1 < len(dst) {
			return nil, false
		}
		copy(dst, b[1:])
		return b[1+len(dst):], true
	}
	if len(b) < 2 {
		return nil, false
	}
	n := int(b[1]) + 1
	if width == 0 || width >= rawSymbols || n > 128 || symbolWidth(n) != width || len(b)-2 < n {
		return nil, false
	}
	// tab maps a code to its symbol, or to 0x100 past the last: OR-ed together, one bad code
	// shows in the ninth bit without a branch a byte.
	var tab [128]uint16
	for i := range tab {
		tab[i] = 0x100
	}
	syms := b[2 : 2+n]
	for i, s := range syms {
		if i > 0 && s <= syms[i-1] {
			return nil, false
		}
		tab[i] = uint16(s)
	}
	b = b[2+n:]
	need := packedLen(len(dst), width)
	if len(b) < need {
		return nil, false
	}
	src := b[:need]
	mask := uint64(1)<<width - 1
	var bad uint16
	// Eight codes at a time from one little-endian word while eight bytes remain past the
	// group's first bit; the rest one at a time.
	pos, j := uint(0), 0
	group := 8 * width
	for ; j+8 <= len(dst) && int(pos>>3)+8 <= len(src); j += 8 {
		w := binary.LittleEndian.Uint64(src[pos>>3:]) >> (pos & 7)
		d := dst[j : j+8 : j+8]
		x0, x1, x2, x3 := tab[w&mask], tab[w>>width&mask], tab[w>>(2*width)&mask], tab[w>>(3*width)&mask]
		x4, x5, x6, x7 := tab[w>>(4*width)&mask], tab[w>>(5*width)&mask], tab[w>>(6*width)&mask], tab[w>>(7*width)&mask]
		bad |= x0 | x1 | x2 | x3 | x4 | x5 | x6 | x7
		d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7] = byte(x0), byte(x1), byte(x2), byte(x3), byte(x4), byte(x5), byte(x6), byte(x7)
		pos += group
	}
	for ; j < len(dst); j++ {
		at, shift := pos>>3, pos&7
		v := uint64(src[at]) >> shift
		if shift+width > 8 {
			v |= uint64(src[at+1]) << (8 - shift)
		}
		x := tab[v&mask]
		bad |= x
		dst[j] = byte(x)
		pos += width
	}
	if bad&0x100 != 0 {
		return nil, false
	}
	// The padding after the last code must be zero.
	if pad := uint(need)*8 - pos; pad > 0 && src[need-1]>>(8-pad) != 0 {
		return nil, false
	}
	return b[need:], true
}

// decodeStrKeys reads n keys of format 3 from the front of b onto keys, using scratch, and
// returns the bytes after them and scratch (grown). The keys share one new arena: none of them
// aliases b.
func decodeStrKeys[K Key](b []byte, n int, keys []K, scratch []uint64, bad func(string) error) ([]K, []byte, []uint64, error) {
	scratch = slices.Grow(scratch[:0], 2*n)[:2*n]
	shared, lens := scratch[:n], scratch[n:]
	if len(b) < 1 {
		return nil, nil, nil, bad("keys truncated")
	}
	b, ok := unpack(b[1:], uint(b[0]), shared)
	if !ok || len(b) < 1 {
		return nil, nil, nil, bad("key prefixes truncated or malformed")
	}
	if b, ok = unpack(b[1:], uint(b[0]), lens); !ok {
		return nil, nil, nil, bad("key lengths truncated or malformed")
	}
	// Lengths are checked before anything is sized by them: every key fits maxKeyLen, the
	// page's keys maxSpanLen, and the suffixes the bytes that code them (8 a byte at most).
	var total, keyBytes, prev uint64
	for i, s := range shared {
		if s > prev || i == 0 && s != 0 {
			return nil, nil, nil, bad("key prefix malformed")
		}
		l := lens[i]
		if l > maxKeyLen-s {
			return nil, nil, nil, bad("key too long")
		}
		prev = s + l
		total += l
		if keyBytes += prev; keyBytes > maxSpanLen {
			return nil, nil, nil, bad("keys longer than a page may hold")
		}
	}
	if total > 8*uint64(len(b)) {
		return nil, nil, nil, bad("key suffixes truncated")
	}
	arena := make([]byte, keyBytes+total)
	suffixes := arena[keyBytes:]
	if b, ok = decodeSymbols(b, suffixes); !ok {
		return nil, nil, nil, bad("key suffixes truncated or malformed")
	}
	at, last := 0, ""
	for i, s := range shared {
		l := int(lens[i])
		copy(arena[at:], last[:s])
		copy(arena[at+int(s):], suffixes[:l])
		suffixes = suffixes[l:]
		k := arenaString(arena[at : at+int(s)+l])
		if k < last {
			return nil, nil, nil, bad("keys out of order")
		}
		keys = append(keys, any(k).(K))
		at += int(s) + l
		last = k
	}
	return keys, b, scratch, nil
}
