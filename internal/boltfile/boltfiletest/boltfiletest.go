// Package boltfiletest damages real bbolt files the ways disks and operators do, for the tests of
// every package that keeps a bbolt journal.
package boltfiletest

import (
	"math/rand/v2"
	"os"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Damage is one way a file goes bad.
type Damage struct {
	Name  string
	Apply func(t testing.TB, path string)
}

// Damages are the cases every journal must refuse with an error naming the file:
//   - empty: truncated to 0 bytes (a new file must not be made of it);
//   - truncated: cut to half of its last commit, on a page boundary;
//   - torn: cut at a byte offset inside a page;
//   - garbled: a leaf page in the middle of the file overwritten with random bytes;
//   - garbled-elements: the same page's elements garbled behind an intact page header, so bbolt
//     follows garbage offsets.
func Damages() []Damage {
	return []Damage{
		{"empty", func(t testing.TB, p string) { truncate(t, p, 0) }},
		{"truncated", func(t testing.TB, p string) {
			size, ps := geometry(t, p)
			truncate(t, p, size/2/ps*ps)
		}},
		{"torn", func(t testing.TB, p string) {
			size, ps := geometry(t, p)
			truncate(t, p, size/2/ps*ps+ps/3)
		}},
		{"garbled", func(t testing.TB, p string) { garble(t, p, 0) }},
		{"garbled-elements", func(t testing.TB, p string) { garble(t, p, 16) }},
	}
}

// geometry returns the bytes the last commit spans and the page size.
func geometry(t testing.TB, path string) (size, pageSize int64) {
	t.Helper()
	db, err := bolt.Open(path, 0, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return size, int64(db.Info().PageSize)
}

func truncate(t testing.TB, path string, size int64) {
	t.Helper()
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
}

// garble overwrites the leaf page nearest the middle of the file, from byte keep of the page on,
// with random bytes (a fixed seed: every run damages alike).
func garble(t testing.TB, path string, keep int) {
	t.Helper()
	id, ps := middleLeaf(t, path)
	b := make([]byte, ps-int64(keep))
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, id*ps+int64(keep)); err != nil {
		t.Fatal(err)
	}
}

// middleLeaf finds a leaf page (one reached from a bucket, not a free one) nearest the middle.
func middleLeaf(t testing.TB, path string) (id, pageSize int64) {
	t.Helper()
	db, err := bolt.Open(path, 0, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	id = -1
	err = db.View(func(tx *bolt.Tx) error {
		pages := tx.Size() / int64(db.Info().PageSize)
		for i := int64(2); i < pages; i++ {
			info, err := tx.Page(int(i))
			if err != nil {
				return err
			}
			if info != nil && info.Type == "leaf" && (id < 0 || abs(i-pages/2) < abs(id-pages/2)) {
				id = i
			}
		}
		return nil
	})
	if err != nil || id < 0 {
		t.Fatalf("no leaf page in %s (%v): write more before damaging it", path, err)
	}
	return id, int64(db.Info().PageSize)
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// FlipByte inverts the byte at off of the file at path.
func FlipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
