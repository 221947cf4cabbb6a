package ledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/cba1309c/steward/internal/boltfile"
	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
)

// The journal is the bbolt file behind the in-memory index, with a write-ahead log in front of
// it (wal.go). Changes are queued in the order the ledger made them in memory (the ledger
// queues while holding its lock) and one committer goroutine writes everything queued so far
// as one log record, one write and one flush: concurrent reservations share one commit (group
// commit) without the fixed delay of bolt's db.Batch, so a lone reservation pays exactly one
// flush. Checkpoints move the log into the bbolt file.

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
	// wal takes the commits (wal.go); nil when it could not start a generation, and then
	// commits go to the bbolt file. pending is what it logged since the last checkpoint. Both
	// belong to the committer goroutine (and to open and close, before and after it runs).
	wal     *wal
	pending []jop

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
	if err := j.startWAL(path); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	go j.run()
	return j, nil
}

// startWAL opens the journal's write-ahead log (creating it for a journal that never had one),
// moves what it holds beyond the bbolt file into it and starts a fresh generation. The bbolt
// file says which generation it holds (metaWALDone); a journal that has the key needs its log,
// so a missing log, or one that does not belong to the file (a generation ahead of the next,
// or behind), is refused as corrupt rather than taken for an empty one.
func (j *journal) startWAL(path string) error {
	wp := walPath(path)
	done, marked, err := walDone(j.db)
	if err != nil {
		return &CorruptError{Path: path, Err: err}
	}
	w, ops, err := openWAL(wp)
	switch {
	case errors.Is(err, fs.ErrNotExist) && marked:
		return &CorruptError{Path: wp, Err: fmt.Errorf("write-ahead log missing (the journal has absorbed generation %d)", done)}
	case errors.Is(err, fs.ErrNotExist):
		w, err = createWAL(wp, done+1)
		if err != nil {
			return fmt.Errorf("%w: create %s: %w", ErrJournal, wp, err)
		}
	case err != nil:
		var ce *CorruptError
		if errors.As(err, &ce) {
			return err
		}
		return fmt.Errorf("%w: open %s: %w", ErrJournal, wp, err)
	default:
		if err := walBelongs(w.gen, len(ops) > 0, done, marked); err != nil {
			w.close()
			return &CorruptError{Path: wp, Err: err}
		}
	}
	j.wal = w
	switch {
	case w.gen == done: // a checkpoint ended before the log's reset: its records are in the file
		err = w.reset(done + 1)
	case len(ops) > 0 || !marked:
		j.pending = ops
		err = j.checkpoint(nil)
	}
	if err != nil {
		w.close()
		return fmt.Errorf("%w: checkpoint %s: %w", ErrJournal, wp, err)
	}
	return nil
}

// walBelongs checks that a log of generation gen (holding records or not) is the log of a
// journal that absorbed generation done (marked: it has had a log). A journal writes only the
// generation after the one it absorbed, and absorbs a generation before it starts the next; a
// journal that never had a log can meet only the empty first generation its own start made
// before a crash. Anything else is another journal's log, or this one's from another time.
func walBelongs(gen uint64, records bool, done uint64, marked bool) error {
	switch {
	case !marked && (gen != 1 || records):
		return fmt.Errorf("write-ahead log of generation %d next to a journal that never had one", gen)
	case marked && (gen > done+1 || gen < done):
		return fmt.Errorf("write-ahead log of generation %d does not belong to a journal that absorbed generation %d", gen, done)
	}
	return nil
}

// walDone reads which log generation the bbolt file holds; marked is false for a journal that
// never had a log.
func walDone(db *bolt.DB) (done uint64, marked bool, err error) {
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta)
		if b == nil {
			return nil
		}
		v := b.Get(metaWALDone)
		switch {
		case v == nil:
			return nil
		case len(v) != 8:
			return fmt.Errorf("write-ahead log generation of %d bytes", len(v))
		}
		done, marked = binary.BigEndian.Uint64(v), true
		return nil
	})
	return done, marked, err
}

// checkpoint applies what the log holds, then ops, to the bbolt file in one transaction that
// also records the log's generation as absorbed, and starts the next generation. After a
// failed transaction nothing changed (the log still holds its records). When the reset fails
// the log is given up for this process: records appended under a generation the file has
// absorbed would be skipped at the next open.
func (j *journal) checkpoint(ops []jop) error {
	gen := j.wal.gen
	err := j.db.Update(func(tx *bolt.Tx) error {
		if err := apply(tx, j.pending); err != nil {
			return err
		}
		if err := apply(tx, ops); err != nil {
			return err
		}
		b, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		return b.Put(metaWALDone, binary.BigEndian.AppendUint64(nil, gen))
	})
	if err != nil {
		return err
	}
	j.pending = nil
	if err := j.wal.reset(gen + 1); err != nil {
		j.log.Error("write-ahead log could not start a new generation; committing to the journal file directly", "path", j.wal.path, "error", err)
		j.wal.close()
		j.wal = nil
	}
	return nil
}

// apply writes ops into tx in order.
func apply(tx *bolt.Tx, ops []jop) error {
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
	err := j.write(ops)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrJournal, err)
		if len(waiters) == 0 {
			j.log.Error("journal commit failed", "changes", len(ops), "error", err)
		}
	}
	for _, w := range waiters {
		w <- err
	}
	// Half a log: checkpoint while nothing waits, so that a commit rarely finds it full.
	if j.wal != nil && j.wal.used() >= walSize/2 && j.idle() {
		if err := j.checkpoint(nil); err != nil {
			j.log.Error("journal checkpoint failed; the write-ahead log keeps the changes", "error", err)
		}
	}
}

// write makes ops durable: one record in the log, or (no log, or a record that does not fit
// in what is left of it) a bbolt transaction.
func (j *journal) write(ops []jop) error {
	if j.wal == nil {
		return j.db.Update(func(tx *bolt.Tx) error { return apply(tx, ops) })
	}
	payload, err := encodeOps(ops)
	if err != nil {
		return err
	}
	if !j.wal.fits(len(payload)) {
		return j.checkpoint(ops)
	}
	if err := j.wal.append(payload); err != nil {
		// The record may or may not be on disk; its changes are reported failed (a reservation
		// rolls back, a release comes back at the next open and is settled again). Either way
		// the next record overwrites it, and a checkpoint makes it stale at once.
		if cerr := j.checkpoint(nil); cerr != nil {
			j.log.Error("journal checkpoint after a failed log write failed", "error", cerr)
		}
		return err
	}
	j.pending = append(j.pending, ops...)
	return nil
}

func (j *journal) idle() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.queue) == 0
}

// close commits what is queued, checkpoints the log (a journal closed cleanly is whole in its
// bbolt file) and closes both files.
func (j *journal) close() error {
	close(j.stop)
	<-j.done
	var err error
	if j.wal != nil && len(j.pending) > 0 {
		err = j.checkpoint(nil) // may give the log up (j.wal = nil)
	}
	if j.wal != nil {
		err = errors.Join(err, j.wal.close())
	}
	return errors.Join(err, j.db.Close())
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
