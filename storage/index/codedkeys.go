package index

import (
	"math/bits"
	"slices"
)

// Format 4's coded form: a string page whose keys a KeyCode turns into numbers stores the code
// and the numbers as a numeric page's keys (see BTreeWriter).

// KeyCode codes a string as one symbol per byte, width bits each, from the top bit down: the
// symbols are the bytes of an alphabet in ascending order, so comparing two codes compares
// the strings. Two forms:
//
//   - terminated (fixed < 0): symbol 0 ends the key and the bytes take 1..n, so keys of any
//     length up to max order like their bytes ("ab" < "ab\x00" < "abc");
//   - fixed (fixed = every key's length): the bytes take 0..n-1, for keys of one length whose
//     terminated form would not fit 64 bits (16 hex digits: 4 bits a digit, not 5).
type KeyCode struct {
	// at[p] maps a byte to its symbol shifted to the place of the p-th of eight (the last
	// unshifted), or to badCode when the alphabet lacks the byte.
	at    [8][256]uint64
	syms  []byte // symbol (less base) to byte, ascending
	base  uint64 // the first byte's symbol: 1 when terminated, else 0
	width uint
	fixed int // every key's length in the fixed form; -1 when terminated
	max   int // the longest key that fits
	// symbolsIn[z] is z/width, the symbols z leading zero bits cover; lenAbove[z] is
	// ceil((64-z)/width), the symbols down to the last set bit of a key with z trailing zero
	// bits. Looked up: a division by a width known only at run time costs tens of cycles,
	// and a page's writer takes two a key.
	symbolsIn, lenAbove [65]uint8
}

// badCode marks a byte outside the alphabet: eight symbols take 56 bits at most, since a
// symbol takes at most 7 (see newKeyCode).
const badCode = 1 << 63

// NewKeyCode returns the code over the bytes syms (ascending, each once) for keys of minLen to
// maxLen bytes, or nil when such keys do not fit one uint64 each. The terminated form is taken
// when the longest key leaves a quarter of the symbols a key may have spare (later keys may be
// shorter or a little longer), the fixed form only when every key has one length.
func NewKeyCode(syms []byte, minLen, maxLen int) *KeyCode {
	c := &KeyCode{syms: syms}
	// A symbol takes at most 7 bits, so that eight of them leave the top bit for badCode: an
	// alphabet that needs 8 is as wide as the bytes themselves.
	n := len(c.syms)
	switch tw := uint(max(1, bits.Len(uint(n)))); {
	case tw <= 7 && maxLen*int(tw) <= 48:
		c.width, c.base, c.fixed, c.max = tw, 1, -1, 64/int(tw)
	case symbolWidth(n) <= 7 && minLen == maxLen && maxLen*int(symbolWidth(n)) <= 64:
		c.width, c.fixed, c.max = symbolWidth(n), maxLen, maxLen
	default:
		return nil
	}
	for z := range c.lenAbove {
		c.symbolsIn[z] = uint8(uint(z) / c.width)
		c.lenAbove[z] = uint8((64 - uint(z) + c.width - 1) / c.width)
	}
	for p := range c.at {
		for v := range c.at[p] {
			c.at[p][v] = badCode
		}
		for i, v := range c.syms {
			c.at[p][v] = (uint64(i) + c.base) << (uint(7-p) * c.width)
		}
	}
	return c
}

// KeyCodeOf returns the code over the bytes the keys data[offs[i]:offs[i+1]] hold, for keys
// of their lengths (NewKeyCode), or nil when they do not fit one uint64 each.
func KeyCodeOf(data []byte, offs []uint32) *KeyCode {
	var seen [256]bool
	minLen, maxLen := int(^uint(0)>>1), 0
	for i := 1; i < len(offs); i++ {
		s := data[offs[i-1]:offs[i]]
		minLen, maxLen = min(minLen, len(s)), max(maxLen, len(s))
		for _, c := range s {
			seen[c] = true
		}
	}
	var syms []byte
	for v := range 256 {
		if seen[v] {
			syms = append(syms, byte(v))
		}
	}
	return NewKeyCode(syms, minLen, maxLen)
}

// MaxBytes is the most bytes a key's code takes packed: its longest key's symbols.
func (c *KeyCode) MaxBytes() int { return (c.max*int(c.width) + 7) / 8 }

// MaxLen is the longest key the code takes.
func (c *KeyCode) MaxLen() int { return c.max }

// Width is the bits a symbol takes.
func (c *KeyCode) Width() uint { return c.width }

// Fixed is every key's length in the fixed form, -1 in the terminated form.
func (c *KeyCode) Fixed() int { return c.fixed }

// Shared is the length of the prefix the keys coded as a and b have in common.
func (c *KeyCode) Shared(a, b uint64) int { return c.shared(a, b) }

// EncodeBytes codes the keys data[offs[i]:offs[i+1]] (len(offs)-1 of them, as a Parquet
// page's byte-array values come) into keys, and reports whether they all fit.
func (c *KeyCode) EncodeBytes(keys []uint64, data []byte, offs []uint32) bool {
	keys = keys[:len(offs)-1]
	var bad uint64
	if c.fixed >= 0 {
		// Once every key is known to have the length, they lie one after the other at a
		// stride and are coded without their offsets (a tenth faster for 16 hex digits).
		l := uint32(c.fixed)
		for i := 1; i < len(offs); i++ {
			if offs[i]-offs[i-1] != l {
				return false
			}
		}
		data := data[offs[0]:offs[len(keys)]]
		if l == 16 {
			return c.encode16(keys, data)
		}
		for i := range keys {
			k, b := c.encode(data[:l:l])
			data = data[l:]
			keys[i], bad = k, bad|b
		}
		return bad == 0
	}
	for i := range keys {
		s := data[offs[i]:offs[i+1]]
		if len(s) > c.max {
			return false
		}
		k, b := c.encode(s)
		keys[i], bad = k, bad|b
	}
	return bad == 0
}

// EncodeStrings is EncodeBytes for keys given as strings.
func (c *KeyCode) EncodeStrings(keys []uint64, ks []string) bool {
	var bad uint64
	for i, s := range ks {
		if len(s) > c.max || c.fixed >= 0 && len(s) != c.fixed {
			return false
		}
		k, b := c.encode(stringBytes(s))
		keys[i], bad = k, bad|b
	}
	return bad == 0
}

// encode16 codes keys of 16 bytes each (hex digests, the commonest fixed length), one after
// the other in data, into keys, and reports whether they all fit: encode with its two groups
// of eight written out, in the loop (a call a key, and its loop, cost as much as the lookups).
func (c *KeyCode) encode16(keys []uint64, data []byte) bool {
	at := &c.at
	g := (8 * c.width) & 63       // a group's bits: 32 for hex digits
	end := (64 - 16*c.width) & 63 // 0 for hex digits
	var bad uint64
	for i := range keys {
		b := data[16*i : 16*i+16 : 16*i+16]
		x := at[0][b[0]] | at[1][b[1]] | at[2][b[2]] | at[3][b[3]] |
			at[4][b[4]] | at[5][b[5]] | at[6][b[6]] | at[7][b[7]]
		y := at[0][b[8]] | at[1][b[9]] | at[2][b[10]] | at[3][b[11]] |
			at[4][b[12]] | at[5][b[13]] | at[6][b[14]] | at[7][b[15]]
		bad |= x | y
		keys[i] = ((x&^badCode)<<g | y&^badCode) << end
	}
	return bad&badCode == 0
}

// encode codes s (at most max bytes). A byte outside the alphabet sets a bit in bad (the code
// is garbled then).
func (c *KeyCode) encode(s []byte) (k, bad uint64) {
	n := uint(len(s))
	// Eight bytes at a time, each symbol looked up already shifted to its place in the eight:
	// loads and ors, independent of each other (a chain of shifts through k, a byte at a time,
	// is several times slower). The symbols go in from the bottom, and the key is moved to the
	// top once it is complete.
	for ; len(s) >= 8; s = s[8:] {
		b := s[:8:8]
		x := c.at[0][b[0]] | c.at[1][b[1]] | c.at[2][b[2]] | c.at[3][b[3]] |
			c.at[4][b[4]] | c.at[5][b[5]] | c.at[6][b[6]] | c.at[7][b[7]]
		bad |= x
		k = k<<(8*c.width) | x&^badCode // 8 symbols are at most 56 bits (see newKeyCode)
	}
	for _, v := range s {
		x := c.at[7][v]
		bad |= x
		k = k<<c.width | x&^badCode
	}
	return k << ((64 - n*c.width) & 63), bad & badCode
}

// KeyLen is the length of the key coded as k.
func (c *KeyCode) KeyLen(k uint64) int {
	if c.fixed >= 0 {
		return c.fixed
	}
	// The last symbol that is not 0 holds the lowest set bit.
	return int(c.lenAbove[bits.TrailingZeros64(k)])
}

// AppendKey appends the key coded as k to dst.
func (c *KeyCode) AppendKey(dst []byte, k uint64) []byte {
	return c.appendSuffix(dst, k, 0, c.KeyLen(k))
}

// shared is the length of the prefix the keys coded as a and b have in common.
func (c *KeyCode) shared(a, b uint64) int {
	if a == b {
		return c.KeyLen(a)
	}
	// The first symbol that differs; a key that ends there has symbol 0 against one that
	// does not, so the shorter key is the prefix.
	return int(c.symbolsIn[bits.LeadingZeros64(a^b)])
}

// appendCodedKeys appends the page's keys, coded in bw.sk: in format 4's coded form (the key
// code, the bits below every code's lowest set one, then the codes shifted down by them as a
// numeric page's keys) or, when that would take more bytes (short keys, small pages), spelled
// out and front-coded. lo and hi are the first and last keys spelled out, kept in bw.strs
// until the page is written.
func (bw *BTreeWriter[K]) appendCodedKeys(b []byte) (_ []byte, lo, hi K, _ error) {
	c, ks := bw.code, bw.sk
	var or uint64
	for _, k := range ks {
		or |= k
	}
	tz := uint(bits.TrailingZeros64(or)) & 63 // 0 when every key is empty
	fixed := byte(codeTerminated)
	if c.fixed >= 0 {
		fixed = byte(c.fixed)
	}
	start := len(b)
	b = append(append(b, keysCoded, byte(c.width), fixed, byte(len(c.syms))), c.syms...)
	b = append(b, byte(tz))
	shifted := slices.Grow(bw.shifted[:0], len(ks))[:len(ks)]
	for i, k := range ks {
		shifted[i] = k >> tz
	}
	bw.shifted = shifted
	b, bw.scratch = appendNumKeys(b, shifted, bw.scratch[:0])
	// Front coding's size, about, from every step-th key and the one before it: the lengths
	// at their widths and each suffix at the code's width (the page's own alphabet may be
	// narrower). A sample is enough to choose the form: an eighth of a full page's keys.
	step := max(1, len(ks)/128)
	var ors, orl uint64
	suffix := c.KeyLen(ks[0])
	for i := step; i < len(ks); i += step {
		l, sh := c.KeyLen(ks[i]), c.shared(ks[i-1], ks[i])
		ors, orl, suffix = ors|uint64(sh), orl|uint64(l-sh), suffix+(l-sh)*step
	}
	front := 2 + len(c.syms) + (len(ks)*(bits.Len64(ors)+bits.Len64(orl|uint64(c.KeyLen(ks[0]))))+suffix*int(symbolWidth(len(c.syms))))/8
	strs := bw.strs[:0]
	if front >= len(b)-start {
		strs = c.AppendKey(strs, ks[0])
		at := len(strs)
		strs = c.AppendKey(strs, ks[len(ks)-1])
		bw.strs = strs
		return b, any(arenaString(strs[:at])).(K), any(arenaString(strs[at:])).(K), nil
	}
	// Front-coded: the keys spelled out one after the other in strs; the first ends at
	// firstEnd, the last starts at at.
	var at, firstEnd int
	for i, k := range ks {
		at, strs = len(strs), c.AppendKey(strs, k)
		sh := 0
		if i > 0 {
			sh = c.shared(ks[i-1], k)
		} else {
			firstEnd = len(strs)
		}
		bw.sp.add(sh, strs[at+sh:])
	}
	bw.strs = strs
	b, err := bw.sp.appendTo(b[:start])
	if err != nil {
		return nil, lo, hi, err
	}
	return b, any(arenaString(strs[:firstEnd])).(K), any(arenaString(strs[at:])).(K), nil
}

// codeTerminated is a coded page's fixed length byte for a terminated code.
const codeTerminated = 0xff

// decodeCodedKeys reads n keys of format 4's coded form (after its form byte) from the front
// of b onto keys, using scratch, and returns the bytes after them and scratch (grown). The
// code is checked as newKeyCode makes one, and every number as encode makes one: its symbols
// in the alphabet, no bit set past a key's last symbol (its terminator, in a terminated code),
// so that each key has one number and the numbers' order is the keys'. The keys share one new
// arena: none of them aliases b.
func decodeCodedKeys[K Key](b []byte, n int, keys []K, scratch []uint64, bad func(string) error) ([]K, []byte, []uint64, error) {
	if len(b) < 3 || len(b) < 3+int(b[2]) {
		return nil, nil, nil, bad("key code truncated")
	}
	width, fixed, syms := uint(b[0]), int(b[1]), b[3:3+int(b[2])]
	b = b[3+len(syms):]
	if len(b) < 1 || b[0] > 63 {
		return nil, nil, nil, bad("key code truncated or malformed")
	}
	tz := uint(b[0])
	b = b[1:]
	base, most := uint64(1), 64/max(1, int(width)) // terminated: symbol 0 ends a key, the bytes take 1..n
	if fixed != codeTerminated {
		base, most = 0, fixed
	}
	if width < 1 || width > 7 || uint64(len(syms))+base > 1<<width || fixed != codeTerminated && (fixed < 1 || fixed*int(width) > 64) {
		return nil, nil, nil, bad("key code malformed")
	}
	for i := 1; i < len(syms); i++ {
		if syms[i] <= syms[i-1] {
			return nil, nil, nil, bad("key code's bytes out of order")
		}
	}
	codes, b, scratch, err := decodeNumKeys[int64](b, n, nil, scratch, bad)
	if err != nil {
		return nil, nil, nil, err
	}
	// The keys' lengths first (in scratch, free again), then their bytes in one arena.
	lens := slices.Grow(scratch[:0], n)[:n]
	mask, total := uint64(1)<<width-1, 0
	for i, v := range codes {
		k := encodeInt(v) << tz // the number decodeNumKeys read, shifted back
		if k>>tz != encodeInt(v) {
			return nil, nil, nil, bad("key code overflows its shift")
		}
		l := 0
		for ; l < most; l++ {
			sym := k >> (64 - uint(l+1)*width) & mask
			if base == 1 && sym == 0 {
				break
			}
			if sym-base >= uint64(len(syms)) {
				return nil, nil, nil, bad("key symbol outside its code")
			}
		}
		if k<<(uint(l)*width) != 0 { // Go shifts 64 bits out to 0
			return nil, nil, nil, bad("key bits past its end")
		}
		lens[i] = uint64(l)
		total += l
	}
	arena := make([]byte, total)
	at := 0
	for i, v := range codes {
		k, l := encodeInt(v)<<tz, int(lens[i])
		for j := range l {
			arena[at+j] = syms[k>>(64-uint(j+1)*width)&mask-base]
		}
		keys = append(keys, any(arenaString(arena[at:at+l])).(K))
		at += l
	}
	return keys, b, lens, nil
}

// appendSuffix appends symbols from..to-1 of the key coded as k.
func (c *KeyCode) appendSuffix(dst []byte, k uint64, from, to int) []byte {
	k <<= uint(from) * c.width
	for range to - from {
		dst = append(dst, c.syms[k>>(64-c.width)-c.base])
		k <<= c.width
	}
	return dst
}
