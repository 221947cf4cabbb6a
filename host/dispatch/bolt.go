package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cba1309c/steward/internal/boltfile"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

var (
	bucketJobs   = []byte("jobs")   // id → JSON Job
	bucketActive = []byte("active") // id → empty: the jobs a round looks at
)

// BoltOptions configure OpenBolt.
type BoltOptions struct {
	// ReadOnly opens the file with a shared lock and refuses writes. A running dispatcher holds
	// the file exclusively, so this fails with ErrStoreLocked while one runs: use Snapshot.
	ReadOnly bool
	// Snapshot reads a consistent copy of the file, taken without any lock, so that it works
	// while a dispatcher holds the store (the CLI's list and show). The store is read-only and
	// shows the jobs as they were when it was opened.
	Snapshot bool
	// LockTimeout bounds the wait for the file lock; a running dispatcher holds it exclusively.
	// Default 1s.
	LockTimeout time.Duration
	// NoSync skips fsync on commit (tests only: a crash may lose the last transactions).
	NoSync bool
}

// BoltStore is the embedded Store: one bbolt file, jobs as JSON under their id, and an index of
// the active ones so that a round reads only what it may act on.
type BoltStore struct {
	db   *bolt.DB
	path string
	// watchers are the in-process Watch subscribers: one process owns a writable bolt file (its
	// lock), so every change is committed through this handle.
	mu       sync.Mutex
	watchers map[string]map[chan struct{}]struct{}
	commits  atomic.Int64 // write transactions committed
	cache    *decodeCache // the jobs decoded from their records (Get, Active)
}

var _ Store = (*BoltStore)(nil)

// OpenBolt opens (creating if needed, unless read-only) the job store at path. Opening an
// existing store writes nothing. A file that is present but empty, truncated or damaged is a
// *CorruptError naming it (never a new store, never a panic); QuarantineStore moves it aside.
func OpenBolt(path string, opts BoltOptions) (*BoltStore, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = time.Second
	}
	var db *bolt.DB
	var err error
	if opts.Snapshot {
		db, err = boltfile.Snapshot(path)
	} else {
		db, err = boltfile.Open(path, 0o600, &bolt.Options{
			Timeout: opts.LockTimeout, ReadOnly: opts.ReadOnly, NoSync: opts.NoSync,
		}, initBolt)
	}
	var bad *boltfile.CorruptError
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s", ErrStoreLocked, path)
	case errors.As(err, &bad):
		return nil, &CorruptError{Path: path, Err: bad.Err}
	case err != nil:
		return nil, fmt.Errorf("dispatch: open store %s: %w", path, err)
	}
	s := &BoltStore{db: db, path: path, cache: newDecodeCache()}
	if opts.ReadOnly || opts.Snapshot {
		return s, nil
	}
	var ready bool
	_ = db.View(func(tx *bolt.Tx) error {
		ready = tx.Bucket(bucketJobs) != nil && tx.Bucket(bucketActive) != nil
		return nil
	})
	if !ready { // a store whose first commit predates atomic creation
		if err := db.Update(initBolt); err != nil {
			db.Close()
			return nil, fmt.Errorf("dispatch: init store %s: %w", path, err)
		}
	}
	return s, nil
}

func initBolt(tx *bolt.Tx) error {
	for _, b := range [][]byte{bucketJobs, bucketActive} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return nil
}

// Quarantined is the store file QuarantineStore moved aside.
type Quarantined struct {
	From    string // the store file
	To      string // where it is now: From + ".corrupt-<UTC time>"
	Note    string // the audit record written next to To
	Problem string // what was wrong with it
}

// QuarantineStore is the audited way out of a corrupt store file: it moves the file at path
// aside to <path>.corrupt-<UTC time>, with an audit record <that>.audit.json of by, reason, at
// and the problem found, so that the next OpenBolt creates an empty store. Every job it held is
// forgotten: UNKNOWN ones must be settled by hand from the quarantined file or the datasets. It
// refuses a sound file (ErrNotCorrupt) and a file a process has open (ErrStoreLocked).
func QuarantineStore(path, by, reason string, at time.Time) (Quarantined, error) {
	if by == "" || reason == "" {
		return Quarantined{}, ErrAuditRequired
	}
	moved, err := boltfile.Quarantine(boltfile.Audit{By: by, Reason: reason, At: at}, path)
	switch {
	case errors.Is(err, boltfile.ErrInUse):
		return Quarantined{}, fmt.Errorf("%w: %s", ErrStoreLocked, path)
	case errors.Is(err, boltfile.ErrNotCorrupt):
		return Quarantined{}, fmt.Errorf("%w: %s", ErrNotCorrupt, path)
	case err != nil:
		return Quarantined{}, fmt.Errorf("dispatch: quarantine %s: %w", path, err)
	}
	m := moved[0]
	return Quarantined{From: m.From, To: m.To, Note: m.Note, Problem: m.Problem}, nil
}

// View implements Store.
func (s *BoltStore) View(fn func(Tx) error) error {
	return closedErr(s.db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx, nil, s.cache}) }))
}

// Update implements Store. fn runs once.
func (s *BoltStore) Update(fn func(Tx) error) error {
	touched := map[string]bool{}
	err := closedErr(s.db.Update(func(tx *bolt.Tx) error { return fn(boltTx{tx, touched, s.cache}) }))
	if err == nil {
		s.commits.Add(1)
		s.notify(touched)
	}
	return err
}

// Commits is the number of write transactions this handle committed (a measure for benchmarks).
func (s *BoltStore) Commits() int64 { return s.commits.Load() }

// Watch implements Store with an in-process notification: it sees the changes committed through
// this handle, which are all of them while it holds the file's lock.
func (s *BoltStore) Watch(ctx context.Context, id string) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.watchers == nil {
		s.watchers = map[string]map[chan struct{}]struct{}{}
	}
	if s.watchers[id] == nil {
		s.watchers[id] = map[chan struct{}]struct{}{}
	}
	s.watchers[id][ch] = struct{}{}
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.watchers[id][ch]; ok {
			delete(s.watchers[id], ch)
			if len(s.watchers[id]) == 0 {
				delete(s.watchers, id)
			}
			close(ch)
		}
	})
	return ch, nil
}

func (s *BoltStore) notify(ids map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range ids {
		for ch := range s.watchers[id] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Close implements Store; it closes every Watch channel.
func (s *BoltStore) Close() error {
	s.mu.Lock()
	for id, chans := range s.watchers {
		for ch := range chans {
			close(ch)
		}
		delete(s.watchers, id)
	}
	s.mu.Unlock()
	return s.db.Close()
}

// Path is the store's file (for a snapshot, the file it copied).
func (s *BoltStore) Path() string { return s.path }

func closedErr(err error) error {
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

type boltTx struct {
	tx      *bolt.Tx
	touched map[string]bool // ids written (nil in View)
	cache   *decodeCache
}

// Get implements Tx.
func (t boltTx) Get(id string) (Job, error) {
	return t.get(t.tx.Bucket(bucketJobs), []byte(id), 0)
}

// get reads job id from the jobs bucket b as part of the cache's read gen (0: none).
func (t boltTx) get(b *bolt.Bucket, id []byte, gen uint64) (Job, error) {
	var v []byte
	if b != nil {
		v = b.Get(id)
	}
	if v == nil {
		return Job{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	// v is valid only inside this transaction: the cache compares it and copies what it keeps.
	return t.cache.job(string(id), v, gen, true, decodeBoltJob)
}

func decodeBoltJob(id string, v []byte) (Job, error) {
	var j Job
	if err := json.Unmarshal(v, &j); err != nil {
		return j, fmt.Errorf("%w: %s: %w", ErrCorrupt, id, err)
	}
	return j, nil
}

func (t boltTx) Put(j *Job) error {
	if t.touched == nil {
		return ErrReadOnly
	}
	t.touched[j.ID] = true
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

func (t boltTx) Delete(id string) error {
	if t.touched == nil {
		return ErrReadOnly
	}
	t.touched[id] = true
	if err := t.tx.Bucket(bucketJobs).Delete([]byte(id)); err != nil {
		return err
	}
	return t.tx.Bucket(bucketActive).Delete([]byte(id))
}

// Active implements Tx: the jobs of the active index, decoded only where their record changed
// since the cache last saw it; a complete read drops the cache's entries of jobs no longer active.
func (t boltTx) Active(fn func(Job) error) error {
	b := t.tx.Bucket(bucketActive)
	if b == nil {
		return nil
	}
	jobs := t.tx.Bucket(bucketJobs)
	gen := t.cache.begin()
	err := b.ForEach(func(k, _ []byte) error {
		j, err := t.get(jobs, k, gen)
		if err != nil {
			return err
		}
		return fn(j)
	})
	if err == nil {
		t.cache.sweep(gen)
	}
	return err
}

// All implements Tx. It uses the cache's entries (the active jobs) but adds none: the finished
// jobs it also reads would only be swept out by the next Active.
func (t boltTx) All(fn func(Job) error) error {
	b := t.tx.Bucket(bucketJobs)
	if b == nil {
		return nil
	}
	return b.ForEach(func(k, v []byte) error {
		j, err := t.cache.job(string(k), v, 0, false, decodeBoltJob)
		if err != nil {
			return err
		}
		return fn(j)
	})
}
