package lancemanifest_test

import (
	"os"
	"testing"

	"github.com/cba1309c/steward/storage/lancemanifest"
)

// FuzzDecode: any bytes either decode or fail; nothing panics, loops or allocates past the
// bounds.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"testdata/v3-btree-2seg.manifest", "testdata/v1.manifest"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := lancemanifest.Decode(b)
		if err != nil {
			return
		}
		if len(m.Fragments) > lancemanifest.MaxFragments {
			t.Fatalf("%d fragments past the bound", len(m.Fragments))
		}
		for _, s := range m.Indices {
			if len(s.Fragments) > lancemanifest.MaxFragments {
				t.Fatalf("bitmap of %d members past the bound", len(s.Fragments))
			}
		}
	})
}

// FuzzDecodeRoaring: a fragment bitmap decodes ascending or fails.
func FuzzDecodeRoaring(f *testing.F) {
	f.Add([]byte{0x3a, 0x30, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 16, 0, 0, 0, 1, 0, 2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := lancemanifest.DecodeRoaring(b)
		if err != nil {
			return
		}
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Fatalf("members not ascending at %d", i)
			}
		}
	})
}
