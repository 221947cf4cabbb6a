package index

import (
	"encoding/binary"
)

// Bit packing for BTREE pages (formats 2 and 3): n values of width bits each, least significant
// bit first, in exactly ceil(n*width/8) bytes; the bits past the last value are zero.

// packedLen is the size of n values packed at width bits.
func packedLen(n int, width uint) int { return (n*int(width) + 7) / 8 }

// appendPacked appends vs packed at width bits; every value must fit width.
func appendPacked(b []byte, vs []uint64, width uint) []byte { return appendPackedFrom(b, vs, 0, width) }

// appendPackedFrom appends v-base for each v of vs packed at width bits; every v-base must
// fit width.
func appendPackedFrom(b []byte, vs []uint64, base uint64, width uint) []byte {
	if width == 0 {
		return b
	}
	var acc uint64
	var used uint // bits of acc holding values
	for _, v := range vs {
		v -= base
		acc |= v << used
		if used+width < 64 {
			used += width
			continue
		}
		b = binary.LittleEndian.AppendUint64(b, acc)
		// The bits of v that did not fit (Go defines v >> 64 as 0).
		acc = v >> (64 - used)
		used = used + width - 64
	}
	for ; used > 0; used -= min(used, 8) {
		b = append(b, byte(acc))
		acc >>= 8
	}
	return b
}

// unpack fills dst with len(dst) values packed at width bits from the front of b and returns
// the bytes after them. ok is false if b is too short, width is over 64 or the padding bits
// are not zero.
func unpack(b []byte, width uint, dst []uint64) (rest []byte, ok bool) {
	if width > 64 {
		return nil, false
	}
	need := packedLen(len(dst), width)
	if len(b) < need {
		return nil, false
	}
	src := b[:need]
	if width == 0 {
		clear(dst)
		return b, true
	}
	if pad := uint(need*8 - len(dst)*int(width)); pad > 0 && src[need-1]>>(8-pad) != 0 {
		return nil, false
	}
	mask := ^uint64(0) >> (64 - width)
	for i := range dst {
		pos := uint(i) * width
		at, shift := pos>>3, pos&7
		var w uint64
		if int(at)+8 <= need {
			w = binary.LittleEndian.Uint64(src[at:])
		} else {
			for j := int(at); j < need; j++ {
				w |= uint64(src[j]) << (8 * uint(j-int(at)))
			}
		}
		v := w >> shift
		if shift+width > 64 {
			v |= uint64(src[at+8]) << (64 - shift)
		}
		dst[i] = v & mask
	}
	return b[need:], true
}
