package sidecar

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
)

// worker is one launched worker domain with its pipes: a call's, an engine's probe, or a spare.
// A spare is a worker started ahead of demand into its own fresh domain: it has hardened itself,
// paid its exec and init, announced itself, and waits for the one request it will ever serve.
// Taking it hides the launch from the host without sharing anything between invocations.
type worker struct {
	eng     *engine
	dom     *isolation.Domain
	toW     *os.File // sidecar → worker
	fromW   *os.File // worker → sidecar
	frames  chan frameOrErr
	logw    *workerLog
	tempDir string      // the domain's private TMPDIR and HOME, removed once the domain is reaped
	idle    *idleFreeze // a spare of another engine than the built-in one: frozen while it waits
	grant   *grant      // the domain's memory budget (budget.go), given back once it is gone
}

// launchOptions are one domain's limits and CPUs. The zero value is the configured limits
// (isolation.Config.DomainLimits) on every CPU: what a spare is born with.
type launchOptions struct {
	memory, pids int64 // each lower than the configured limit, or 0 for the configured one
	cpus         []int // nil: every CPU of the sidecar's
}

// configured reports whether o asks for the configured limits, which a spare has.
func (o launchOptions) configured() bool { return o.memory == 0 && o.pids == 0 }

// callLimits are the launch options of a call's limits: a call may lower the configured limits,
// never raise them (docs/PROTOCOL.md, limits).
func callLimits(cfg isolation.Config, l *rpc.WorkerLimits) launchOptions {
	if l == nil {
		return launchOptions{}
	}
	return launchOptions{memory: below(cfg.MemoryLimit, l.MemoryBytes), pids: below(cfg.PidsLimit, l.Pids)}
}

// below is requested when it lowers configured, else 0 (the configured limit).
func below(configured, requested int64) int64 {
	if requested > 0 && requested < configured {
		return requested
	}
	return 0
}

// sparePool owns the spares: it starts them, each with a memory grant it never waits for; keeps
// the idle ones; freezes an idle spare of another engine than the built-in one; retires one for
// a call waiting for budget; hands one to its executor's call (claim); and tears down what is
// left at Close. Each executor holds at most one spare it asked the pool for. The spares follow
// the engine of the recent calls (follow): a spare of an engine serves any dataset, its gateway
// being bound to the call only when the request arrives.
type sparePool struct {
	log       hclog.Logger
	launch    func(e *engine, id string, o launchOptions) (*worker, error)
	budget    *memBudget
	memory    int64   // a spare's memory limit, the configured one: what its grant holds
	builtin   *engine // the spares' engine before any call
	cpus      []int   // the sidecar's CPUs
	contained bool    // domains are born contained (see engineFor)

	// target is the last call's engine, which the next spares are born for; nil before the
	// first call.
	target atomic.Pointer[engine]
	ahead  sync.WaitGroup // startAhead's goroutines

	mu     sync.Mutex // held across a spare's launch, so Close waits for a launch in flight
	idle   map[*worker]struct{}
	closed bool
	// moved is closed (and replaced) when a call's engine differs from the previous one's:
	// executors then replace idle spares born for the old one.
	moved chan struct{}
	// idleMemory is, by engine name, the peak memory of its last idle spare once its start-up
	// was done (noteIdle): what one waiting spare of the engine holds.
	idleMemory map[string]int64
}

func newSparePool(log hclog.Logger, launch func(*engine, string, launchOptions) (*worker, error), budget *memBudget,
	memory int64, builtin *engine, cpus []int, contained bool) *sparePool {
	p := &sparePool{log: log, launch: launch, budget: budget, memory: memory, builtin: builtin, cpus: cpus, contained: contained,
		idle: map[*worker]struct{}{}, moved: make(chan struct{}), idleMemory: map[string]int64{}}
	budget.retire = p.retire
	return p
}

// start launches a spare for the last call's engine (engineFor; the built-in engine's before
// any call); nil if the pool is closed, the budget is in use or awaited, or the launch fails:
// the next call then starts cold.
//
// A built-in spare started while no call waits (idle) will wait for its call: it is born on one
// CPU, the last of the sidecar's (CPU 0 takes most device interrupts), and widens itself to all
// of them right before its one call into the engine (isolation.WidenCPUs). Born there, its
// runtime keeps every thread on that CPU, and its exit, on the answer's path, sends no
// TLB-shootdown IPIs to the others (docs/PERFORMANCE.md). A spare started while calls queue is
// taken at once and runs on every CPU: its start-up is the call's. Another engine's spare is
// born on every CPU: it cannot be told to widen itself.
func (p *sparePool) start(idle bool) *worker {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	e := p.builtin
	if t := p.target.Load(); t != nil {
		e = p.engineFor(t)
	}
	var o launchOptions
	if idle && len(p.cpus) > 1 && e.builtin() {
		o.cpus = p.cpus[len(p.cpus)-1:]
	}
	g := p.budget.tryAcquire(p.memory, true)
	if g == nil {
		return nil
	}
	w, err := p.launch(e, "spare", o)
	if err != nil {
		g.release()
		p.log.Warn("could not start a spare worker", "engine", e.name, "error", err)
		return nil
	}
	w.grant = g
	if !e.builtin() {
		w.idle = p.freeze(w)
	}
	p.idle[w] = struct{}{}
	if !p.budget.headShort() {
		return w
	}
	// A call began waiting for budget while this spare launched, too late to retire it: it is
	// retired now, for that call.
	delete(p.idle, w)
	p.mu.Unlock()
	w.discard()
	p.mu.Lock() // for the deferred unlock
	return nil
}

// startAhead starts the executor's next spare beside a call of engine e that takes spare, when
// e is another engine than the built-in one and more calls queue: such an engine's start-up
// (the Lance engine's python and `import lance`) is longer than a small call, and a spare started
// only after the answer would be taken at once by the next queued call with its start-up still
// ahead of it. Born beside the call, it has the call's length to start. nil if no spare is
// started; else the spare arrives on the channel (nil if it could not be started), and the
// executor receives it.
func (p *sparePool) startAhead(e *engine, spare *worker, queued bool, inv string) <-chan *worker {
	if spare == nil || spare.eng != e || e.builtin() || !queued {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	out := make(chan *worker, 1)
	p.ahead.Add(1) // under mu, before Close's Wait
	go func() {    // owned by the pool: Close waits for it
		defer p.ahead.Done()
		w := p.start(false)
		if w != nil {
			p.log.Debug("spare started beside a job, jobs queued", "engine", w.eng.name, "domain", w.dom.ID(), "invocation", inv)
		}
		out <- w
	}()
	return out
}

// claim gives w to a call of engine e with launch options o; nil if w cannot serve it (a spare
// has the configured limits, and serves its own engine's calls only), died idle, cannot be
// thawed, or is no longer idle (retired for budget, or the pool closed). A w it cannot serve is
// torn down. Its grant becomes the call's.
func (p *sparePool) claim(w *worker, e *engine, o launchOptions, inv string) *worker {
	if w == nil || !p.take(w) {
		return nil
	}
	w.grant.claim()
	if !o.configured() || isClosed(w.dom.Done()) || !p.serves(w, e) {
		w.discard()
		return nil
	}
	if err := w.wake(); err != nil {
		p.log.Error("could not thaw the spare worker: it is discarded", "invocation", inv, "error", err)
		w.discard()
		return nil
	}
	return w
}

// take removes w from the idle spares; false if it is no longer idle (retired, or the pool
// closed). A built-in spare, never frozen, is noted here (noteIdle): it has waited for its call.
func (p *sparePool) take(w *worker) bool {
	if w.idle == nil {
		p.noteIdle(w)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.idle[w]
	delete(p.idle, w)
	return ok
}

// drop tears w down unless it is no longer idle (then whoever took it tore it down).
func (p *sparePool) drop(w *worker) {
	if w != nil && p.take(w) {
		w.discard()
	}
}

// isIdle reports whether w is still an idle spare (not taken, retired or discarded).
func (p *sparePool) isIdle(w *worker) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.idle[w]
	return ok
}

// retire retires one idle spare for a call waiting for budget; false if none is idle.
func (p *sparePool) retire() bool {
	p.mu.Lock()
	var w *worker
	for x := range p.idle {
		w = x
		break
	}
	delete(p.idle, w)
	p.mu.Unlock()
	if w == nil {
		return false
	}
	p.log.Info("idle spare retired: a waiting call needs its memory budget", "domain", w.dom.ID(), "engine", w.eng.name)
	w.discard()
	return true
}

// stop starts no spare from now on (a stopping sidecar launches nothing new).
func (p *sparePool) stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

// Close starts no spare from now on, tears down the idle ones, and waits for startAhead's
// goroutines (their spares, started before the close, were idle and are torn down too).
func (p *sparePool) Close() {
	if p == nil {
		return
	}
	p.stop()
	p.ahead.Wait()
	p.mu.Lock()
	idle := p.idle
	p.idle = map[*worker]struct{}{}
	p.mu.Unlock()
	for w := range idle {
		w.discard()
	}
}

// engineFor is the engine the spares for the calls of engine t run: t, if it is the built-in
// engine or if another engine's worker may wait as a spare, else the built-in engine. Another
// engine's spare waits outside any invocation, where no engine code may be able to change a
// dataset: only a contained one may wait, since it reaches no store until its request opens
// its gateway (uncontained, it could write wherever its uid may).
func (p *sparePool) engineFor(t *engine) *engine {
	if t.builtin() || p.contained {
		return t
	}
	return p.builtin
}

// serves reports whether spare w may serve a call of engine e: a spare of e serves any dataset
// (its gateway is bound to the call only when the request arrives).
func (p *sparePool) serves(w *worker, e *engine) bool { return w.eng == e }

// follow makes e, a call's engine, what the next spares are born for; when it differs from the
// last call's, executors holding an idle spare of the old one replace it (stale).
func (p *sparePool) follow(e *engine) {
	if old := p.target.Swap(e); old == e {
		return
	}
	p.mu.Lock()
	close(p.moved)
	p.moved = make(chan struct{})
	p.mu.Unlock()
}

// movedCh is closed once a call's engine differs from the previous one's.
func (p *sparePool) movedCh() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.moved
}

// stale reports whether idle spare w was born for an engine the recent calls no longer use.
func (p *sparePool) stale(w *worker) bool {
	t := p.target.Load()
	return t != nil && !p.serves(w, p.engineFor(t))
}

// spareFreezeAfter is how long a spare of another engine than the built-in one runs before it is
// frozen: its start-up (the Lance engine: python and `import lance`).
const spareFreezeAfter = 2 * time.Second

// idleFreeze freezes a waiting spare once its start-up is done, until wake: engine code must not
// run outside an invocation, and an idle engine, which has no deadline, must not take the host's
// CPUs (the domain's cgroups bound its memory and tasks, not its CPU time).
type idleFreeze struct {
	mu     sync.Mutex
	timer  *time.Timer
	frozen bool
	over   bool // woken or discarded: it is not frozen again
}

// freeze arranges for spare w to be frozen spareFreezeAfter from now (see idleFreeze).
func (p *sparePool) freeze(w *worker) *idleFreeze {
	f := &idleFreeze{}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timer = time.AfterFunc(spareFreezeAfter, func() { // ended by wake or discard (over)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.over {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := w.dom.Freeze(ctx); err != nil {
			p.log.Warn("could not freeze an idle spare: it waits running", "engine", w.eng.name, "domain", w.dom.ID(), "error", err)
			return
		}
		f.frozen = true
		p.noteIdle(w)
	})
	return f
}

// noteIdle records what spare w holds now that its start-up is done (see idleMemory).
func (p *sparePool) noteIdle(w *worker) {
	if m := w.dom.PeakMemory(); m > 0 {
		p.mu.Lock()
		p.idleMemory[w.eng.name] = m
		p.mu.Unlock()
	}
}

// idleMemoryOf is the peak memory of engine e's last idle spare, 0 before one was noted.
func (p *sparePool) idleMemoryOf(e string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idleMemory[e]
}

// wake ends w's idle freeze: no freeze from now on, and a frozen spare is thawed. A spare that
// cannot be thawed must not serve.
func (w *worker) wake() error {
	f := w.idle
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.over = true
	f.timer.Stop()
	if !f.frozen {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.dom.Thaw(ctx); err != nil {
		return err
	}
	f.frozen = false
	return nil
}

// discard tears down a worker that will not serve (a probe, a spare that died idle or is not
// wanted, or the sidecar is stopping); a frozen one is killed where it stands.
func (w *worker) discard() {
	if f := w.idle; f != nil {
		f.mu.Lock()
		f.over = true
		f.timer.Stop()
		f.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = w.dom.Kill(ctx)
	_ = w.dom.Close()
	w.toW.Close()
	w.fromW.Close()
	_ = os.RemoveAll(w.tempDir)
	w.grant.release()
}
