package build

import "unsafe"

// entry is one (key, row id) pair on its way through a BTREE build. k is the sort key: an
// order-preserving encoding of an int64 or float64 key (so one radix sort and one unsigned
// compare serve both), or a string key's 8-byte prefix, with the string itself in s. Most
// comparisons end at k.
type entry struct {
	k  uint64
	s  string
	id uint64
}

func lessEntry(a, b *entry) bool {
	if a.k != b.k {
		return a.k < b.k
	}
	if a.s != b.s { // numeric keys: both empty
		return a.s < b.s
	}
	return a.id < b.id
}

// stringPrefix packs the first 8 bytes of s big-endian, zero-padded: prefixes order like
// the strings, except that ties (equal prefixes) still need a full comparison.
func stringPrefix(s string) uint64 {
	if len(s) >= 8 {
		_ = s[7]
		return uint64(s[0])<<56 | uint64(s[1])<<48 | uint64(s[2])<<40 | uint64(s[3])<<32 |
			uint64(s[4])<<24 | uint64(s[5])<<16 | uint64(s[6])<<8 | uint64(s[7])
	}
	var p uint64
	for i := range len(s) {
		p |= uint64(s[i]) << (56 - 8*i)
	}
	return p
}

// radixSort sorts keys ascending, permuting vals alongside, with a stable LSD radix sort on
// bytes. tk and tv are scratch of the same length. Byte positions on which all keys agree
// are skipped, so narrow key ranges (small ints, prices in [0, 1e4)) take fewer passes.
func radixSort[V uint32 | uint64](keys []uint64, vals []V, tk []uint64, tv []V) {
	n := len(keys)
	if n < 2 {
		return
	}
	var counts [8][256]uint32
	for _, k := range keys {
		counts[0][byte(k)]++
		counts[1][byte(k>>8)]++
		counts[2][byte(k>>16)]++
		counts[3][byte(k>>24)]++
		counts[4][byte(k>>32)]++
		counts[5][byte(k>>40)]++
		counts[6][byte(k>>48)]++
		counts[7][byte(k>>56)]++
	}
	srcK, srcV, dstK, dstV := keys, vals, tk[:n], tv[:n]
	for d := range 8 {
		shift := uint(8 * d)
		c := &counts[d]
		if c[byte(keys[0]>>shift)] == uint32(n) {
			continue // every key has the same byte here
		}
		var sum uint32
		for i := range c {
			c[i], sum = sum, sum+c[i]
		}
		for i, k := range srcK {
			b := byte(k >> shift)
			p := c[b]
			c[b]++
			dstK[p] = k
			dstV[p] = srcV[i]
		}
		srcK, srcV, dstK, dstV = dstK, dstV, srcK, srcV
	}
	if &srcK[0] != &keys[0] {
		copy(keys, srcK)
		copy(vals, srcV)
	}
}

// arenaString views b as a string without copying. Callers must not modify b afterwards: a
// sealed run's arena is never written again, and it outlives every string taken from it
// (they are dropped when Finish returns or the run is spilled).
func arenaString(b []byte) string {
	if len(b) == 0 {
		return "" // never a pointer past the end of the arena
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// stringBytes is arenaString's inverse: a view of s's bytes, which must not be written.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
