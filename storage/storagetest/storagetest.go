// Package storagetest holds test helpers for code built on storage.Store: throwaway local and
// S3 stores that clean up after themselves, and the contract suite every Store must pass.
// It imports no steward package besides storage (the MinIO server comes from the caller).
package storagetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/cba1309c/steward/storage"
)

// NewLocal returns a local store in a fresh temporary directory.
func NewLocal(t testing.TB) *storage.LocalStore {
	t.Helper()
	s, err := storage.NewLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// RandomName returns a lowercase name usable as a bucket or prefix.
func RandomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// NewS3 creates a fresh bucket on the given server and returns a store on it. When t ends,
// every object in the bucket and the bucket itself are removed.
func NewS3(t testing.TB, endpoint, accessKey, secretKey string) *storage.S3Store {
	t.Helper()
	ctx := context.Background()
	cfg := storage.StoreConfig{
		Kind: storage.KindS3, Endpoint: endpoint, Bucket: RandomName("steward-test-"),
		AccessKey: accessKey, SecretKey: secretKey, MaxRetries: 1, RequestTimeout: 20 * time.Second,
	}
	s, err := storage.NewS3Store(ctx, cfg)
	// A MinIO that has just reported ready can still answer "Server not initialized" (503)
	// for a moment: give it a few seconds.
	for deadline := time.Now().Add(10 * time.Second); errors.Is(err, storage.ErrUnavailable) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		s, err = storage.NewS3Store(ctx, cfg)
	}
	if err != nil {
		t.Fatalf("open s3 store: %v", err)
	}
	t.Cleanup(func() { RemoveBucket(t, s) })
	return s
}

// RemoveBucket deletes every object of s's bucket and then the bucket. Errors are logged,
// not fatal: a test that stopped its server cannot clean up, and that is fine.
func RemoveBucket(t testing.TB, s *storage.S3Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	objs, err := storage.ListAll(ctx, s, "")
	if err != nil {
		t.Logf("cleanup list: %v", err)
		return
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	for _, r := range s.DeleteBatch(ctx, keys) {
		if r.Err != nil {
			t.Logf("cleanup delete: %v", r.Err)
		}
	}
	if err := s.Client().RemoveBucket(ctx, s.Bucket()); err != nil {
		t.Logf("cleanup bucket: %v", minio.ToErrorResponse(err).Code)
	}
}

// Allocated reports the bytes fn allocated on the heap (runtime.MemStats.TotalAlloc), after a
// GC: what a test asserts on to show that a read stayed within its bound.
func Allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
