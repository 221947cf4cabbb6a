package lancemanifest

import (
	"encoding/binary"
	"fmt"
)

// Cookies of the portable 32-bit Roaring format (RoaringFormatSpec).
const (
	cookieNoRuns   = 12346
	cookieRuns     = 12347
	noOffsetBelow  = 4 // with run containers, fewer containers than this have no offset header
	arrayMaxCard   = 4096
	bitmapBytes    = 8192
	maxContainers  = 1 << 16
	containerWidth = 1 << 16
)

// DecodeRoaring reads a portable 32-bit Roaring bitmap (Lance's fragment_bitmap) and returns its
// members ascending. At most MaxFragments members are read.
func DecodeRoaring(b []byte) ([]uint32, error) {
	if len(b) == 0 {
		return nil, nil
	}
	r := reader{b: b}
	cookie := r.u32()
	var size int
	var runs []byte
	switch {
	case cookie&0xFFFF == cookieRuns:
		size = int(cookie>>16) + 1
		runs = r.bytes((size + 7) / 8)
	case cookie == cookieNoRuns:
		size = int(r.u32())
	default:
		return nil, fmt.Errorf("%w: fragment bitmap cookie %#x is not portable Roaring", ErrCorrupt, cookie)
	}
	if r.bad || size > maxContainers {
		return nil, fmt.Errorf("%w: fragment bitmap header", ErrCorrupt)
	}
	keys, cards := make([]uint32, size), make([]int, size)
	for i := range size {
		keys[i], cards[i] = uint32(r.u16()), int(r.u16())+1
		if i > 0 && keys[i] <= keys[i-1] {
			return nil, fmt.Errorf("%w: fragment bitmap keys not ascending", ErrCorrupt)
		}
	}
	if runs == nil || size >= noOffsetBelow {
		r.bytes(4 * size) // offsets: the containers follow in order anyway
	}
	var out []uint32
	for i := range size {
		isRun := runs != nil && runs[i/8]&(1<<(i%8)) != 0
		var err error
		if out, err = r.container(out, keys[i]<<16, cards[i], isRun); err != nil {
			return nil, err
		}
	}
	if r.bad {
		return nil, fmt.Errorf("%w: fragment bitmap truncated", ErrCorrupt)
	}
	return out, nil
}

type reader struct {
	b   []byte
	bad bool
}

func (r *reader) bytes(n int) []byte {
	if r.bad || n < 0 || n > len(r.b) {
		r.bad = true
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) u16() uint16 {
	if p := r.bytes(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if p := r.bytes(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

// container appends the members of one container whose high bits are hi.
func (r *reader) container(out []uint32, hi uint32, card int, isRun bool) ([]uint32, error) {
	add := func(lo uint32) error {
		if len(out) >= MaxFragments {
			return fmt.Errorf("%w: fragment bitmap holds more than %d members", ErrCorrupt, MaxFragments)
		}
		if len(out) > 0 && hi|lo <= out[len(out)-1] {
			return fmt.Errorf("%w: fragment bitmap members not ascending", ErrCorrupt)
		}
		out = append(out, hi|lo)
		return nil
	}
	switch {
	case isRun:
		n := int(r.u16())
		for range n {
			start, length := uint32(r.u16()), uint32(r.u16())
			if r.bad || start+length >= containerWidth {
				return nil, fmt.Errorf("%w: fragment bitmap run", ErrCorrupt)
			}
			for v := start; v <= start+length; v++ {
				if err := add(v); err != nil {
					return nil, err
				}
			}
		}
	case card <= arrayMaxCard:
		for range card {
			v := uint32(r.u16())
			if r.bad {
				return nil, fmt.Errorf("%w: fragment bitmap truncated", ErrCorrupt)
			}
			if err := add(v); err != nil {
				return nil, err
			}
		}
	default:
		words := r.bytes(bitmapBytes)
		for i, c := range words {
			for bit := range 8 {
				if c&(1<<bit) != 0 {
					if err := add(uint32(i*8 + bit)); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	return out, nil
}
