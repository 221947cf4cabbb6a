package index_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/index"
)

func FuzzDecodeBTreeSegment(f *testing.F) {
	f.Add(buildBTree(f, []int64{3, 1, 2, 2, 9}, 0, index.BuildOptions{PageEntries: 2}))
	f.Add(buildBTree(f, []int64{}, 0, index.BuildOptions{}))
	f.Add([]byte("STWBT001"))
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
