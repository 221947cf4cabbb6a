package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cba1309c/steward/rpc"
)

// RoundStats counts what one round did.
type RoundStats struct {
	Unsent     int // jobs journaled RUNNING that this dispatcher never sent: NOT_COMMITTED, slot released
	Expired    int // RUNNING jobs turned UNKNOWN by the deadline sweep
	Freed      int // slots released because the recorded sidecar epoch is gone (or, on a shared store, its node)
	Resolved   int // UNKNOWN jobs settled by index.resolve
	Refreshed  int // refresh hook runs (DONE or FAILED)
	Dispatched int // sends started
	Pruned     int // finished jobs deleted (see Config.PruneAge)
}

// Round runs one dispatcher round, in a fixed order: unsent sweep (sends journaled and never made,
// unsent.go), journaled cancels of this dispatcher's sidecars' jobs (cancel.go), deadline sweep, possible-live sweep, resolve driver, vanished-node sweep (shared
// store only), refresh driver, PENDING dispatch, and at most every Config.PruneInterval the
// pruning of finished jobs. Sends are started and not waited for; their answers
// are journaled when they arrive. A round with nothing to do writes nothing to the store.
func (d *Dispatcher) Round(ctx context.Context) (RoundStats, error) {
	d.roundMu.Lock()
	defer d.roundMu.Unlock()
	var st RoundStats
	if d.ctx.Err() != nil {
		return st, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.ctx, cancel)() // Close cuts a round's resolve and refresh calls short
	steps := []func(context.Context, *RoundStats) error{
		d.sweepUnsent, d.driveCancels, d.sweepDeadlines, d.sweepEpochs, d.driveResolve, d.sweepNodes, d.driveRefresh, d.driveSegmented, d.dispatchPending, d.prune,
	}
	for _, step := range steps {
		if err := step(ctx, &st); err != nil {
			return st, err
		}
	}
	return st, nil
}

// active snapshots the jobs a round may act on, in id order.
func (d *Dispatcher) active(keep func(*Job) bool) ([]Job, error) {
	var out []Job
	err := d.store.View(func(tx Tx) error {
		return tx.Active(func(j Job) error {
			if keep(&j) {
				out = append(out, j)
			}
			return nil
		})
	})
	return out, err
}

var errNoChange = errors.New("no change")

// modify re-reads job id and applies fn in one transaction, committed only when fn reports a
// change: a decision taken on a snapshot is always rechecked against the stored record.
func (d *Dispatcher) modify(id string, fn func(j *Job) bool) (Job, bool, error) {
	var j Job
	err := d.store.Update(func(tx Tx) (err error) {
		if j, err = tx.Get(id); err != nil {
			return err
		}
		if !fn(&j) {
			return errNoChange
		}
		return tx.Put(&j)
	})
	if errors.Is(err, errNoChange) {
		return j, false, nil
	}
	return j, err == nil, err
}

// sweepDeadlines turns RUNNING jobs past their deadline into UNKNOWN. The slot stays held: a
// deadline bounds the wait, it proves nothing about the worker.
func (d *Dispatcher) sweepDeadlines(_ context.Context, st *RoundStats) error {
	now := d.cfg.Now()
	jobs, err := d.active(func(j *Job) bool { return j.State == StateRunning && j.InvocationID != "" && !now.Before(j.Deadline) })
	for _, j := range jobs {
		_, changed, err := d.modify(j.ID, func(j *Job) bool {
			if j.State != StateRunning || j.InvocationID == "" || now.Before(j.Deadline) {
				return false
			}
			j.State = StateUnknown
			j.record(now, EventDeadline, StateRunning, "no answer by the deadline")
			return true
		})
		if err != nil {
			return err
		}
		if changed {
			st.Expired++
			d.log.Warn("job deadline passed without an answer", "job", j.ID, "invocation", j.InvocationID)
		}
	}
	return err
}

// epochGone reports whether the sidecar epoch a job was sent to is provably gone: the handle it
// was sent through has exited or now reports another epoch, or (when this dispatcher holds no
// handle for that epoch, e.g. after a restart) the sidecar added under the same name has another
// epoch. A handle replaced while still running proves nothing; neither does no handle at all.
func (d *Dispatcher) epochGone(name, epoch string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.byEpoch[epoch]; e != nil {
		return exited(e.sc) || e.sc.Epoch() != epoch
	}
	cur := d.sidecars[name]
	return cur != nil && cur.epoch != epoch
}

// sweepEpochs releases the slots of jobs whose recorded sidecar epoch is gone: that sidecar's
// workers are dead. A RUNNING job there can never be answered, so it becomes UNKNOWN.
func (d *Dispatcher) sweepEpochs(_ context.Context, st *RoundStats) error {
	// On a shared store only the node that sent a job holds handles that prove its epoch gone
	// (sidecar names are per node); other nodes wait for sweepNodes.
	node := d.nodeName()
	jobs, err := d.active(func(j *Job) bool { return j.SlotHeld && j.Epoch != "" && j.Node == node })
	for _, j := range jobs {
		if !d.epochGone(j.Sidecar, j.Epoch) {
			continue
		}
		now := d.cfg.Now()
		_, changed, err := d.modify(j.ID, func(x *Job) bool {
			if !x.SlotHeld || x.Epoch != j.Epoch {
				return false
			}
			from := x.State
			if x.State == StateRunning {
				x.State = StateUnknown
			}
			x.SlotHeld = false
			x.record(now, EventEpochGone, from, fmt.Sprintf("sidecar %s epoch %s is gone", x.Sidecar, x.Epoch))
			return true
		})
		if err != nil {
			return err
		}
		if changed {
			st.Freed++
			d.log.Info("slot released: sidecar epoch gone", "job", j.ID, "epoch", j.Epoch)
		}
	}
	return err
}

func (d *Dispatcher) nodeName() string {
	if d.cluster == nil {
		return ""
	}
	n, _ := d.cluster.Node()
	return n
}

// sweepNodes (shared store only) releases the slots of settled jobs whose sidecar epoch no live
// node announces any more. Lease expiry is no proof that the workers are dead; the settled outcome
// is: index.resolve fenced the commit slot (or found it taken), so the worker can never commit,
// and the name is safe to reuse. A RUNNING job of a vanished node first waits for its deadline
// (UNKNOWN), then for index.resolve through any live node's sidecar (driveResolve).
func (d *Dispatcher) sweepNodes(_ context.Context, st *RoundStats) error {
	if d.cluster == nil {
		return nil
	}
	node := d.nodeName()
	jobs, err := d.active(func(j *Job) bool { return j.SlotHeld && j.Epoch != "" && j.State.Settled() })
	for _, j := range jobs {
		if j.Node == node && d.holdsEpoch(j.Epoch) {
			continue // this node's own sidecar: its answer or its exit frees the slot
		}
		live, lerr := d.cluster.EpochLive(j.Epoch)
		if lerr != nil {
			return lerr
		}
		if live {
			continue
		}
		now := d.cfg.Now()
		_, changed, merr := d.modify(j.ID, func(x *Job) bool {
			if !x.SlotHeld || x.Epoch != j.Epoch || !x.State.Settled() {
				return false
			}
			x.SlotHeld = false
			x.record(now, EventNodeGone, x.State, fmt.Sprintf("%s: no live node announces sidecar %s epoch %s (node %s)",
				x.State, x.Sidecar, x.Epoch, x.Node))
			return true
		})
		if merr != nil {
			return merr
		}
		if changed {
			st.Freed++
			d.log.Info("slot released: node gone and outcome settled", "job", j.ID, "node", j.Node, "epoch", j.Epoch)
		}
	}
	return err
}

func (d *Dispatcher) holdsEpoch(epoch string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.byEpoch[epoch]
	return e != nil && !exited(e.sc)
}

// driveResolve settles UNKNOWN jobs through index.resolve on any live sidecar. Storage being
// unreachable, or any failure of the call, leaves the job UNKNOWN and writes nothing.
func (d *Dispatcher) driveResolve(ctx context.Context, st *RoundStats) error {
	now := d.cfg.Now()
	jobs, err := d.active(func(j *Job) bool {
		return j.State == StateUnknown && !j.Released && j.InvocationID != ""
	})
	tried := 0
	for _, j := range jobs {
		if tried >= d.cfg.MaxPerRound {
			break
		}
		if !d.resolveDue(j.ID, now) {
			continue
		}
		e := d.pick(false)
		if e == nil {
			break
		}
		if g := SettleGuarantee(e.sc, j.Engine); !Resolvable(g) {
			// Never silently weaker: an engine without a fence (or one this sidecar does not
			// list) cannot settle UNKNOWN; the job stays UNKNOWN for a person (Release).
			d.log.Warn("job stays UNKNOWN: its engine cannot settle it through index.resolve", "job", j.ID,
				"invocation", j.InvocationID, "engine", j.Engine, "settle", g)
			continue
		}
		tried++
		res, err := d.resolve(ctx, e, j)
		if err != nil {
			d.log.Info("resolve did not settle", "job", j.ID, "invocation", j.InvocationID, "error", err)
			continue
		}
		if err := d.applyResolution(j, res, st); err != nil {
			return err
		}
	}
	return err
}

func (d *Dispatcher) resolveDue(id string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if last, ok := d.resolveAt[id]; ok && now.Sub(last) < d.cfg.ResolveRetryInterval {
		return false
	}
	d.resolveAt[id] = now
	return true
}

func (d *Dispatcher) resolve(ctx context.Context, e *sidecarEntry, j Job) (rpc.ResolveResult, error) {
	p := rpc.ResolveParams{InvocationID: j.InvocationID, Dataset: j.Dataset, PinnedVersion: j.AdmittedVersion, Engine: j.Engine}
	if d.cfg.Credentials != nil {
		c, err := d.cfg.Credentials(ctx, j.Dataset)
		if err != nil {
			return rpc.ResolveResult{}, err
		}
		p.Credentials = c
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ResolveTimeout)
	defer cancel()
	return e.sc.Resolve(ctx, p)
}

func (d *Dispatcher) applyResolution(j Job, res rpc.ResolveResult, st *RoundStats) error {
	var to State
	switch res.Outcome {
	case rpc.OutcomeCommitted:
		to = StateCommitted
	case rpc.OutcomeNotCommitted:
		to = StateNotCommitted
	default:
		return nil // still UNKNOWN (storage unreachable): try again later
	}
	now := d.cfg.Now()
	_, changed, err := d.modify(j.ID, func(x *Job) bool {
		if x.State != StateUnknown || x.InvocationID != j.InvocationID {
			return false
		}
		x.State = to
		x.Resolution = &Resolution{At: now, Outcome: res.Outcome, Version: res.Version, Fenced: res.Fenced, Reason: res.Reason}
		if to == StateCommitted {
			d.requireRefresh(x)
		}
		x.record(now, EventResolve, StateUnknown, fmt.Sprintf("slot %d: %s", res.Version, res.Outcome))
		return true
	})
	if changed {
		st.Resolved++
		d.mu.Lock()
		delete(d.resolveAt, j.ID)
		d.mu.Unlock()
		d.log.Info("job resolved", "job", j.ID, "outcome", to)
	}
	return err
}

// requireRefresh schedules the refresh hook, when there is one and it is not already scheduled.
func (d *Dispatcher) requireRefresh(j *Job) {
	if j.Parent != "" {
		return // a step: its segmented job asks for the refresh once it is COMMITTED
	}
	if d.cfg.Refresh != nil && j.Refresh != RefreshRequired && j.Refresh != RefreshRunning {
		j.Refresh = RefreshRequired
	}
}

// driveRefresh runs the refresh hook: a REQUIRED refresh at once, a FAILED one (or one found
// RUNNING, interrupted by a restart) at most once per RefreshRetryInterval.
func (d *Dispatcher) driveRefresh(ctx context.Context, st *RoundStats) error {
	if d.cfg.Refresh == nil {
		return nil
	}
	now := d.cfg.Now()
	due := func(j *Job) bool {
		switch j.Refresh {
		case RefreshRequired:
			return true
		case RefreshFailed, RefreshRunning:
			return now.Sub(j.RefreshAttemptAt) >= d.cfg.RefreshRetryInterval
		}
		return false
	}
	jobs, err := d.active(due)
	for _, j := range jobs {
		if err := d.refresh(ctx, j.ID, due); err != nil {
			return err
		}
		st.Refreshed++
	}
	return err
}

func (d *Dispatcher) refresh(ctx context.Context, id string, due func(*Job) bool) error {
	now := d.cfg.Now()
	j, changed, err := d.modify(id, func(j *Job) bool {
		if !due(j) {
			return false
		}
		from := j.State
		j.Refresh, j.RefreshAttemptAt = RefreshRunning, now
		j.RefreshAttempts++
		j.record(now, EventRefresh, from, fmt.Sprintf("attempt %d", j.RefreshAttempts))
		return true
	})
	if err != nil || !changed {
		return err
	}
	hctx, cancel := context.WithTimeout(ctx, d.cfg.RefreshTimeout)
	herr := d.cfg.Refresh(hctx, j)
	cancel()
	done := d.cfg.Now()
	_, _, err = d.modify(id, func(x *Job) bool {
		if x.Refresh != RefreshRunning || x.RefreshAttempts != j.RefreshAttempts {
			return false
		}
		x.Refresh, x.RefreshError = RefreshDone, ""
		detail := "done"
		if herr != nil {
			x.Refresh, x.RefreshError = RefreshFailed, herr.Error()
			detail = "failed: " + herr.Error()
		}
		x.record(done, EventRefresh, x.State, detail)
		return true
	})
	if herr != nil {
		d.log.Warn("refresh failed", "job", id, "error", herr)
	}
	return err
}
