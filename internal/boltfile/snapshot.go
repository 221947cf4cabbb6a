package boltfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// snapshotAttempts bounds the copies Snapshot takes before it gives up with ErrBusy; attempt n
// waits n×10 ms first, so a writer committing back to back gets about 0.3 s of gaps to miss.
const snapshotAttempts = 8

// Snapshot opens a read-only copy of path, taken without any lock, so that it works while
// another process holds the file open for writing (bbolt's exclusive flock also shuts out
// read-only opens). The copy is consistent: bbolt writes a commit's pages before the meta page
// that makes them visible, and a new commit never overwrites a page the latest meta page
// references, so a copy during which neither meta page changed holds that commit whole. A copy
// during which one did, or that fails Check, is taken again. The copy is a temporary file that is
// unlinked once open (on Unix nothing is left behind even if the process dies).
//
// A file that is corrupt in every copy is a *CorruptError naming path; a file committed to
// during every attempt is ErrBusy.
func Snapshot(path string) (*bolt.DB, error) {
	var err error
	for attempt := range snapshotAttempts {
		time.Sleep(time.Duration(attempt) * 10 * time.Millisecond)
		var db *bolt.DB
		var stable bool
		db, stable, err = snapshotOnce(path)
		if err == nil && stable {
			return db, nil
		}
		if db != nil {
			db.Close()
		}
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: %s", ErrBusy, path)
}

// snapshotOnce copies path, checks and opens the copy, and reports whether the live file's meta
// pages still equal the copy's.
func snapshotOnce(path string) (*bolt.DB, bool, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer src.Close()
	name, err := copyToTemp(path, src)
	if err != nil {
		return nil, false, err
	}
	defer os.Remove(name) // the open copy stays readable until closed
	// A copy that fails the check was either torn by commits during the copy or copied from a
	// damaged file. Only an unchanged head (meta pages, and then some) says it is the file: else
	// it is a torn copy, to be taken again, and never reported as a corrupt file.
	torn := func(err error) (*bolt.DB, bool, error) {
		if stable, serr := sameHead(src, name, tornHead); serr == nil && !stable {
			return nil, false, nil
		}
		return nil, false, relabel(err, path)
	}
	if err := Check(name, 0); err != nil {
		return torn(err)
	}
	db, err := open(name, 0, &bolt.Options{ReadOnly: true})
	if err != nil {
		return torn(err)
	}
	stable, err := sameHead(src, name, 2*db.Info().PageSize)
	if err != nil {
		db.Close()
		return nil, false, err
	}
	return db, stable, nil
}

// tornHead is how much of the head of a file is compared to tell a torn copy from a damaged
// file when the page size cannot be read: two meta pages of the largest page size bbolt uses here.
const tornHead = 2 * 64 << 10

// copyToTemp copies src (the file at path) into a new temporary file and returns its name.
func copyToTemp(path string, src io.Reader) (string, error) {
	dst, err := os.CreateTemp("", "steward-snapshot-*.db")
	if err != nil {
		return "", err
	}
	_, err = io.Copy(dst, src)
	if err = errors.Join(err, dst.Close()); err != nil {
		os.Remove(dst.Name())
		return "", fmt.Errorf("copy %s: %w", path, err)
	}
	return dst.Name(), nil
}

// sameHead reports whether the first n bytes (the two meta pages) of live and of the copy agree.
func sameHead(live io.ReaderAt, copyName string, n int) (bool, error) {
	now := make([]byte, n)
	if _, err := live.ReadAt(now, 0); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	then := make([]byte, n)
	f, err := os.Open(copyName)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if _, err := f.ReadAt(then, 0); err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	return bytes.Equal(now, then), nil
}

// relabel makes a *CorruptError about a copy name the file it was copied from.
func relabel(err error, path string) error {
	var ce *CorruptError
	if errors.As(err, &ce) {
		return &CorruptError{Path: path, Err: ce.Err}
	}
	return err
}
