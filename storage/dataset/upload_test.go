package dataset_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/storagetest"
)

const uploadPart = 5 << 20 // the smallest S3 part: a small segment still streams in parts

// cancelMidway is a store whose Put cancels the caller's build once more than a part of
// the body went through: the build fails while its segment is being uploaded.
type cancelMidway struct {
	*storage.S3Store
	cancel context.CancelFunc
}

func (c cancelMidway) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return c.S3Store.Put(ctx, key, &cancelAfter{r: r, left: uploadPart + 1, cancel: c.cancel}, size)
}

type cancelAfter struct {
	r      io.Reader
	left   int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.left -= n; c.left <= 0 {
		c.cancel()
	}
	return n, err
}

// TestFailedBuildLeavesNoUpload builds a BTREE whose segment streams to the real MinIO in
// several parts and fails the build after the first part: the custody hook was asked
// first, the mutation fails, nothing is committed, no segment is published and no
// incomplete multipart upload is left behind.
func TestFailedBuildLeavesNoUpload(t *testing.T) {
	srv := testminio.Shared(t)
	ctx := context.Background()
	s3, err := storage.NewS3Store(ctx, storage.StoreConfig{
		Kind: storage.KindS3, Endpoint: srv.Endpoint, Bucket: storagetest.RandomName("failbuild-"),
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: uploadPart,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { storagetest.RemoveBucket(t, s3) })
	// The random prices pack to about 7 bytes a row in a BTREE segment: about four parts.
	const rows = 4 * uploadPart / 7
	if _, _, err := dataset.Create(ctx, s3, "fail/ds", dataset.NewGenerator(rows, 3),
		dataset.WriteOptions{RowsPerFragment: rows / 2, TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d, err := dataset.Open(ctx, cancelMidway{s3, cancel}, "fail/ds", 0)
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	_, err = d.Mutate(bctx, dataset.MutateSpec{Op: dataset.MutateCreate, Name: "ix", Columns: []string{"price"}, Type: dataset.BTree},
		dataset.MutateOptions{TempDir: t.TempDir(), BeforeUpload: func(_ context.Context, key string) error {
			asked = append(asked, key)
			return nil
		}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("mutate = %v, want a cancelled build", err)
	}
	if len(asked) != 1 {
		t.Fatalf("custody hook asked for %v, want one segment", asked)
	}
	if _, err := s3.Stat(ctx, asked[0]); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("segment of the failed build: stat = %v, want ErrNotFound", err)
	}
	for u := range s3.Client().ListIncompleteUploads(ctx, s3.Bucket(), "fail/ds/", true) {
		t.Fatalf("incomplete upload left by the failed build: %+v", u)
	}
	if v, err := dataset.LatestVersion(ctx, s3, "fail/ds"); err != nil || v != 1 {
		t.Fatalf("latest version = %d, %v; want 1 (nothing committed)", v, err)
	}
}
