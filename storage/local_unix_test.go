//go:build unix

package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/storagetest"
)

// resolvers runs fn once with each way a local store resolves paths: openat2 (Linux) and the
// element-by-element O_NOFOLLOW walk (older kernels, other systems).
func resolvers(t *testing.T, fn func(t *testing.T)) {
	t.Run("openat2", fn)
	t.Run("walk", func(t *testing.T) {
		storage.ForceWalk(t)
		fn(t)
	})
}

func TestContractLocalWalk(t *testing.T) {
	storage.ForceWalk(t)
	storagetest.RunContract(t, func(t *testing.T) storage.Store { return storagetest.NewLocal(t) })
}

// A symbolic link planted anywhere in a local store is never followed: writes, deletes, reads,
// stats and listings through it fail with ErrSymlink, and what it points at stays untouched.
func TestLocalNeverFollowsSymlinks(t *testing.T) {
	resolvers(t, func(t *testing.T) {
		ctx := context.Background()
		root, outside := t.TempDir(), t.TempDir()
		secret := filepath.Join(outside, "secret")
		must(t, os.WriteFile(secret, []byte("outside the store"), 0o644))
		s, err := storage.NewLocalStore(root)
		must(t, err)
		must(t, os.MkdirAll(filepath.Join(root, "ds", "data"), 0o755))
		links := map[string]string{
			"file-link":              secret,
			"dir-link":               outside,
			"ds/data/nested-link":    outside,
			"zero":                   "/dev/zero",
			"ds/data/relative-above": "../../..",
		}
		for l, target := range links {
			must(t, os.Symlink(target, filepath.Join(root, l)))
		}
		put := func(key string) func() error {
			return func() error { return s.Put(ctx, key, strings.NewReader("written"), 7) }
		}
		del := func(key string) func() error { return func() error { return s.DeleteBatch(ctx, []string{key})[0].Err } }
		get := func(key string) func() error {
			return func() error {
				rc, err := s.Get(ctx, key)
				if err == nil {
					rc.Close()
				}
				return err
			}
		}
		tests := []struct {
			name string
			op   func() error
		}{
			{"put over a link to a file", put("file-link")},
			{"put through a link to a directory", put("dir-link/secret")},
			{"put a new file through a link", put("dir-link/new")},
			{"put through a nested link", put("ds/data/nested-link/secret")},
			{"put through a relative link", put("ds/data/relative-above/" + filepath.Base(outside) + "/secret")},
			{"put-if-absent through a link", func() error { return s.PutIfAbsent(ctx, "dir-link/new", strings.NewReader("x"), 1) }},
			{"put-if-absent over a link", func() error { return s.PutIfAbsent(ctx, "file-link", strings.NewReader("x"), 1) }},
			{"delete a link", del("file-link")},
			{"delete through a link", del("dir-link/secret")},
			{"delete through a nested link", del("ds/data/nested-link/secret")},
			{"get a link", get("file-link")},
			{"get a link to the zero device", get("zero")},
			{"get through a link", get("dir-link/secret")},
			{"get a range through a link", func() error { _, err := s.GetRange(ctx, "dir-link/secret", 0, 1); return err }},
			{"stat a link", func() error { _, err := s.Stat(ctx, "file-link"); return err }},
			{"stat through a link", func() error { _, err := s.Stat(ctx, "dir-link/secret"); return err }},
			{"list through a link", func() error { _, err := storage.ListAll(ctx, s, "dir-link/"); return err }},
			{"read all of a link to the zero device", func() error { _, err := storage.ReadAll(ctx, s, "zero", 1<<20); return err }},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if err := tc.op(); !errors.Is(err, storage.ErrSymlink) {
					t.Fatalf("got %v, want ErrSymlink", err)
				}
			})
		}
		if b, err := os.ReadFile(secret); err != nil || string(b) != "outside the store" {
			t.Errorf("the link's target changed: %q, %v", b, err)
		}
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Errorf("files appeared outside the store: %v", ents)
		}
		for l := range links {
			if fi, err := os.Lstat(filepath.Join(root, l)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("link %s was removed or replaced: %v", l, err)
			}
		}
		if infos, err := storage.ListAll(ctx, s, ""); err != nil || len(infos) != 0 {
			t.Errorf("list of the store shows links or their targets: %v, %v", infos, err)
		}
	})
}

// Devices and FIFOs are not objects: refused (without blocking on a FIFO), kept, not listed.
func TestLocalRefusesSpecialFiles(t *testing.T) {
	resolvers(t, func(t *testing.T) {
		ctx := context.Background()
		root := t.TempDir()
		s, err := storage.NewLocalStore(root)
		must(t, err)
		must(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
		special := []string{"fifo"}
		// A character device (1,5 is /dev/zero on Linux) where the system lets us make one.
		if runtime.GOOS == "linux" && syscall.Mknod(filepath.Join(root, "zero"), syscall.S_IFCHR|0o644, 1<<8|5) == nil {
			special = append(special, "zero")
		}
		for _, key := range special {
			t.Run(key, func(t *testing.T) {
				if _, err := s.Get(ctx, key); !errors.Is(err, storage.ErrNotRegular) {
					t.Errorf("get: %v", err)
				}
				if _, err := storage.ReadAll(ctx, s, key, 1<<20); !errors.Is(err, storage.ErrNotRegular) {
					t.Errorf("read all: %v", err)
				}
				if _, err := s.Stat(ctx, key); !errors.Is(err, storage.ErrNotRegular) {
					t.Errorf("stat: %v", err)
				}
				if err := s.Put(ctx, key, strings.NewReader("x"), 1); !errors.Is(err, storage.ErrNotRegular) {
					t.Errorf("put: %v", err)
				}
				if err := s.DeleteBatch(ctx, []string{key})[0].Err; !errors.Is(err, storage.ErrNotRegular) {
					t.Errorf("delete: %v", err)
				}
				if fi, err := os.Lstat(filepath.Join(root, key)); err != nil || fi.Mode().IsRegular() {
					t.Errorf("the special file was replaced or removed: %v", err)
				}
			})
		}
		if infos, err := storage.ListAll(ctx, s, ""); err != nil || len(infos) != 0 {
			t.Errorf("list shows special files: %v, %v", infos, err)
		}
	})
}

// unevenReader hands out its bytes in reads of uneven sizes, as a builder's pipe does.
type unevenReader struct {
	b []byte
	n int
}

func (u *unevenReader) Read(p []byte) (int, error) {
	if len(u.b) == 0 {
		return 0, io.EOF
	}
	u.n++
	m := min(len(p), len(u.b), 1+(u.n*7919)%(3<<20))
	copy(p, u.b[:m])
	u.b = u.b[m:]
	return m, nil
}

// A put of several MiB in uneven reads lands byte for byte; a
// failing reader leaves nothing at the key and no staged file behind.
func TestLocalLargePut(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := storage.NewLocalStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{8<<20 - 1, 8 << 20, 8<<20 + 1, 21<<20 + 12345} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(i*31 + i>>13)
		}
		key := fmt.Sprintf("big/%d", size)
		if err := s.Put(ctx, key, &unevenReader{b: body}, -1); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, key))
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("size %d: %d bytes back, equal %v, %v", size, len(got), bytes.Equal(got, body), err)
		}
	}
	boom := errors.New("reader failed")
	if err := s.Put(ctx, "big/failed", &failing{data: make([]byte, 17<<20), err: boom}, -1); !errors.Is(err, boom) || !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("put with a failing reader: %v", err)
	}
	if _, err := s.Stat(ctx, "big/failed"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("stat after a failed put: %v", err)
	}
	entries, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	for _, e := range entries {
		if !strings.HasPrefix(e, filepath.Join(dir, "big")+"/") {
			t.Fatalf("left behind by the failed put: %s", e)
		}
	}
}

// chunkWriterTo is a reader that writes its own chunks (as an index segment's pipe does):
// Read must not be used. cancel, if set, is called after the first chunk.
type chunkWriterTo struct {
	t      *testing.T
	chunks [][]byte
	cancel func()
}

func (c *chunkWriterTo) Read([]byte) (int, error) {
	c.t.Error("Read called on a reader with WriteTo")
	return 0, io.ErrUnexpectedEOF
}

func (c *chunkWriterTo) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for i, b := range c.chunks {
		m, err := w.Write(b)
		n += int64(m)
		if err != nil {
			return n, err
		}
		if i == 0 && c.cancel != nil {
			c.cancel()
		}
	}
	return n, nil
}

// A local Put takes the chunks of a reader that writes its own (no copy through a buffer of
// its own) and lands them byte for byte; a context cancelled between two of them stops the
// Put, which publishes nothing.
func TestLocalPutWriterTo(t *testing.T) {
	dir := t.TempDir()
	s, err := storage.NewLocalStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	var chunks [][]byte
	var body []byte
	for i := range 20 {
		c := bytes.Repeat([]byte{byte('a' + i)}, 1<<20+i)
		chunks, body = append(chunks, c), append(body, c...)
	}
	if err := s.Put(context.Background(), "seg/whole", &chunkWriterTo{t: t, chunks: chunks}, -1); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "seg", "whole")); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("%d bytes back of %d (equal %v), %v", len(got), len(body), bytes.Equal(got, body), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	err = s.Put(ctx, "seg/cancelled", &chunkWriterTo{t: t, chunks: chunks, cancel: cancel}, -1)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("put cancelled between chunks: %v", err)
	}
	if _, err := s.Stat(context.Background(), "seg/cancelled"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("stat after the cancelled put: %v", err)
	}
}
