package index

import (
	"encoding/binary"
	"math/bits"
	"slices"
)

// A string build whose keys are all short over a small alphabet (hex digests, decimal codes,
// dates, short identifiers) is built as a numeric one: each key becomes one uint64 whose
// unsigned order is the keys' byte order (keyCode), so its runs are bucketed and radix-sorted
// as numbers are (bucket.go), with no front-coding at seal and no decoding at Finish, and the
// keys are spelled out again only as the pages are written. The code is taken from the first
// run; a later run with a key it cannot code ends it for the rest of the build (see
// BTreeBuilder.uncode).

// keyCode codes a string as one symbol per byte, width bits each, from the top bit down: the
// symbols are the bytes of an alphabet in ascending order, so comparing two codes compares
// the strings. Two forms:
//
//   - terminated (fixed < 0): symbol 0 ends the key and the bytes take 1..n, so keys of any
//     length up to max order like their bytes ("ab" < "ab\x00" < "abc");
//   - fixed (fixed = every key's length): the bytes take 0..n-1, for keys of one length whose
//     terminated form would not fit 64 bits (16 hex digits: 4 bits a digit, not 5).
type keyCode struct {
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

// newKeyCode returns the code of the run's keys, or nil when they do not fit one uint64 each.
// The first run decides for the build, and a later key the code cannot take costs a spill of
// every coded run before it (see BTreeBuilder.uncode), so the code is taken only where that is
// unlikely: the terminated form (which later runs' shorter keys fit) when the run's longest
// key leaves a quarter of the symbols a key may have spare (words of a few letters, dates,
// decimal codes; not names that already reach the limit), the fixed form only when every key
// of the run has one length (digests, padded codes). An alphabet seen over a whole first run
// (half a million keys by default) rarely meets a new byte after.
func newKeyCode(r *memRun) *keyCode {
	var seen [256]bool
	minLen, maxLen := int(^uint(0)>>1), 0
	for i := range r.n {
		s := r.data[r.offs[i]:r.offs[i+1]]
		minLen, maxLen = min(minLen, len(s)), max(maxLen, len(s))
		for _, c := range s {
			seen[c] = true
		}
	}
	if r.n == 0 {
		return nil
	}
	c := &keyCode{}
	for v := range 256 {
		if seen[v] {
			c.syms = append(c.syms, byte(v))
		}
	}
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
	for z := range c.symbolsIn {
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

// encodeRun codes the run's keys into keys (grown to the run's size) and reports whether every
// key fits. Its two halves are coded at once, as partition scatters them (see there).
func (c *keyCode) encodeRun(r *memRun, keys []uint64) ([]uint64, bool) {
	if cap(keys) < r.n {
		keys = make([]uint64, r.n)
	}
	keys = keys[:r.n]
	mid := r.n / 2
	var ok [2]bool
	both(func() { ok[0] = c.encodeKeys(r, keys[:mid], 0) }, func() { ok[1] = c.encodeKeys(r, keys[mid:], mid) })
	return keys, ok[0] && ok[1]
}

// encodeKeys codes the run's keys from on into keys, and reports whether they all fit.
func (c *keyCode) encodeKeys(r *memRun, keys []uint64, from int) bool {
	return c.encodeBytes(keys, r.data, r.offs[from:from+len(keys)+1])
}

// encodeBytes codes the keys data[offs[i]:offs[i+1]] (len(offs)-1 of them, as a Parquet
// page's byte-array values come) into keys, and reports whether they all fit.
func (c *keyCode) encodeBytes(keys []uint64, data []byte, offs []uint32) bool {
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

// encodeStrings is encodeBytes for keys given as strings.
func (c *keyCode) encodeStrings(keys []uint64, ks []string) bool {
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
func (c *keyCode) encode16(keys []uint64, data []byte) bool {
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
func (c *keyCode) encode(s []byte) (k, bad uint64) {
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

// keyLen is the length of the key coded as k.
func (c *keyCode) keyLen(k uint64) int {
	if c.fixed >= 0 {
		return c.fixed
	}
	// The last symbol that is not 0 holds the lowest set bit.
	return int(c.lenAbove[bits.TrailingZeros64(k)])
}

// appendKey appends the key coded as k to dst.
func (c *keyCode) appendKey(dst []byte, k uint64) []byte {
	return c.appendSuffix(dst, k, 0, c.keyLen(k))
}

// shared is the length of the prefix the keys coded as a and b have in common.
func (c *keyCode) shared(a, b uint64) int {
	if a == b {
		return c.keyLen(a)
	}
	// The first symbol that differs; a key that ends there has symbol 0 against one that
	// does not, so the shorter key is the prefix.
	return int(c.symbolsIn[bits.LeadingZeros64(a^b)])
}

// appendSpilled is appendSpilled for coded keys (e.k), spelled out.
func (c *keyCode) appendSpilled(b []byte, es []entry) []byte {
	for _, e := range es {
		b = binary.AppendUvarint(b, uint64(c.keyLen(e.k)))
		b = c.appendKey(b, e.k)
		b = binary.LittleEndian.AppendUint64(b, e.id)
	}
	return b
}

// appendCodedKeys appends the page's keys, coded in bw.sk, as format 3 string keys: the bytes
// strPage makes of the same keys spelled out. lo and hi are the first and last keys, kept in
// bw.strs until the page is written.
func (bw *BTreeWriter[K]) appendCodedKeys(b []byte) (_ []byte, lo, hi K, _ error) {
	c, sp, ks := bw.code, &bw.sp, bw.sk
	// Written in place (the page's lengths start empty): an append a value was a third of
	// this loop.
	n := len(ks)
	sp.shared, sp.lens = slices.Grow(sp.shared[:0], n)[:n], slices.Grow(sp.lens[:0], n)[:n]
	shared, lens := sp.shared, sp.lens
	l := c.keyLen(ks[0])
	shared[0], lens[0] = 0, uint64(l)
	keyBytes := l
	for i := 1; i < n; i++ {
		k := ks[i]
		l, s := c.keyLen(k), c.shared(ks[i-1], k)
		shared[i], lens[i] = uint64(s), uint64(l-s)
		keyBytes += l
	}
	sp.keyBytes += keyBytes
	b, err := sp.appendLens(b)
	if err != nil {
		return nil, lo, hi, err
	}
	if c.wholeAlphabet(ks, sp.shared, sp.lens) {
		b = c.appendSuffixCodes(b, ks, sp.shared, sp.lens)
	} else {
		for i, k := range ks {
			sp.suffixes = c.appendSuffix(sp.suffixes, k, int(sp.shared[i]), int(sp.shared[i]+sp.lens[i]))
		}
		b = appendSymbols(b, sp.suffixes)
	}
	strs := c.appendKey(bw.strs[:0], ks[0])
	at := len(strs)
	strs = c.appendKey(strs, ks[len(ks)-1])
	bw.strs = strs
	return b, any(arenaString(strs[:at])).(K), any(arenaString(strs[at:])).(K), nil
}

// appendSuffix appends symbols from..to-1 of the key coded as k.
func (c *keyCode) appendSuffix(dst []byte, k uint64, from, to int) []byte {
	k <<= uint(from) * c.width
	for range to - from {
		dst = append(dst, c.syms[k>>(64-c.width)-c.base])
		k <<= c.width
	}
	return dst
}

// A page's suffixes are coded over the bytes they hold (appendSymbols), each byte as its rank
// among them at symbolWidth bits. When they hold every byte of the key code's alphabet and
// that width is the code's, a byte's rank is its symbol less base: the suffixes' codes are
// the keys' own bits, and are copied from them a key at a time (appendSuffixCodes), which
// needs the symbols of a key lowest first, as the page packs them: a reversal of its 4-bit
// fields. Only codes of 4 bits a symbol are copied (9 to 16 symbols, or 8 to 15 and the
// terminator: hex and decimal digits, dates, most codes of a few letters); narrower ones,
// alphabets of two to four bytes, are spelled out and coded as any other page's suffixes.

// wholeAlphabet reports whether the suffixes of the keys ks (key i shares shared[i] bytes with
// the one before and adds lens[i]) hold every byte of the alphabet, and their codes can be
// copied.
func (c *keyCode) wholeAlphabet(ks, shared, lens []uint64) bool {
	n := uint(len(c.syms))
	if c.width != 4 || symbolWidth(int(n)) != 4 {
		return false
	}
	full := uint64(1)<<(n+uint(c.base)) - 1<<c.base // symbol s present: bit s
	var seen uint64
	for i, k := range ks {
		v := lowFirst(k) >> (shared[i] * 4 & 63)
		for range lens[i] {
			seen |= 1 << (v & 15)
			v >>= 4
		}
		if seen == full {
			return true // most pages of high-cardinality keys: after a few keys
		}
	}
	return false
}

// lowFirst reverses the order of k's 4-bit fields: its first symbol is then its lowest.
func lowFirst(k uint64) uint64 {
	const m = 0x0f0f0f0f0f0f0f0f
	x := bits.ReverseBytes64(k)
	return x>>4&m | x&m<<4
}

// appendSuffixCodes appends the suffixes as appendSymbols codes them, given wholeAlphabet.
func (c *keyCode) appendSuffixCodes(b []byte, ks, shared, lens []uint64) []byte {
	b = append(b, 4, byte(len(c.syms)-1))
	b = append(b, c.syms...)
	// base in every field: subtracted, it takes base off each symbol (none is 0).
	base := 0x1111111111111111 * c.base
	// The stream is written without a branch on where a suffix falls: acc (used bits) is
	// stored whole at out[at:] after every suffix and at moves on a word once it is full.
	// A suffix's length is random, and a branch on it was mispredicted about every other key.
	at := len(b)
	b = slices.Grow(b, 8*len(ks)+8)
	out := b[:cap(b)]
	shared, lens = shared[:len(ks)], lens[:len(ks)]
	var acc, used uint64
	for i, k := range ks {
		nb := lens[i] * 4 // 0 to 64
		v := lowFirst(k) >> (shared[i] * 4 & 63)
		v = (v - base) & (1<<nb - 1) // Go defines 1<<64 as 0
		acc |= v << (used & 63)
		binary.LittleEndian.PutUint64(out[at:], acc)
		next := used + nb
		carry := v >> 1 >> (63 - used&63) // the bits past the full word; 0 when used is 0
		if next >= 64 {
			acc = carry
		}
		at += int(next>>6) * 8
		used = next & 63
	}
	for ; used > 0; used -= min(used, 8) {
		out[at] = byte(acc)
		acc >>= 8
		at++
	}
	return out[:at]
}
