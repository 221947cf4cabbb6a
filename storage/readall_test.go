package storage_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/storagetest"
)

// A sparse 1 GiB regular file is refused by its size before a byte is read.
func TestReadAllHugeLocalFile(t *testing.T) {
	root := t.TempDir()
	s, err := storage.NewLocalStore(root)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(root, "huge"), nil, 0o644))
	must(t, os.Truncate(filepath.Join(root, "huge"), 1<<30))
	const bound = 64 << 20
	grew := storagetest.Allocated(func() {
		if _, err := storage.ReadAll(context.Background(), s, "huge", bound); !errors.Is(err, storage.ErrTooLarge) {
			t.Errorf("got %v, want ErrTooLarge", err)
		}
	})
	if grew > 1<<20 {
		t.Errorf("refusing a 1 GiB object allocated %d bytes", grew)
	}
}

// endless is a store whose objects never end and whose size is not announced. (After 256 MiB
// a body fails, so that a reader without a bound fails the test rather than the machine.)
type endless struct {
	storage.Store
	read int64
}

func (e *endless) Get(context.Context, string) (io.ReadCloser, error) {
	return io.NopCloser(zeroes{&e.read}), nil
}

func (e *endless) Stat(context.Context, string) (storage.ObjectInfo, error) {
	return storage.ObjectInfo{}, errors.New("this store cannot tell sizes")
}

type zeroes struct{ n *int64 }

func (z zeroes) Read(p []byte) (int, error) {
	if *z.n > 256<<20 {
		return 0, errors.New("guard: 256 MiB read from an endless body")
	}
	clear(p)
	*z.n += int64(len(p))
	return len(p), nil
}

// A body that never ends is cut one byte past the bound, with memory to match.
func TestReadAllEndlessBody(t *testing.T) {
	const bound = 8 << 20
	e := &endless{}
	grew := storagetest.Allocated(func() {
		if _, err := storage.ReadAll(context.Background(), e, "k", bound); !errors.Is(err, storage.ErrTooLarge) {
			t.Errorf("got %v, want ErrTooLarge", err)
		}
	})
	if e.read != bound+1 {
		t.Errorf("read %d bytes of an endless body, want %d", e.read, bound+1)
	}
	if grew > 5*bound/2 {
		t.Errorf("allocated %d bytes for a %d-byte bound", grew, bound)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
