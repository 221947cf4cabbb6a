package dispatch

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
)

// Dispatcher drives the jobs of one Store. Only one Dispatcher may drive a bbolt store at a time
// (its file lock enforces it). An EtcdStore is shared: one Dispatcher per node, each driving jobs
// through its own sidecars. Any node admits jobs and dispatches PENDING ones; the per-job
// transaction lets exactly one node journal a job's send. Every sweep is revision-guarded and
// idempotent, so every node runs them (no leader): a decision taken on a snapshot commits only if
// the job is unchanged, and the loser's retry finds nothing left to do.
type Dispatcher struct {
	cfg     Config
	store   Store
	cluster Cluster // the store, when several dispatchers share it (nil for bolt)
	log     hclog.Logger
	enabled atomic.Bool

	roundMu sync.Mutex // one round at a time
	pruneAt time.Time  // the next prune pass is due (under roundMu)

	mu         sync.Mutex
	sidecars   map[string]*sidecarEntry // name → current sidecar
	byEpoch    map[string]*sidecarEntry // epoch → sidecar, kept after replacement until it exits
	inflight   map[string]*call         // job id → its send
	resolveAt  map[string]time.Time     // job id → last index.resolve attempt (memory only)
	unsent     map[string]unsentNote    // job id → its journaled invocation this dispatcher never sent (unsent.go)
	cancelling map[string]bool          // job id → its index.cancel is in flight from here (cancel.go)
	unseen     map[string]time.Time     // plan sidecar → since when no node announces it (gone.go)
	closed     bool

	ctx    context.Context // cancelled by Close: abandons calls in flight
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}
}

type sidecarEntry struct {
	name     string
	sc       Sidecar
	epoch    string
	inflight int
}

// call is one send in flight.
type call struct {
	jobID, invocation string
	op                string
	sidecar           *sidecarEntry
	budget            time.Duration // the job's execute deadline, from dispatch
}

// New returns a dispatcher over cfg.Store. It starts nothing: call Run, or Round yourself.
func New(cfg Config) (*Dispatcher, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Config.Store is required", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{
		cfg: cfg, store: cfg.Store, log: cfg.Logger,
		sidecars: map[string]*sidecarEntry{}, byEpoch: map[string]*sidecarEntry{},
		inflight: map[string]*call{}, resolveAt: map[string]time.Time{}, unsent: map[string]unsentNote{}, cancelling: map[string]bool{},
		unseen: map[string]time.Time{}, ctx: ctx, cancel: cancel, kick: make(chan struct{}, 1),
	}
	d.cluster, _ = cfg.Store.(Cluster)
	d.enabled.Store(!cfg.Disabled)
	return d, nil
}

// SetEnabled switches admission on or off. Jobs already admitted keep being driven.
func (d *Dispatcher) SetEnabled(on bool) { d.enabled.Store(on) }

// Enabled reports whether Submit admits jobs.
func (d *Dispatcher) Enabled() bool { return d.enabled.Load() }

// AddSidecar registers s under name (one name per place a sidecar runs, e.g. a database node).
// Adding under a name already in use replaces that sidecar: a new epoch under the same name is
// proof that the old one restarted, so slots recorded with its epoch are released by the next
// round. The dispatcher never closes a sidecar.
func (d *Dispatcher) AddSidecar(name string, s Sidecar) error {
	if name == "" || s == nil || s.Epoch() == "" {
		return fmt.Errorf("%w: a sidecar needs a name and an epoch", ErrInvalidConfig)
	}
	if d.cluster != nil {
		if err := d.cluster.AnnounceEpoch(name, s.Epoch()); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.byEpoch[s.Epoch()]
	if e == nil {
		e = &sidecarEntry{epoch: s.Epoch()}
	} else if cur := d.sidecars[e.name]; cur == e && e.name != name {
		delete(d.sidecars, e.name) // the same process re-added under another name
	}
	e.name, e.sc = name, s
	d.sidecars[name] = e
	d.byEpoch[e.epoch] = e
	for ep, o := range d.byEpoch {
		if d.sidecars[o.name] != o && exited(o.sc) && o.inflight == 0 {
			delete(d.byEpoch, ep) // its name now maps to a newer epoch: that is proof enough
		}
	}
	d.kickRound()
	return nil
}

// RemoveSidecar stops choosing the sidecar added under name. Jobs it runs stay held until it
// exits or a new sidecar is added under the same name.
func (d *Dispatcher) RemoveSidecar(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.sidecars, name)
}

// Request is a job to admit.
type Request struct {
	// ID is the job id; empty generates a time-ordered one.
	ID              string
	Dataset         rpc.DatasetRef
	AdmittedVersion int64
	Op              string
	Index           rpc.IndexSpec
	IfNotExists     bool
	IfExists        bool
	Schema          []rpc.FieldContract
	Limits          *rpc.WorkerLimits
	// ExecuteDeadline, if set, replaces Config.ExecuteDeadline for this job: its deadline falls
	// this long after dispatch. It must fund the sidecar's kill budget like the default.
	ExecuteDeadline time.Duration
	// Fault is test-only; the sidecar refuses it unless started with --test-faults.
	Fault string
	// Engine is the registered engine to run the job on ("" = the built-in one).
	Engine string
	// TraceParent is the W3C traceparent of the host's work this job belongs to (its SQL
	// statement, say); every send carries it to the sidecar, whose answer, progress and log
	// lines (and the worker's) then name its trace id. "" = the dispatcher starts a new trace.
	TraceParent string
}

// Submit admits a job as PENDING, or rejects it with ErrDisabled, ErrNameBusy, ErrDatasetQuota,
// ErrTotalQuota, ErrInvalidJob or ErrJobExists (and stores nothing).
func (d *Dispatcher) Submit(ctx context.Context, r Request) (Job, error) {
	if !d.enabled.Load() {
		return Job{}, ErrDisabled
	}
	if err := ctx.Err(); err != nil {
		return Job{}, err
	}
	j, err := d.newJob(r)
	if err != nil {
		return Job{}, err
	}
	if err := d.insert(&j); err != nil {
		return Job{}, err
	}
	d.log.Info("job admitted", "job", j.ID, "op", j.Op, "index", j.Index.Name)
	d.kickRound()
	return j, nil
}

// insert admits new job j (admit) and stores it, in one transaction.
func (d *Dispatcher) insert(j *Job) error {
	return d.store.Update(func(tx Tx) error {
		if _, err := tx.Get(j.ID); err == nil {
			return fmt.Errorf("%w: %s", ErrJobExists, j.ID)
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		if err := d.admit(tx, j); err != nil {
			return err
		}
		return tx.Put(j)
	})
}

func (d *Dispatcher) newJob(r Request) (Job, error) {
	if r.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return Job{}, err
		}
		r.ID = id.String()
	}
	if r.TraceParent == "" {
		r.TraceParent = newTraceParent()
	}
	m := rpc.Mutation{
		JobID: r.ID, Dataset: r.Dataset, PinnedVersion: r.AdmittedVersion, Op: r.Op, Index: r.Index,
		IfNotExists: r.IfNotExists, IfExists: r.IfExists, Schema: r.Schema, Limits: r.Limits, Fault: r.Fault,
		Engine: r.Engine, TraceParent: r.TraceParent,
	}
	if err := m.Validate(); err != nil {
		return Job{}, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if r.ExecuteDeadline < 0 {
		return Job{}, fmt.Errorf("%w: negative execute deadline", ErrInvalidJob)
	}
	now := d.cfg.Now()
	j := Job{
		ID: r.ID, Dataset: r.Dataset, Op: r.Op, Index: r.Index, AdmittedVersion: r.AdmittedVersion,
		IfNotExists: r.IfNotExists, IfExists: r.IfExists, Schema: r.Schema, Limits: r.Limits,
		Fault: r.Fault, Engine: r.Engine, TraceParent: r.TraceParent, ExecuteDeadline: r.ExecuteDeadline, State: StatePending, SlotHeld: true,
		Refresh: RefreshNotRequired, Created: now,
	}
	j.record(now, EventSubmit, "", "")
	return j, nil
}

// admit checks the same-name fence and the quotas against the active jobs.
func (d *Dispatcher) admit(tx Tx, j *Job) error {
	var total, perDataset int
	name, ds := j.NameKey(), j.DatasetKey()
	err := tx.Active(func(o Job) error {
		if o.SlotHeld && o.NameKey() == name {
			return fmt.Errorf("%w: job %s (%s) holds %q", ErrNameBusy, o.ID, o.State, o.Index.Name)
		}
		if o.Unresolved() && o.Parent == "" { // a segmented job counts once, not per step
			total++
			if o.DatasetKey() == ds {
				perDataset++
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case perDataset >= d.cfg.MaxUnresolvedPerDataset:
		return fmt.Errorf("%w: %d unresolved on %s", ErrDatasetQuota, perDataset, j.Dataset.Path)
	case total >= d.cfg.MaxUnresolved:
		return fmt.Errorf("%w: %d unresolved", ErrTotalQuota, total)
	}
	return nil
}

// Get returns the job with id.
func (d *Dispatcher) Get(id string) (Job, error) { return Get(d.store, id) }

// List returns the jobs selected by opts.
func (d *Dispatcher) List(opts ListOptions) ([]Job, error) { return List(d.store, opts) }

// Release force-releases a stuck job (see ForceRelease): who and why are recorded in its history.
func (d *Dispatcher) Release(id, by, reason string) (Job, error) {
	j, err := ForceRelease(d.store, id, by, reason, d.cfg.Now())
	if err == nil {
		d.log.Warn("job force-released", "job", id, "by", by, "reason", reason)
	}
	return j, err
}

// InFlight returns the number of sends outstanding per sidecar name.
func (d *Dispatcher) InFlight() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for _, c := range d.inflight {
		out[c.sidecar.name]++
	}
	return out
}

// Run starts a round every Config.Interval (and soon after a submit or an answer) until ctx is
// done or the dispatcher is closed.
func (d *Dispatcher) Run(ctx context.Context) error {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := d.Round(ctx); err != nil {
			if errors.Is(err, ErrClosed) {
				return err
			}
			d.log.Error("round failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.ctx.Done():
			return ErrClosed
		case <-t.C:
		case <-d.kick:
		}
	}
}

func (d *Dispatcher) kickRound() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Close abandons the calls in flight without journaling anything for them (as a crash would: their
// jobs stay RUNNING, and a dispatcher reopened on the store never sends them again), waits for
// the round and the senders to stop, and leaves the store open.
func (d *Dispatcher) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.cancel()
	d.roundMu.Lock()
	defer d.roundMu.Unlock()
	d.wg.Wait()
	return nil
}

// Wait returns job id once its outcome is final: COMMITTED, NOT_COMMITTED, or UNKNOWN and
// force-released (its slot may still be held, and its refresh pending). It watches the store
// instead of polling: etcd watches on a shared store, an in-process notification on bbolt.
func (d *Dispatcher) Wait(ctx context.Context, id string) (Job, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed, err := d.store.Watch(ctx, id)
	if err != nil {
		return Job{}, err
	}
	for {
		j, err := d.Get(id)
		if err != nil {
			return j, err
		}
		if j.State.Settled() || (j.State == StateUnknown && j.Released) {
			return j, nil
		}
		select {
		case _, ok := <-changed:
			if !ok {
				if err := ctx.Err(); err != nil {
					return j, err
				}
				return j, ErrClosed
			}
		case <-ctx.Done():
			return j, ctx.Err()
		}
	}
}

// ListOptions select jobs.
type ListOptions struct {
	// State keeps only jobs in this state ("" = any).
	State State
	// Active keeps only jobs a round still acts on (unresolved, or a refresh pending).
	Active bool
	// Limit keeps at most this many, the newest (0 = all).
	Limit int
}

// List returns the jobs of s selected by opts, oldest first.
func List(s Store, opts ListOptions) ([]Job, error) {
	var out []Job
	err := s.View(func(tx Tx) error {
		each := tx.All
		if opts.Active {
			each = tx.Active
		}
		return each(func(j Job) error {
			if opts.State == "" || j.State == opts.State {
				out = append(out, j)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Created.Before(out[b].Created) })
	if opts.Limit > 0 && len(out) > opts.Limit {
		out = out[len(out)-opts.Limit:]
	}
	return out, nil
}

// Get returns the job with id from s.
func Get(s Store, id string) (Job, error) {
	var j Job
	err := s.View(func(tx Tx) (err error) {
		j, err = tx.Get(id)
		return err
	})
	return j, err
}

// ForceRelease is the audited way out for a stuck job: an UNKNOWN job not yet released, or a
// settled one whose slot is still held (its sidecar is alive but will not answer). It frees the
// slot, stops the resolve driver, and records by, reason and at in the history. The outcome
// itself is never changed: an UNKNOWN job stays UNKNOWN.
func ForceRelease(s Store, id, by, reason string, at time.Time) (Job, error) {
	if by == "" || reason == "" {
		return Job{}, ErrAuditRequired
	}
	var j Job
	err := s.Update(func(tx Tx) (err error) {
		if j, err = tx.Get(id); err != nil {
			return err
		}
		stuck := (j.State == StateUnknown && !j.Released) || (j.State.Settled() && j.SlotHeld)
		if !stuck {
			return fmt.Errorf("%w: job %s is %s (slot held: %t, released: %t)", ErrNotReleasable, id, j.State, j.SlotHeld, j.Released)
		}
		j.SlotHeld = false
		j.Released = j.State == StateUnknown || j.Released
		j.record(at, EventForceRelease, j.State, reason)
		j.History[len(j.History)-1].By = by
		return tx.Put(&j)
	})
	return j, err
}

// newTraceParent starts a W3C trace for a job the host gave none: a random trace id and parent
// id, sampled.
func newTraceParent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("00-%x-%x-01", b[:16], b[16:])
}
