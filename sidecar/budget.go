package sidecar

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cba1309c/steward/isolation"
)

// Admission by memory (docs/PROTOCOL.md §3.3.1). The memory limits of every worker domain that
// exists — a mutation's, an idle spare's, an engine's probe at start — never sum above
// the budget. Every path that starts a domain holds a grant for its limit first:
//
//	invoke   acquire: waits in FIFO order, until the call's run-until time or shutdown
//	spare    tryAcquire: a spare never waits and never passes a waiting call
//	probe    acquire at New, before any executor runs
//
// and gives it back once the domain is gone: worker.discard, or the call's afterAnswer once its
// namespaces (and the tmpfs in its mount namespace) are released. A spare's grant becomes its
// call's (claim). A call that needs budget idle spares hold retires them rather than waiting.

// Default budget shares (budgetDefault): the sidecar's cgroup limit is memory an operator gave
// steward, its workers being the point of it, so most of it goes to them; the rest is the
// sidecar's own heap, its gateways' buffers and the page cache of its ledger. MemTotal is the
// whole machine, which a database host shares with its database: half of it, where
// Elasticsearch gives its ML native processes 30% beside a JVM heap of up to half the machine.
const (
	budgetShareCgroup  = 0.8
	budgetShareMachine = 0.5
)

// memBudget is the memory budget: a counter of granted bytes and a FIFO of waiters.
type memBudget struct {
	total int64
	// retire retires one idle spare (its grant comes back through discard) and reports whether
	// there was one. Set once before any acquire.
	retire func() bool

	mu      sync.Mutex
	used    int64 // granted, spares included
	spares  int64 // granted to idle spares
	waiters []*budgetWaiter
	retired int64 // spares retired for a waiting call
}

type budgetWaiter struct {
	need  int64
	at    time.Time     // the call's receive time: waiters are granted in this order
	ready chan struct{} // closed once g is set
	g     *grant
}

// grant is budget held by one domain. release is idempotent.
type grant struct {
	b     *memBudget
	n     int64
	spare bool // counted in b.spares
	once  sync.Once
}

func newMemBudget(total int64) *memBudget { return &memBudget{total: total} }

// fits reports whether a domain of limit n can ever be admitted.
func (b *memBudget) fits(n int64) bool { return n <= b.total }

// tryAcquire grants n at once if it is free and no call waits; nil otherwise.
func (b *memBudget) tryAcquire(n int64, spare bool) *grant {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.waiters) > 0 || b.used+n > b.total {
		return nil
	}
	return b.grantLocked(n, spare)
}

func (b *memBudget) grantLocked(n int64, spare bool) *grant {
	b.used += n
	if spare {
		b.spares += n
	}
	return &grant{b: b, n: n, spare: spare}
}

// acquire waits for n bytes of budget, behind every call received before at (strict FIFO: a
// small call never passes a larger one that waits, so the larger one is admitted as soon as
// enough is free). While the first waiter does not fit, idle spares are retired one by one. It
// returns ctx's error if ctx ends first.
func (b *memBudget) acquire(ctx context.Context, n int64, at time.Time) (*grant, error) {
	if !b.fits(n) {
		return nil, fmt.Errorf("%d bytes exceed the memory budget of %d", n, b.total)
	}
	b.mu.Lock()
	if len(b.waiters) == 0 && b.used+n <= b.total {
		g := b.grantLocked(n, false)
		b.mu.Unlock()
		return g, nil
	}
	w := &budgetWaiter{need: n, at: at, ready: make(chan struct{})}
	i := len(b.waiters)
	for i > 0 && b.waiters[i-1].at.After(at) {
		i--
	}
	b.waiters = append(b.waiters, nil)
	copy(b.waiters[i+1:], b.waiters[i:])
	b.waiters[i] = w
	b.mu.Unlock()
	for b.headShort() && b.retire != nil && b.retire() {
		b.mu.Lock()
		b.retired++
		b.mu.Unlock()
	}
	select {
	case <-w.ready:
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.g != nil {
		if ctx.Err() != nil { // granted as the deadline came: given back, the call does not run
			b.releaseLocked(w.g)
			return nil, ctx.Err()
		}
		return w.g, nil
	}
	for i, x := range b.waiters {
		if x == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			break
		}
	}
	b.wakeLocked() // the next may fit now that this one left the head
	return nil, ctx.Err()
}

// headShort reports whether the first waiter does not fit in what is free.
func (b *memBudget) headShort() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiters) > 0 && b.used+b.waiters[0].need > b.total
}

// wakeLocked grants waiters in order while the first fits.
func (b *memBudget) wakeLocked() {
	for len(b.waiters) > 0 && b.used+b.waiters[0].need <= b.total {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		w.g = b.grantLocked(w.need, false)
		close(w.ready)
	}
}

func (b *memBudget) releaseLocked(g *grant) {
	g.once.Do(func() {
		b.used -= g.n
		if g.spare {
			b.spares -= g.n
		}
		b.wakeLocked()
	})
}

// release gives g back; safe on nil and more than once.
func (g *grant) release() {
	if g == nil {
		return
	}
	g.b.mu.Lock()
	defer g.b.mu.Unlock()
	g.b.releaseLocked(g)
}

// claim makes a spare's grant its call's: no longer idle, so no longer retired for others.
func (g *grant) claim() {
	if g == nil {
		return
	}
	g.b.mu.Lock()
	defer g.b.mu.Unlock()
	if g.spare {
		g.spare = false
		g.b.spares -= g.n
	}
}

// budgetState is a snapshot for hello and metrics.
type budgetState struct {
	total, used, spares, retired int64
	waiting                      int
}

func (b *memBudget) state() budgetState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return budgetState{total: b.total, used: b.used, spares: b.spares, retired: b.retired, waiting: len(b.waiters)}
}

// budgetSource says where a budget came from (hello's memory_budget).
type budgetSource struct {
	source string // "flag", isolation.CeilingCgroup or isolation.CeilingMachine
	base   int64
	share  float64
	detail string
}

// budgetDefault is the default budget over ceiling c: its share, but never below one worker's
// limit (worker) while c holds one, so that a default sidecar on a small machine still runs a
// default call.
func budgetDefault(c isolation.MemoryCeiling, worker int64) (int64, budgetSource) {
	share := budgetShareMachine
	if c.Source == isolation.CeilingCgroup {
		share = budgetShareCgroup
	}
	n := int64(float64(c.Bytes) * share)
	if floor := min(worker, c.Bytes); n < floor {
		n = floor
	}
	return n, budgetSource{source: c.Source, base: c.Bytes, share: share, detail: c.Detail}
}

// errOverBudget is the receive-time refusal of a call whose own limit exceeds the whole budget.
type errOverBudget struct {
	need, total, worker int64
}

func (e *errOverBudget) Error() string {
	return fmt.Sprintf("the call's worker memory limit of %d bytes exceeds the sidecar's memory budget of %d bytes, so it could never run: "+
		"send limits.memory_bytes of at most %d, or start the sidecar with a larger --memory-budget (at least --worker-memory, %d)",
		e.need, e.total, e.total, e.worker)
}
