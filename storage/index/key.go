package index

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
)

// Key is the set of key types an index can hold.
type Key interface {
	int64 | float64 | string
}

// KeyType tags the key type inside a segment.
type KeyType uint8

// Key types as stored in segment trailers.
const (
	KeyInt64   KeyType = 1
	KeyFloat64 KeyType = 2
	KeyString  KeyType = 3
)

func (t KeyType) String() string {
	switch t {
	case KeyInt64:
		return "int64"
	case KeyFloat64:
		return "float64"
	case KeyString:
		return "string"
	}
	return fmt.Sprintf("KeyType(%d)", uint8(t))
}

// KeyTypeOf returns the KeyType for K.
func KeyTypeOf[K Key]() KeyType {
	var k K
	switch any(k).(type) {
	case int64:
		return KeyInt64
	case float64:
		return KeyFloat64
	default:
		return KeyString
	}
}

// maxKeyLen bounds a string key; longer lengths in a segment are corruption.
const maxKeyLen = 1 << 20

func appendKey[K Key](b []byte, k K) []byte {
	switch v := any(k).(type) {
	case int64:
		return binary.LittleEndian.AppendUint64(b, uint64(v))
	case float64:
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	case string:
		b = binary.AppendUvarint(b, uint64(len(v)))
		return append(b, v...)
	}
	panic("unreachable")
}

// decodeKey reads one key from b, returning it and the bytes consumed, or n <= 0 on bad input.
func decodeKey[K Key](b []byte) (k K, n int) {
	switch p := any(&k).(type) {
	case *int64:
		if len(b) < 8 {
			return k, -1
		}
		*p = int64(binary.LittleEndian.Uint64(b))
		return k, 8
	case *float64:
		if len(b) < 8 {
			return k, -1
		}
		*p = math.Float64frombits(binary.LittleEndian.Uint64(b))
		return k, 8
	case *string:
		l, m := binary.Uvarint(b)
		if m <= 0 || l > maxKeyLen || uint64(len(b)-m) < l {
			return k, -1
		}
		*p = string(b[m : m+int(l)])
		return k, m + int(l)
	}
	return k, -1
}

// Bound is one end of a range; a nil *Bound means unbounded.
type Bound[K Key] struct {
	Value     K
	Inclusive bool
}

// Range is a key interval. Lo or Hi nil means open on that side.
type Range[K Key] struct {
	Lo, Hi *Bound[K]
}

// Point is the range holding exactly k.
func Point[K Key](k K) Range[K] {
	return Range[K]{Lo: &Bound[K]{k, true}, Hi: &Bound[K]{k, true}}
}

// Contains reports whether k lies in r, under cmp.Compare.
func (r Range[K]) Contains(k K) bool {
	return !r.below(k) && !r.above(k)
}

// InRanges reports whether k lies in one of ranges.
func InRanges[K Key](ranges []Range[K], k K) bool {
	for _, rg := range ranges {
		if rg.Contains(k) {
			return true
		}
	}
	return false
}

// BytesInRanges is InRanges for a string key given as bytes (a value in a page buffer), without
// making a string of it (a view of b serves for the comparisons only).
func BytesInRanges(ranges []Range[string], b []byte) bool { return InRanges(ranges, arenaString(b)) }

func (r Range[K]) below(k K) bool { // k is left of the range
	if r.Lo == nil {
		return false
	}
	c := cmp.Compare(k, r.Lo.Value)
	return c < 0 || (c == 0 && !r.Lo.Inclusive)
}

func (r Range[K]) above(k K) bool { // k is right of the range
	if r.Hi == nil {
		return false
	}
	c := cmp.Compare(k, r.Hi.Value)
	return c > 0 || (c == 0 && !r.Hi.Inclusive)
}

// RangeReader reads byte ranges of one segment object.
type RangeReader interface {
	// ReadRange returns exactly n bytes at off, or an error.
	ReadRange(ctx context.Context, off, n int64) ([]byte, error)
	// Size is the segment's length in bytes.
	Size() int64
}

// BytesReader serves a segment held in memory.
type BytesReader []byte

// ReadRange implements RangeReader.
func (b BytesReader) ReadRange(_ context.Context, off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off > int64(len(b)) || n > int64(len(b))-off {
		return nil, corrupt("segment", off, "range of %d bytes past end %d", n, len(b))
	}
	return b[off : off+n], nil
}

// Size implements RangeReader.
func (b BytesReader) Size() int64 { return int64(len(b)) }

// sortKeyOf is a number's order-preserving encoding (the one a build sorts by).
func sortKeyOf[K Key](k K) uint64 {
	switch v := any(k).(type) {
	case int64:
		return encodeInt(v)
	case float64:
		return encodeFloat(v)
	}
	panic("index: sortKeyOf on a string key")
}

// keyOfSort is sortKeyOf's inverse.
func keyOfSort[K Key](u uint64) K {
	var k K
	switch p := any(&k).(type) {
	case *int64:
		*p = decodeInt(u)
	case *float64:
		*p = decodeFloat(u)
	default:
		panic("index: keyOfSort on a string key")
	}
	return k
}

// uvarint is binary.Uvarint that also refuses a non-minimal encoding (n <= 0).
func uvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n > 1 && b[n-1] == 0 {
		return 0, -1
	}
	return v, n
}

// CheckStringOffsets checks strings packed as data and offs (value i is
// data[offs[i]:offs[i+1]]): the offsets must not go down nor past the data.
func CheckStringOffsets(data []byte, offs []uint32) error {
	for i := 1; i < len(offs); i++ {
		if offs[i] < offs[i-1] {
			return fmt.Errorf("offset %d (%d) below the one before (%d)", i, offs[i], offs[i-1])
		}
	}
	if len(offs) > 0 && int64(offs[len(offs)-1]) > int64(len(data)) {
		return fmt.Errorf("offsets reach %d, data has %d bytes", offs[len(offs)-1], len(data))
	}
	return nil
}
