package storage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/storagetest"
)

const streamPart = 5 << 20 // S3's smallest part: the most parts for the bytes moved

// newStreamStore opens a store on a fresh bucket that streams in parts of streamPart with
// two part buffers, so that a few parts already reuse buffers.
func newStreamStore(t *testing.T, unsigned bool) *storage.S3Store {
	t.Helper()
	srv := testminio.Shared(t)
	s, err := storage.NewS3Store(context.Background(), storage.StoreConfig{
		Kind: storage.KindS3, Endpoint: srv.Endpoint, Bucket: storagetest.RandomName("stream-"),
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, PartSize: streamPart, PartsInFlight: 2,
		UnsignedPayload: unsigned,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { storagetest.RemoveBucket(t, s) })
	return s
}

// unsized hides the length of a reader, as the pipe from an index builder does.
type unsized struct{ r io.Reader }

func (u unsized) Read(p []byte) (int, error) { return u.r.Read(p) }

// failing yields n bytes of data, then err.
type failing struct {
	data []byte
	err  error
}

func (f *failing) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// incompleteUploads lists the multipart uploads of key that were neither completed nor
// aborted.
func incompleteUploads(t *testing.T, s *storage.S3Store, key string) []minio.ObjectMultipartInfo {
	t.Helper()
	var out []minio.ObjectMultipartInfo
	for u := range s.Client().ListIncompleteUploads(context.Background(), s.Bucket(), key, true) {
		if u.Err != nil {
			t.Fatalf("list incomplete uploads: %v", u.Err)
		}
		out = append(out, u)
	}
	return out
}

// TestS3StreamedPut writes objects of unknown length around the part boundaries (one
// PUT, several concurrent parts, more parts than buffers) and reads them back whole.
func TestS3StreamedPut(t *testing.T) {
	t.Run("signed", func(t *testing.T) { testStreamedPut(t, newStreamStore(t, false)) })
	t.Run("unsigned", func(t *testing.T) { testStreamedPut(t, newStreamStore(t, true)) })
}

func testStreamedPut(t *testing.T, s *storage.S3Store) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		size int
	}{
		{"empty", 0},
		{"one byte", 1},
		{"part minus one", streamPart - 1},
		{"one part", streamPart},
		{"part plus one", streamPart + 1},
		{"seven parts and a tail", 7*streamPart + 12345},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := randomBytes(tc.size)
			key := "streamed/" + tc.name
			if err := s.Put(ctx, key, unsized{bytes.NewReader(want)}, -1); err != nil {
				t.Fatalf("put: %v", err)
			}
			got, err := storage.ReadAll(ctx, s, key, int64(tc.size))
			if err != nil {
				t.Fatalf("read back: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("read back %d bytes, want %d identical bytes", len(got), len(want))
			}
			if u := incompleteUploads(t, s, key); len(u) != 0 {
				t.Fatalf("%d incomplete uploads left after a successful put", len(u))
			}
		})
	}
}

// TestS3StreamedPutFails: when the body fails (an index build that fails while its segment
// streams) or the context ends, Put reports it, publishes nothing and leaves no
// incomplete multipart upload behind on the real server.
func TestS3StreamedPutFails(t *testing.T) {
	s := newStreamStore(t, false)
	errBuild := errors.New("build failed")
	for _, tc := range []struct {
		name   string
		after  int  // bytes the body yields before failing
		cancel bool // cancel the context instead of failing the read
	}{
		{"in the first part", streamPart / 2, false},
		{"after some parts", 3*streamPart + 100, false},
		{"context cancelled after some parts", 3*streamPart + 100, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			key := "failed/" + tc.name
			var body io.Reader = &failing{data: randomBytes(tc.after), err: errBuild}
			want := errBuild
			if tc.cancel {
				body = io.MultiReader(bytes.NewReader(randomBytes(tc.after)), cancelling{cancel}, unsized{bytes.NewReader(randomBytes(4 * streamPart))})
				want = context.Canceled
			}
			err := s.Put(ctx, key, body, -1)
			if !errors.Is(err, want) {
				t.Fatalf("put = %v, want %v", err, want)
			}
			if _, err := s.Stat(context.Background(), key); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("stat after a failed put = %v, want ErrNotFound", err)
			}
			if u := incompleteUploads(t, s, key); len(u) != 0 {
				t.Fatalf("%d incomplete uploads left after a failed put (upload id %s)", len(u), u[0].UploadID)
			}
		})
	}
}

// cancelling cancels a context when read, then reads as empty.
type cancelling struct{ cancel context.CancelFunc }

func (c cancelling) Read([]byte) (int, error) { c.cancel(); return 0, io.EOF }
