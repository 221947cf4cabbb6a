// Package boltfile opens bbolt files without trusting them. bbolt panics (sometimes on a
// goroutine no recover reaches) or faults on a damaged file, and silently initializes an empty
// one as a new database; a journal that holds custody must instead refuse to start with an
// error that names the file. The package owns that check, the atomic creation that makes "the
// file exists" mean "it holds at least its first commit", a consistent lock-free snapshot for
// readers of a file a writer holds, and the audited quarantine that moves a corrupt file aside.
// It knows nothing of what the files hold and imports no other steward package.
package boltfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// Open is bolt.Open for a file that must not be trusted blindly:
//   - absent (and not ReadOnly): it is created under a temporary name in the same directory,
//     initialized by init (may be nil), and linked into place, so that a file at path always
//     holds at least its initial commit;
//   - present: Check must pass first, so an empty, truncated or damaged file is a *CorruptError
//     naming it, never a new database and never a panic.
//
// Opening a sound existing file writes nothing to it. opts.OpenFile is not honoured.
func Open(path string, mode os.FileMode, opts *bolt.Options, init func(*bolt.Tx) error) (*bolt.DB, error) {
	var o bolt.Options
	if opts != nil {
		o = *opts
	}
	err := Check(path, o.Timeout)
	if errors.Is(err, fs.ErrNotExist) && !o.ReadOnly {
		if err = create(path, mode, o, init); err == nil {
			err = Check(path, o.Timeout) // ours, or the one a concurrent creator linked first
		}
	}
	if err != nil {
		return nil, err
	}
	return open(path, mode, &o)
}

// create initializes a new file next to path and links it into place. Link, unlike rename,
// never replaces a file a concurrent creator put there first: then that one is kept.
func create(path string, mode os.FileMode, o bolt.Options, init func(*bolt.Tx) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".new-*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer os.Remove(name)
	err = errors.Join(tmp.Chmod(mode), tmp.Close())
	if err != nil {
		return err
	}
	o.ReadOnly, o.OpenFile = false, nil
	db, err := bolt.Open(name, mode, &o)
	if err != nil {
		return err
	}
	if init != nil {
		err = db.Update(init)
	}
	if err = errors.Join(err, db.Close()); err != nil {
		return err
	}
	if err := os.Link(name, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes a link or rename in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
