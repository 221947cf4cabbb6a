package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cba1309c/steward/internal/boltfile"
	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
)

// The journal is the bbolt file behind the in-memory index. Changes are queued in the order
// the ledger made them in memory (the ledger queues while holding its lock) and one committer
// goroutine writes everything queued so far in a single transaction: concurrent reservations
// share one commit and its fsyncs (group commit) without the fixed delay of bolt's db.Batch,
// so a lone reservation pays exactly one commit.

var (
	bucketTickets   = []byte("tickets")
	bucketTransfers = []byte("transfers")
	bucketNotes     = []byte("notes") // owner → note; journals older than notes lack the bucket
)

// jop is one change: put val under key in the bucket, or delete key when val is nil.
type jop struct {
	bucket []byte
	key    []byte
	val    []byte
}

type journal struct {
	db  *bolt.DB
	log hclog.Logger

	mu        sync.Mutex
	queue     []jop
	waiters   []chan error
	lingering bool // a delayed wakeup is scheduled for unwaited releases
	wake      chan struct{}
	stop      chan struct{}
	done      chan struct{}
}

// openJournal opens the journal at path, creating it when absent. A file that is present but
// empty, truncated or damaged is a *CorruptError, never a new journal.
func openJournal(path string, log hclog.Logger) (*journal, error) {
	db, err := boltfile.Open(path, 0o600, &bolt.Options{
		Timeout:        time.Second,
		NoFreelistSync: true, // the freelist is rebuilt on open; commits write fewer pages
		FreelistType:   bolt.FreelistMapType,
	}, initJournal)
	if err != nil {
		return nil, corruptFile(path, fmt.Errorf("%w: open %s: %w", ErrJournal, path, err))
	}
	j := &journal{db: db, log: log, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go j.run()
	return j, nil
}

func initJournal(tx *bolt.Tx) error {
	for _, b := range [][]byte{bucketTickets, bucketTransfers, bucketNotes} {
		if _, err := tx.CreateBucket(b); err != nil {
			return err
		}
	}
	return nil
}

// corruptFile turns an error that says the file at path is corrupt into a *CorruptError naming
// it, and returns any other error as it is.
func corruptFile(path string, err error) error {
	var bad *boltfile.CorruptError
	switch {
	case errors.As(err, &bad):
		return &CorruptError{Path: path, Err: bad.Err}
	case errors.Is(err, ErrCorrupt):
		return &CorruptError{Path: path, Err: err}
	}
	return err
}

// submit queues ops. With wait, the returned channel receives the commit's result; without
// it the change becomes durable with the next commit and a failure is only logged (every
// unwaited change is a release that is safe to lose: the ticket comes back on restart and is
// settled or deleted again).
func (j *journal) submit(ops []jop, wait bool) <-chan error {
	var ch chan error
	j.mu.Lock()
	j.queue = append(j.queue, ops...)
	if !wait {
		// A release lingers so that it shares the next durable commit (typically the next
		// reservation) instead of costing an fsync of its own on the upload path.
		if !j.lingering {
			j.lingering = true
			time.AfterFunc(releaseLinger, j.wakeup)
		}
		j.mu.Unlock()
		return nil
	}
	ch = make(chan error, 1)
	j.waiters = append(j.waiters, ch)
	j.mu.Unlock()
	j.wakeup()
	return ch
}

// releaseLinger bounds how long an unwaited release waits for a commit to share.
const releaseLinger = 20 * time.Millisecond

func (j *journal) wakeup() {
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

func (j *journal) run() {
	defer close(j.done)
	for {
		select {
		case <-j.wake:
			j.commit()
		case <-j.stop:
			j.commit()
			return
		}
	}
}

func (j *journal) commit() {
	j.mu.Lock()
	ops, waiters := j.queue, j.waiters
	j.queue, j.waiters, j.lingering = nil, nil, false
	j.mu.Unlock()
	if len(ops) == 0 && len(waiters) == 0 {
		return
	}
	err := j.db.Update(func(tx *bolt.Tx) error {
		for _, op := range ops {
			b, err := tx.CreateBucketIfNotExists(op.bucket)
			if err != nil {
				return err
			}
			if op.val == nil {
				err = b.Delete(op.key)
			} else {
				err = b.Put(op.key, op.val)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrJournal, err)
		if len(waiters) == 0 {
			j.log.Error("journal commit failed", "changes", len(ops), "error", err)
		}
	}
	for _, w := range waiters {
		w <- err
	}
}

// close commits what is queued and closes the file.
func (j *journal) close() error {
	close(j.stop)
	<-j.done
	return j.db.Close()
}

// load calls fn for every ticket and pair record, in key order.
func (j *journal) load(ticket func(store, key string, r record) error, pair func(from, to Owner, acked uint64) error,
	note func(o Owner, note []byte) error) error {
	return j.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketNotes); b != nil {
			err := b.ForEach(func(k, v []byte) error {
				d := decoder{b: k}
				o := d.owner(d.byte())
				if d.err == nil && len(d.b) != 0 {
					d.fail("trailing bytes in note key")
				}
				if d.err != nil {
					return fmt.Errorf("note key: %w", d.err)
				}
				return note(o, bytes.Clone(v))
			})
			if err != nil {
				return err
			}
		}
		err := tx.Bucket(bucketTickets).ForEach(func(k, v []byte) error {
			store, key, err := splitTicketKey(k)
			if err != nil {
				return err
			}
			r, err := decodeRecord(v)
			if err != nil {
				return fmt.Errorf("ticket %s:%q: %w", store, key, err)
			}
			return ticket(store, key, r)
		})
		if err != nil {
			return err
		}
		return tx.Bucket(bucketTransfers).ForEach(func(k, v []byte) error {
			from, to, err := decodePairKey(k)
			if err != nil {
				return err
			}
			acked, err := decodeSeq(v)
			if err != nil {
				return err
			}
			return pair(from, to, acked)
		})
	})
}
