package build

import "math/bits"

// deltaKeys holds a sorted run's keys as its first key and the distance of each key from the
// one before, width bits each. An id column (distance 1) takes one bit a key instead of 64;
// the run's key array is then free for the next run to fill, so a build of sorted keys
// touches two key arrays instead of one fresh array per run (on this kind of machine, the
// first write to fresh memory costs about as much as the rest of a run's work).
type deltaKeys struct {
	first, last uint64
	width       uint
	words       []uint64
}

// maxDeltaWidth is the widest distance worth packing: wider saves too little to pay for
// decoding.
const maxDeltaWidth = 40

// sortedDeltas reports whether keys ascend and, if they do, the bitwise or of their
// distances (whose width is the widest distance's).
func sortedDeltas(keys []uint64) (bool, uint64) {
	var or uint64
	for i := 1; i < len(keys); i++ {
		if keys[i] < keys[i-1] {
			return false, 0
		}
		or |= keys[i] - keys[i-1]
	}
	return true, or
}

// packDeltas packs sorted keys whose distances or to or, or returns nil when they are too
// wide.
func packDeltas(keys []uint64, or uint64) *deltaKeys {
	w := uint(bits.Len64(or))
	if len(keys) == 0 || w > maxDeltaWidth {
		return nil
	}
	d := &deltaKeys{first: keys[0], last: keys[len(keys)-1], width: w}
	if w == 0 {
		return d
	}
	words := make([]uint64, 0, (uint(len(keys)-1)*w+63)/64)
	var acc uint64 // the bits of the word being filled, nb of them
	nb := uint(0)
	for i := 1; i < len(keys); i++ {
		v := keys[i] - keys[i-1]
		acc |= v << nb
		if nb += w; nb >= 64 {
			words = append(words, acc)
			nb -= 64
			acc = v >> (w - nb) // the bits of v that did not fit (none when nb is 0)
		}
	}
	if nb > 0 {
		words = append(words, acc)
	}
	d.words = words
	return d
}

// deltaDecoder reads packed keys in order.
type deltaDecoder struct {
	d     *deltaKeys
	i     int    // keys decoded so far
	at    int    // next word to load
	acc   uint64 // bits loaded and not yet used, nb of them
	nb    uint
	key   uint64
	begun bool
}

// next decodes the next len(dst) keys into dst.
func (c *deltaDecoder) next(dst []uint64) {
	d := c.d
	j := 0
	if !c.begun && len(dst) > 0 {
		dst[0], c.key, c.begun, j = d.first, d.first, true, 1
	}
	if d.width == 0 {
		for ; j < len(dst); j++ {
			dst[j] = d.first
		}
		return
	}
	w, mask, words := d.width, uint64(1)<<d.width-1, d.words
	acc, nb, at, key := c.acc, c.nb, c.at, c.key
	for ; j < len(dst); j++ {
		var v uint64
		if nb >= w {
			v, acc, nb = acc&mask, acc>>w, nb-w
		} else {
			next := words[at]
			at++
			v = (acc | next<<nb) & mask
			acc, nb = next>>(w-nb), nb+64-w
		}
		key += v
		dst[j] = key
	}
	c.acc, c.nb, c.at, c.key = acc, nb, at, key
}
