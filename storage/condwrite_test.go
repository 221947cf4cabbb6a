package storage_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/storagetest"
)

// ignoringStore is an S3 backend that ignores If-None-Match: every put-if-absent overwrites,
// as some S3-compatible stores do (lance#6595).
type ignoringStore struct{ storage.Store }

func (s ignoringStore) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.Store.Put(ctx, key, r, size)
}

func TestProbeConditionalWrites(t *testing.T) {
	srv := testminio.Shared(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) storage.Store
		want  error
	}{
		{"minio", func(t *testing.T) storage.Store {
			return storagetest.NewS3(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
		}, nil},
		{"local", func(t *testing.T) storage.Store { return storagetest.NewLocal(t) }, nil},
		{"minio-ignoring-precondition", func(t *testing.T) storage.Store {
			return ignoringStore{storagetest.NewS3(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)}
		}, storage.ErrConditionalWritesIgnored},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.store(t)
			err := storage.ProbeConditionalWrites(ctx, s)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("probe = %v, want %v", err, tc.want)
			}
			if left, _ := storage.ListAll(ctx, s, storage.ProbeKeyPrefix); len(left) > 0 {
				t.Fatalf("probe objects left: %v", left)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}
