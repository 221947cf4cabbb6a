package index

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestPackRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for width := uint(0); width <= 64; width++ {
		for _, n := range []int{0, 1, 2, 7, 8, 63, 64, 65, 1023, 1024} {
			vs := make([]uint64, n)
			for i := range vs {
				vs[i] = r.Uint64() >> (64 - width) // 0 when width is 0
				if width == 0 {
					vs[i] = 0
				}
			}
			if n > 0 && width > 0 {
				vs[0] = ^uint64(0) >> (64 - width) // the widest value
			}
			b := appendPacked([]byte{0xAA}, vs, width)
			if len(b) != 1+packedLen(n, width) {
				t.Fatalf("width %d n %d: %d bytes, want %d", width, n, len(b)-1, packedLen(n, width))
			}
			got := make([]uint64, n)
			rest, ok := unpack(append(b[1:], 0xBB), width, got)
			if !ok || !slices.Equal(got, vs) || !slices.Equal(rest, []byte{0xBB}) {
				t.Fatalf("width %d n %d: ok %v, round trip differs", width, n, ok)
			}
			if pad := packedLen(n, width)*8 - n*int(width); pad > 0 {
				b[len(b)-1] |= 0x80 // a padding bit set: not the one encoding
				if _, ok := unpack(b[1:], width, got); ok {
					t.Fatalf("width %d n %d: a set padding bit was accepted", width, n)
				}
			}
			if n > 0 && width > 0 {
				if _, ok := unpack(b[1:len(b)-1], width, got); ok {
					t.Fatalf("width %d n %d: a truncated run was accepted", width, n)
				}
			}
		}
	}
	if _, ok := unpack(make([]byte, 100), 65, make([]uint64, 1)); ok {
		t.Fatal("width 65 accepted")
	}
}

// TestPackFromMatchesBitByBit checks appendPackedFrom at every width against a bit-at-a-time
// packing, with a base taken off every value (the sums may wrap: only v-base must fit) and
// bytes before the packed ones that must be kept.
func TestPackFromMatchesBitByBit(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for width := uint(1); width <= 64; width++ {
		for _, n := range []int{1, 3, 8, 31, 32, 33, 1000, 1024} {
			base := r.Uint64() >> 1
			vs := make([]uint64, n)
			for i := range vs {
				vs[i] = base + r.Uint64()>>(64-width)>>1
			}
			vs[r.IntN(n)] = base + ^uint64(0)>>(64-width) // the widest value
			want := []byte{1, 2, 3}
			want = append(want, make([]byte, packedLen(n, width))...)
			for i, v := range vs {
				for bit := range width {
					if (v-base)>>bit&1 == 1 {
						p := uint(i)*width + bit
						want[3+p/8] |= 1 << (p % 8)
					}
				}
			}
			got := appendPackedFrom([]byte{1, 2, 3}, vs, base, width)
			if !slices.Equal(got, want) {
				t.Fatalf("width %d n %d: packed bytes differ", width, n)
			}
		}
	}
}
