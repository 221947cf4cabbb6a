package boltfile

import (
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io/fs"
	"os"
	"runtime/debug"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Check reads path without writing it and without trusting it, and returns a *CorruptError when
// bbolt could not use it safely: an empty file, a file shorter than its last commit or not a
// whole number of pages, two bad meta pages, or a page that bbolt's reads, free-page scan or own
// consistency check trips over. An absent file is an error wrapping fs.ErrNotExist, not
// corruption; a file another process holds open for writing fails with bbolt's ErrTimeout after
// timeout (0 waits forever).
//
// bbolt assumes a sound file: on a bad one it panics, sometimes on a goroutine of its own where
// no recover reaches, and a read past the end of the mapping is a fault that kills the process.
// Check runs in two read-only passes so that every such read happens first on this goroutine,
// with faults turned into panics and recovered: pass one reads the meta pages, the file size and
// every key and value of every bucket; pass two loads the free-page list and runs bbolt's
// consistency check, which then only visits pages pass one has read.
func Check(path string, timeout time.Duration) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.Size() == 0 {
		return corrupt(path, "empty file: a journal that existed was truncated to 0 bytes")
	}
	err = readOnly(path, timeout, false, func(db *bolt.DB) error {
		return db.View(func(tx *bolt.Tx) error { return scan(path, st.Size(), db.Info().PageSize, tx) })
	})
	if err != nil {
		return err
	}
	return readOnly(path, timeout, true, func(db *bolt.DB) error {
		return db.View(func(tx *bolt.Tx) error { return consistent(path, tx) })
	})
}

// readOnly opens path read-only (loading the free-page list when preload is set), runs fn and
// closes the file, with bbolt's panics and faults on this goroutine reported as corruption.
func readOnly(path string, timeout time.Duration, preload bool, fn func(*bolt.DB) error) error {
	db, err := open(path, 0, &bolt.Options{ReadOnly: true, Timeout: timeout, PreLoadFreelist: preload})
	if err != nil {
		return err
	}
	defer db.Close()
	return guard(path, func() error { return fn(db) })
}

// open is bolt.Open behind guard. A panic inside bolt.Open leaves its file open with the flock
// held; the file is captured to close it, which releases the lock (the mapping stays: a read of
// it by a goroutine bbolt left behind must not fault).
func open(path string, mode os.FileMode, opts *bolt.Options) (*bolt.DB, error) {
	var f *os.File
	o := *opts
	o.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		var err error
		f, err = os.OpenFile(name, flag, perm)
		return f, err
	}
	var db *bolt.DB
	err := guard(path, func() (err error) {
		db, err = bolt.Open(path, mode, &o)
		return err
	})
	if err == nil {
		return db, nil
	}
	if db == nil && f != nil {
		f.Close() // bolt.Open closes it on an error return, not on a panic; a second Close is a no-op
	}
	return nil, classify(path, err)
}

// guard runs fn with faults on the mapped file turned into panics, and a panic into corruption.
func guard(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = corrupt(path, "bbolt cannot read it: %v", r)
		}
	}()
	return fn()
}

// classify keeps lock, permission and system errors as they are; anything else bbolt refuses a
// file for (bad meta pages, wrong version, too small) is corruption.
func classify(path string, err error) error {
	var pe *fs.PathError
	var errno syscall.Errno
	var ce *CorruptError
	switch {
	case errors.Is(err, berrors.ErrTimeout), errors.As(err, &ce), errors.As(err, &pe), errors.As(err, &errno):
		return err
	}
	return &CorruptError{Path: path, Err: err}
}

// scan checks the size against the last commit and reads every key and value, so that any page
// they live on that is out of the file or garbled fails here.
func scan(path string, size int64, pageSize int, tx *bolt.Tx) error {
	if size%int64(pageSize) != 0 {
		return corrupt(path, "size %d is not a whole number of %d-byte pages: the file was truncated", size, pageSize)
	}
	if tx.Size() > size {
		return corrupt(path, "the last commit spans %d bytes but the file has %d: the file was truncated", tx.Size(), size)
	}
	s := scanner{h: crc32.NewIEEE(), limit: size / minEntry}
	return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		if b == nil {
			return corrupt(path, "root entry %q is not a bucket", name)
		}
		return s.bucket(path, b)
	})
}

// minEntry is less than the bytes any key takes on a page: more entries than size/minEntry
// means the pages point in a cycle.
const minEntry = 16

type scanner struct {
	h     hash.Hash32 // every byte read goes through it, so no read is optimized away
	n     int64
	limit int64
}

func (s *scanner) bucket(path string, b *bolt.Bucket) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if s.n++; s.n > s.limit {
			return corrupt(path, "more entries than the file can hold: its pages point in a cycle")
		}
		s.h.Write(k)
		if v != nil {
			s.h.Write(v)
			continue
		}
		if child := b.Bucket(k); child != nil {
			if err := s.bucket(path, child); err != nil {
				return err
			}
		}
	}
	return nil
}

// consistent runs bbolt's own check (reachable pages, double frees, key order).
func consistent(path string, tx *bolt.Tx) error {
	var errs []error
	for err := range tx.Check() { // drained to the end: its goroutine must not be left blocked
		if len(errs) < 3 {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return &CorruptError{Path: path, Err: fmt.Errorf("bbolt consistency check: %w", errors.Join(errs...))}
	}
	return nil
}
