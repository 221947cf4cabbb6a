package index

import (
	"math"
	"unsafe"
)

func encodeInt(v int64) uint64 { return uint64(v) ^ 1<<63 }
func decodeInt(u uint64) int64 { return int64(u ^ 1<<63) }

// encodeFloat maps f to a uint64 whose unsigned order is cmp.Compare's order. cmp.Compare
// holds every NaN equal (and below -Inf) and -0 equal to +0; a sort by (key, row id) needs
// one spelling of each, so NaNs become 0 and -0 becomes +0. The segment stores the decoded
// spelling, which cmp.Compare cannot tell from the original.
func encodeFloat(f float64) uint64 {
	if f != f {
		return 0
	}
	b := math.Float64bits(f + 0) // -0 + 0 is +0
	// Negative: all bits flipped; otherwise the sign bit set. No branch on the sign: it is
	// as good as random in a column of mixed signs.
	return b ^ (uint64(int64(b)>>63) | 1<<63)
}

func decodeFloat(u uint64) float64 {
	switch {
	case u>>63 != 0:
		return math.Float64frombits(u &^ (1 << 63))
	case u == 0:
		return math.NaN()
	}
	return math.Float64frombits(^u)
}

// arenaString views b as a string without copying. Callers must not modify b afterwards:
// a sealed run's arena is never written again, and it outlives every string taken from it
// (they are dropped when Finish returns or the run is spilled).
func arenaString(b []byte) string {
	if len(b) == 0 {
		return "" // never a pointer past the end of the arena
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// stringBytes is arenaString's inverse: a view of s's bytes, which must not be written.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
