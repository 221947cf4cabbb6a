//go:build unix

package dataset_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/storagetest"
)

// guarded counts the bytes read from whole-object bodies and cuts a body off after 128 MiB, so a
// reader without a bound fails this test instead of exhausting the machine.
type guarded struct {
	storage.Store
	read atomic.Int64
}

const guardBytes = 128 << 20

func (g *guarded) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := g.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{&countReader{r: rc, n: &g.read}, rc}, nil
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	if c.n.Load() > guardBytes {
		return 0, fmt.Errorf("guard: more than %d bytes read from one object", guardBytes)
	}
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// A manifest that is a link to /dev/zero, or a sparse 1 GiB file, fails every reader of
// manifests with a typed error, and none of them reads it or allocates for it. (A link is no
// object of a local store: listings skip it, so readers that list versions find none.)
func TestManifestReadsAreBounded(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		plant  func(t *testing.T, path string)
		want   []error
		hidden bool // listings do not show the planted manifest
	}{
		{"link to /dev/zero", func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
		}, []error{storage.ErrSymlink}, true},
		{"sparse 1 GiB file", func(t *testing.T, p string) {
			if err := os.Truncate(p, 1<<30); err != nil {
				t.Fatal(err)
			}
		}, []error{storage.ErrTooLarge, storage.ErrCorrupt}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			local := storagetest.NewLocal(t)
			create(t, local, "ds", 500, 1)
			tc.plant(t, filepath.Join(local.Root(), "ds", dataset.VersionKey(1)))
			s := &guarded{Store: local}
			readers := []struct {
				name  string
				read  func() error
				lists bool // finds the manifest by listing _versions/
			}{
				{"open", func() error { _, err := dataset.Open(ctx, s, "ds", 1); return err }, false},
				{"open latest", func() error { _, err := dataset.Open(ctx, s, "ds", 0); return err }, true},
				{"versions", func() error { _, err := dataset.Versions(ctx, s, "ds"); return err }, true},
				{"resolve", func() error { _, err := dataset.ResolveSlot(ctx, s, "ds", 1, "inv-x"); return err }, false},
				{"referenced", func() error { _, err := dataset.Referenced(ctx, s, "ds"); return err }, true},
			}
			for _, r := range readers {
				s.read.Store(0)
				var err error
				grew := storagetest.Allocated(func() { err = r.read() })
				want := tc.want
				if tc.hidden && r.lists {
					want = []error{dataset.ErrDatasetNotFound}
				}
				for _, want := range want {
					if !errors.Is(err, want) {
						t.Errorf("%s: got %v, want %v", r.name, err, want)
					}
				}
				if n := s.read.Load(); n > 0 {
					t.Errorf("%s: read %d bytes of the planted manifest", r.name, n)
				}
				if grew > 16<<20 {
					t.Errorf("%s: allocated %d bytes", r.name, grew)
				}
			}
		})
	}
}
