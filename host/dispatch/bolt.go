package dispatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

var (
	bucketJobs   = []byte("jobs")   // id → JSON Job
	bucketActive = []byte("active") // id → empty: the jobs a round looks at
)

// BoltOptions configure OpenBolt.
type BoltOptions struct {
	// ReadOnly opens the file with a shared lock and refuses writes (the CLI's list and show).
	ReadOnly bool
	// LockTimeout bounds the wait for the file lock; a running dispatcher holds it exclusively.
	// Default 1s.
	LockTimeout time.Duration
	// NoSync skips fsync on commit (tests only: a crash may lose the last transactions).
	NoSync bool
}

// BoltStore is the embedded Store: one bbolt file, jobs as JSON under their id, and an index of
// the active ones so that a round reads only what it may act on.
type BoltStore struct {
	db *bolt.DB
}

var _ Store = (*BoltStore)(nil)

// OpenBolt opens (creating if needed, unless read-only) the job store at path. Opening an
// existing store writes nothing.
func OpenBolt(path string, opts BoltOptions) (*BoltStore, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: opts.LockTimeout, ReadOnly: opts.ReadOnly, NoSync: opts.NoSync,
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s", ErrStoreLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("dispatch: open store %s: %w", path, err)
	}
	s := &BoltStore{db: db}
	if opts.ReadOnly {
		return s, nil
	}
	var ready bool
	_ = db.View(func(tx *bolt.Tx) error {
		ready = tx.Bucket(bucketJobs) != nil && tx.Bucket(bucketActive) != nil
		return nil
	})
	if !ready {
		err = db.Update(func(tx *bolt.Tx) error {
			for _, b := range [][]byte{bucketJobs, bucketActive} {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("dispatch: init store %s: %w", path, err)
		}
	}
	return s, nil
}

// View implements Store.
func (s *BoltStore) View(fn func(Tx) error) error {
	return closedErr(s.db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) }))
}

// Update implements Store.
func (s *BoltStore) Update(fn func(Tx) error) error {
	return closedErr(s.db.Update(func(tx *bolt.Tx) error { return fn(boltTx{tx}) }))
}

// Close implements Store.
func (s *BoltStore) Close() error { return s.db.Close() }

// Path is the store's file.
func (s *BoltStore) Path() string { return s.db.Path() }

func closedErr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

type boltTx struct{ tx *bolt.Tx }

func (t boltTx) Get(id string) (Job, error) {
	var j Job
	b := t.tx.Bucket(bucketJobs)
	var v []byte
	if b != nil {
		v = b.Get([]byte(id))
	}
	if v == nil {
		return j, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err := json.Unmarshal(v, &j); err != nil {
		return j, fmt.Errorf("%w: %s: %w", ErrCorrupt, id, err)
	}
	return j, nil
}

func (t boltTx) Put(j *Job) error {
	v, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if err := t.tx.Bucket(bucketJobs).Put([]byte(j.ID), v); err != nil {
		return err
	}
	if j.Active() {
		return t.tx.Bucket(bucketActive).Put([]byte(j.ID), nil)
	}
	return t.tx.Bucket(bucketActive).Delete([]byte(j.ID))
}

func (t boltTx) Active(fn func(Job) error) error {
	b := t.tx.Bucket(bucketActive)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, _ []byte) error {
		j, err := t.Get(string(k))
		if err != nil {
			return err
		}
		return fn(j)
	})
}

func (t boltTx) All(fn func(Job) error) error {
	b := t.tx.Bucket(bucketJobs)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		var j Job
		if err := json.Unmarshal(v, &j); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrCorrupt, k, err)
		}
		return fn(j)
	})
}
