package build

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestDeltaKeys: sorted keys come back from their packed distances for every width up to
// maxDeltaWidth, decoded in pieces of any size; wider distances are not packed.
func TestDeltaKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for w := uint(0); w <= maxDeltaWidth+1; w++ {
		keys := make([]uint64, 1+r.IntN(3000))
		keys[0] = r.Uint64() >> 1
		for i := 1; i < len(keys); i++ {
			var d uint64
			if w > 0 && r.IntN(3) > 0 {
				d = r.Uint64N(uint64(1) << w)
			}
			keys[i] = keys[i-1] + d
		}
		if w > 0 && len(keys) > 1 {
			keys[len(keys)-1] = keys[len(keys)-2] + uint64(1)<<(w-1) // the widest distance
		}
		sorted, or := sortedDeltas(keys)
		if !sorted {
			t.Fatalf("width %d: ascending keys seen out of order", w)
		}
		d := packDeltas(keys, or)
		if w > maxDeltaWidth {
			if d != nil {
				t.Fatalf("width %d packed", w)
			}
			continue
		}
		if d == nil || d.first != keys[0] || d.last != keys[len(keys)-1] {
			t.Fatalf("width %d: %+v", w, d)
		}
		dec := deltaDecoder{d: d}
		var got []uint64
		for len(got) < len(keys) {
			piece := make([]uint64, min(1+r.IntN(200), len(keys)-len(got)))
			dec.next(piece)
			got = append(got, piece...)
		}
		if !slices.Equal(got, keys) {
			t.Fatalf("width %d: keys differ", w)
		}
	}
}
