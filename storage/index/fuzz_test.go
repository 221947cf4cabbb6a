package index_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/index"
	"github.com/cba1309c/steward/storage/index/build"
)

func FuzzDecodeBTreeSegment(f *testing.F) {
	f.Add(buildBTree(f, []int64{3, 1, 2, 2, 9}, 0, build.BuildOptions{PageEntries: 2}))
	f.Add(buildBTree(f, []int64{}, 0, build.BuildOptions{}))
	f.Add(buildBTree(f, []float64{2.5, -1, 2.5, 1e300}, 1<<40, build.BuildOptions{PageEntries: 3}))
	f.Add(buildBTree(f, []string{"ab", "abc", "", "b", "abc"}, 7, build.BuildOptions{PageEntries: 2}))
	f.Add(buildBTree(f, []int64{4, 4, 4, 4, 4, 4, 7, 7, 7, 7, 7, 7, 9, 9, 9, 9}, 3, build.BuildOptions{PageEntries: 16})) // keys as runs
	f.Add([]byte("STWBT001"))
	f.Add([]byte("STWBT002"))
	f.Add([]byte("STWBT003"))
	f.Add([]byte("STWBT004"))
	f.Add(buildBTree(f, v3HexKeys()[:40], 9, build.BuildOptions{PageEntries: 16}))                            // coded pages
	f.Add(buildBTree(f, []string{"k1", "k2", "k10", "k11", "", "k2"}, 1, build.BuildOptions{PageEntries: 3})) // terminated code
	f.Add(buildBTree(f, []string{"0f3a", "0f3b", "0f3b", "1", "", "\xff\x00"}, 2, build.BuildOptions{PageEntries: 4}))
	for _, name := range []string{"int64", "float64"} {
		if seg, err := os.ReadFile("testdata/btree-v2-" + name + ".seg"); err == nil {
			f.Add(seg[:min(len(seg), 2000)]) // a truncated one is enough to mutate
		}
	}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := index.VerifyBTree[int64](ctx, index.BytesReader(data))
		if err != nil && !errors.Is(err, storage.ErrCorrupt) {
			t.Fatalf("unclassified error: %v", err)
		}
		if err == nil {
			bt, _ := index.OpenBTree[int64](ctx, index.BytesReader(data))
			if bt.Entries() != n {
				t.Fatalf("entries %d, scanned %d", bt.Entries(), n)
			}
		}
		if _, err := index.VerifyBTree[float64](ctx, index.BytesReader(data)); err != nil && !errors.Is(err, storage.ErrCorrupt) {
			t.Fatalf("unclassified error: %v", err)
		}
		// String keys exercise the varint paths of the same bytes.
		if _, err := index.VerifyBTree[string](ctx, index.BytesReader(data)); err != nil && !errors.Is(err, storage.ErrCorrupt) {
			t.Fatalf("unclassified error: %v", err)
		}
	})
}

func FuzzDecodeBitmapSegment(f *testing.F) {
	f.Add(buildBitmap(f, []string{"x", "y", "x", "z"}, 5))
	f.Add(buildBitmap(f, []string{}, 0))
	f.Add([]byte("STWBM001"))
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := index.VerifyBitmap[string](ctx, index.BytesReader(data)); err != nil && !errors.Is(err, storage.ErrCorrupt) {
			t.Fatalf("unclassified error: %v", err)
		}
		if br, err := index.OpenBitmap[string](ctx, index.BytesReader(data)); err == nil {
			_, _ = br.In(ctx, []string{"x", "q"})
			_, _ = br.Search(ctx, index.Range[string]{})
		}
	})
}
