package ledger

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cba1309c/steward/storage"
)

// The cleanup worker is DeletesInFlight goroutines that delete abandoned names. Abandoned
// slots belong to it alone (no owner can accept, transfer or re-reserve them), so it may copy
// their names out, drop the lock for the network call and release exactly the confirmed ones
// afterwards. Each batch is taken off the queue whole, so no name is in two requests at once.
//
// Tasks are per store; consecutive abandons of one store merge into one task so that deletes
// go out in full batches. A goroutine takes at most BatchSize names from the front of the
// front task; the rest stays in front for the next one. Beside a batch in flight, only a full
// one (or another task) is sent: names still being abandoned then go out in one request, not
// in as many as there are goroutines. A name is released only on a clean
// per-key success ("already absent" is one); any other result, including one that is
// ambiguous because the store did not answer, keeps its ticket. After a clean batch the
// goroutine goes straight on; after a failure the failed names go to the back of the queue
// and no batch starts for RetryWait (batches already sent finish).

type task struct {
	store    uint16
	slots    []uint32
	failedAt time.Time // start of the current failure streak; zero while healthy
}

type cleanupState struct {
	queue    []*task
	inflight []*task // the batches sent, each a task of its own
	// pauseUntil: after a failed batch no batch starts before this.
	pauseUntil time.Time
	wake       chan struct{}
	resolved   map[string]storage.Store
}

func (c *cleanupState) init() {
	c.wake = make(chan struct{}, 1)
	c.resolved = map[string]storage.Store{}
}

// enqueue hands abandoned slots of one store to the worker. Called with l.mu held.
func (l *Ledger) enqueue(store uint16, ids []uint32) {
	q := l.clean.queue
	if n := len(q); n > 0 && q[n-1].store == store && q[n-1].failedAt.IsZero() {
		q[n-1].slots = append(q[n-1].slots, ids...)
	} else {
		l.clean.queue = append(q, &task{store: store, slots: append([]uint32(nil), ids...)})
	}
	select {
	case l.clean.wake <- struct{}{}:
	default:
	}
}

func (l *Ledger) worker(ctx context.Context) {
	defer l.wg.Done()
	for {
		t, batch, keys, store, paused := l.nextBatch()
		if t == nil {
			var resume <-chan time.Time
			var timer *time.Timer
			if paused > 0 {
				timer = time.NewTimer(paused)
				resume = timer.C
			}
			select {
			case <-ctx.Done():
			case <-l.clean.wake:
			case <-resume:
			}
			if timer != nil {
				timer.Stop()
			}
			if ctx.Err() != nil {
				return
			}
			continue
		}
		var results []storage.DeleteResult
		var err error
		if len(keys) == 1 && IsPrefix(keys[0]) {
			results, err = l.deletePrefix(ctx, store, keys[0])
		} else {
			results, err = l.deleteKeys(ctx, store, keys)
		}
		failed := l.finishBatch(t, batch, keys, results, err)
		if ctx.Err() != nil {
			return
		}
		if failed {
			timer := time.NewTimer(l.cfg.RetryWait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
		}
	}
}

// nextBatch takes the first batch of the front task off the queue, as a task of its own in
// flight, and copies its names. While a failure's pause lasts it takes nothing and says how
// long the pause has left.
func (l *Ledger) nextBatch() (*task, []uint32, []string, string, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.clean.queue) == 0 {
		return nil, nil, nil, "", 0
	}
	if wait := time.Until(l.clean.pauseUntil); wait > 0 {
		return nil, nil, nil, "", wait
	}
	t := l.clean.queue[0]
	if len(l.clean.inflight) > 0 && len(t.slots) < l.cfg.BatchSize && len(l.clean.queue) == 1 {
		// A short batch beside one in flight would split what is still being abandoned
		// into more requests: it waits for a full batch, or for the one in flight.
		return nil, nil, nil, "", 0
	}
	// A prefix ticket is a batch of its own (its objects are listed and deleted in batches);
	// a batch of names stops before the next prefix.
	n := 0
	var keys []string
	for _, id := range t.slots[:min(l.cfg.BatchSize, len(t.slots))] {
		k := l.idx.key(id)
		if IsPrefix(k) && n > 0 {
			break
		}
		keys = append(keys, k)
		if n++; IsPrefix(k) {
			break
		}
	}
	b := &task{store: t.store, slots: t.slots[:n:n], failedAt: t.failedAt}
	if t.slots = t.slots[n:]; len(t.slots) == 0 {
		l.clean.queue[0] = nil
		l.clean.queue = l.clean.queue[1:]
	}
	l.clean.inflight = append(l.clean.inflight, b)
	if len(l.clean.queue) > 0 {
		select { // another goroutine may take the next batch meanwhile
		case l.clean.wake <- struct{}{}:
		default:
		}
	}
	return b, b.slots, keys, l.stores[b.store], 0
}

// deleteKeys deletes keys through the named store.
func (l *Ledger) deleteKeys(ctx context.Context, store string, keys []string) ([]storage.DeleteResult, error) {
	st, err := l.resolveStore(store)
	if err != nil {
		return nil, err
	}
	res := st.DeleteBatch(ctx, keys)
	if len(res) != len(keys) {
		return nil, fmt.Errorf("%w: store %q answered %d results for %d keys", storage.ErrUnavailable, store, len(res), len(keys))
	}
	return res, nil
}

// resolveStore returns the store called name, resolving it once through Config.Stores.
func (l *Ledger) resolveStore(name string) (storage.Store, error) {
	l.mu.Lock()
	st := l.clean.resolved[name]
	l.mu.Unlock()
	if st != nil {
		return st, nil
	}
	if l.cfg.Stores == nil {
		return nil, fmt.Errorf("%w: no store resolver configured for %q", ErrInvalid, name)
	}
	st, err := l.cfg.Stores(name)
	if err != nil {
		return nil, fmt.Errorf("resolve store %q: %w", name, err)
	}
	l.mu.Lock()
	l.clean.resolved[name] = st
	l.mu.Unlock()
	return st, nil
}

// finishBatch releases the confirmed names of a batch and requeues the rest. It reports
// whether anything failed.
func (l *Ledger) finishBatch(t *task, batch []uint32, keys []string, res []storage.DeleteResult, err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	var kept []uint32
	var firstErr error
	var ops []jop
	for i, id := range batch {
		if err == nil && res[i].Err == nil && res[i].Key == keys[i] {
			if l.j != nil {
				ops = append(ops, jop{bucket: bucketTickets, key: l.ticketKey(id)})
			}
			l.release(id)
			continue
		}
		if firstErr == nil {
			firstErr = err
			if firstErr == nil {
				firstErr = res[i].Err
			}
		}
		kept = append(kept, id)
	}
	l.stats.deleted += uint64(len(batch) - len(kept))
	l.submit(ops, false)
	if i := slices.Index(l.clean.inflight, t); i >= 0 {
		l.clean.inflight = slices.Delete(l.clean.inflight, i, i+1)
	}
	defer l.notify()
	if len(kept) == 0 {
		if !t.failedAt.IsZero() && len(l.clean.queue) > 0 && l.clean.queue[0].store == t.store {
			l.clean.queue[0].failedAt = time.Time{} // the names retried with it are deleted: healthy again
		}
		return false
	}
	l.stats.deleteFailures += uint64(len(kept))
	if t.failedAt.IsZero() {
		t.failedAt = l.cfg.Now()
	}
	t.slots = kept
	l.clean.queue = append(l.clean.queue, t)
	l.clean.pauseUntil = time.Now().Add(l.cfg.RetryWait)
	l.log.Warn("delete batch failed; tickets kept for retry", "store", l.stores[t.store],
		"keys", len(batch), "failed", len(kept), "error", firstErr)
	return true
}

// release drops an abandoned slot whose object is gone.
func (l *Ledger) release(id uint32) {
	s := l.idx.slot(id)
	oid := s.owner
	rec := l.own.rec(oid)
	unlink(l.idx, rec, id)
	rec.abandoned--
	l.idx.remove(id)
	l.maybeDrop(oid)
}

// WaitIdle blocks until the cleanup worker has nothing left to delete (every abandoned name
// is deleted and released) or ctx ends. With a store that keeps failing it waits until ctx
// ends.
func (l *Ledger) WaitIdle(ctx context.Context) error {
	for {
		l.mu.Lock()
		idle := len(l.clean.queue) == 0 && len(l.clean.inflight) == 0
		ch := l.changed
		l.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ledger: waiting for cleanup: %w", ctx.Err())
		case <-ch:
		}
	}
}
