package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/google/uuid"
)

// pick returns the live sidecar with the fewest calls in flight (ties by name); with reserve it
// only considers sidecars under the in-flight cap and takes one of their slots.
func (d *Dispatcher) pick(reserve bool) *sidecarEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	names := make([]string, 0, len(d.sidecars))
	for n := range d.sidecars {
		names = append(names, n)
	}
	sort.Strings(names)
	var best *sidecarEntry
	for _, n := range names {
		e := d.sidecars[n]
		if exited(e.sc) || e.sc.Epoch() != e.epoch || (reserve && e.inflight >= d.cfg.MaxInFlightPerSidecar) {
			continue
		}
		if best == nil || e.inflight < best.inflight {
			best = e
		}
	}
	if best != nil && reserve {
		best.inflight++
	}
	return best
}

// pickNamed reserves a slot of the live sidecar added under name, if it is under its cap.
func (d *Dispatcher) pickNamed(name string) *sidecarEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.sidecars[name]
	if e == nil || exited(e.sc) || e.sc.Epoch() != e.epoch || e.inflight >= d.cfg.MaxInFlightPerSidecar {
		return nil
	}
	e.inflight++
	return e
}

func (d *Dispatcher) unreserve(e *sidecarEntry) {
	d.mu.Lock()
	e.inflight--
	d.mu.Unlock()
}

// dispatchPending sends PENDING jobs, oldest first, under the per-round and per-sidecar caps.
func (d *Dispatcher) dispatchPending(ctx context.Context, st *RoundStats) error {
	// A segmented job's parent is never sent: its steps are (segmented.go).
	jobs, err := d.active(func(j *Job) bool { return j.State == StatePending && j.Segmented == nil })
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if st.Dispatched >= d.cfg.MaxPerRound {
			return nil
		}
		var e *sidecarEntry
		if j.Target != "" {
			if e = d.pickNamed(j.Target); e == nil {
				continue // its sidecar is at its cap or not live here: another round or node
			}
		} else if e = d.pick(true); e == nil {
			return nil // every sidecar is at its cap (or none is live): nothing to write
		}
		sent, err := d.dispatch(ctx, j, e)
		if !sent {
			d.unreserve(e)
		}
		if err != nil {
			return err
		}
		if sent {
			st.Dispatched++
		}
	}
	return nil
}

// dispatch journals RUNNING with a fresh invocation id, the sidecar's epoch and the deadline
// before any I/O, rechecks, and starts the one send. It never sends a job that is not PENDING.
func (d *Dispatcher) dispatch(ctx context.Context, j Job, e *sidecarEntry) (bool, error) {
	var creds *rpc.Credentials
	if d.cfg.Credentials != nil {
		c, err := d.cfg.Credentials(ctx, j.Dataset)
		if err != nil {
			d.log.Warn("no credentials; job stays PENDING", "job", j.ID, "error", err)
			return false, nil
		}
		creds = c
	}
	u, err := uuid.NewV7()
	if err != nil {
		return false, err
	}
	inv := u.String()
	now := d.cfg.Now()
	budget := d.cfg.ExecuteDeadline
	if j.ExecuteDeadline > 0 {
		budget = j.ExecuteDeadline
	}
	deadline := now.Add(budget)
	var node string
	var claim int64
	if d.cluster != nil {
		node, claim = d.cluster.Node()
	}
	// On a shared store this commit also proves that the node still holds claim.
	id := j.ID
	j, changed, err := d.modify(id, func(x *Job) bool {
		if x.State != StatePending || x.Cancel != nil {
			return false // a cancelled job is never sent
		}
		x.State, x.InvocationID, x.Sidecar, x.Epoch, x.Deadline = StateRunning, inv, e.name, e.epoch, deadline
		x.Node, x.Claim = node, claim
		detail := fmt.Sprintf("invocation %s to sidecar %s", inv, e.name)
		if node != "" {
			detail += " on node " + node
		}
		x.record(now, EventDispatch, StatePending, detail)
		return true
	})
	if errors.Is(err, ErrClaimLost) {
		d.log.Warn("node claim lost; job stays PENDING, nothing sent", "job", id, "error", err)
		return false, nil
	}
	if err != nil {
		// A shared store can fail after the commit landed: the record may be RUNNING with inv.
		d.noteUnsent(id, inv, "journaling RUNNING failed: "+err.Error())
		return false, err
	}
	if !changed {
		return false, nil
	}
	// Recheck: the record is ours and the sidecar is the one journaled. Otherwise nothing is sent
	// (never a resend), and the record is journaled as never sent.
	cur, err := Get(d.store, j.ID)
	if err != nil {
		d.noteUnsent(j.ID, inv, "recheck failed: "+err.Error())
		return false, err
	}
	if cur.State != StateRunning || cur.InvocationID != inv || exited(e.sc) || e.sc.Epoch() != e.epoch {
		d.log.Warn("recheck failed after journaling RUNNING; not sending", "job", j.ID, "invocation", inv)
		d.noteUnsent(j.ID, inv, fmt.Sprintf("recheck failed: job %s invocation %s, sidecar %s exited %t", cur.State, cur.InvocationID, e.name, exited(e.sc)))
		return false, nil
	}
	p := rpc.MutateParams{
		InvocationID: inv, JobID: j.ID, DeadlineUnixMs: deadline.UnixMilli(), Dataset: j.Dataset,
		PinnedVersion: j.AdmittedVersion, Op: j.Op, Index: j.Index, IfNotExists: j.IfNotExists,
		IfExists: j.IfExists, Schema: j.Schema, Credentials: creds, Limits: j.Limits, Fault: j.Fault,
		Engine: j.Engine, TraceParent: j.TraceParent, Segment: j.Segment,
	}
	c := &call{jobID: j.ID, invocation: inv, op: j.Op, sidecar: e, budget: budget}
	d.mu.Lock()
	d.inflight[j.ID] = c
	d.wg.Add(1)
	d.mu.Unlock()
	go d.send(c, p)
	d.log.Info("job sent", "job", j.ID, "invocation", inv, "sidecar", e.name)
	return true, nil
}

// send makes the one call and journals its answer. It waits for the answer for as long as the
// connection lives (Close abandons it): a sidecar answers every call it received, once the
// worker's domain is dead, and that answer is what frees the slot. A call that gave up at a bound
// would drop an answer that is merely late — a host stopped (SIGSTOP, a VM pause) past the bound
// finds it buffered on resume — and leave the slot held for as long as the sidecar lives. Past the
// execute deadline plus AnswerGrace (monotonic clock) the job is journaled overdue, once.
func (d *Dispatcher) send(c *call, p rpc.MutateParams) {
	defer d.wg.Done()
	stop := d.watchOverdue(c)
	res, err := c.sidecar.sc.Mutate(d.ctx, p)
	stop()
	abandoned := d.ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
	if !abandoned {
		d.journalAnswer(c, res, err)
	}
	d.mu.Lock()
	delete(d.inflight, c.jobID)
	c.sidecar.inflight--
	d.mu.Unlock()
	d.kickRound()
}

// watchOverdue journals call c overdue once its execute deadline plus AnswerGrace has passed
// without an answer. The returned stop ends the watch and waits for it, so an overdue entry never
// follows the answer's.
func (d *Dispatcher) watchOverdue(c *call) (stop func()) {
	answered, done := make(chan struct{}), make(chan struct{})
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer close(done)
		t := time.NewTimer(c.budget + d.cfg.AnswerGrace)
		defer t.Stop()
		select {
		case <-answered:
		case <-d.ctx.Done():
		case <-t.C:
			d.journalOverdue(c)
		}
	}()
	return func() {
		close(answered)
		<-done
	}
}

// journalOverdue records that call c is still unanswered past its deadline plus AnswerGrace.
// Nothing else changes: the deadline sweep has made the job UNKNOWN, and the slot waits for the
// answer or the sidecar's exit.
func (d *Dispatcher) journalOverdue(c *call) {
	now := d.cfg.Now()
	_, changed, err := d.modify(c.jobID, func(j *Job) bool {
		if j.InvocationID != c.invocation || j.hasEvent(EventAnswer) || j.hasEvent(EventOverdue) {
			return false
		}
		j.record(now, EventOverdue, j.State, fmt.Sprintf("no answer from sidecar %s %s past the deadline; still waiting for it",
			c.sidecar.name, d.cfg.AnswerGrace))
		return true
	})
	switch {
	case err != nil:
		d.log.Warn("cannot journal an overdue call; still waiting for its answer", "job", c.jobID, "invocation", c.invocation, "error", err)
	case changed:
		d.log.Warn("call overdue; still waiting for its answer", "job", c.jobID, "invocation", c.invocation, "sidecar", c.sidecar.name)
	}
}

// answerRetryBound bounds the retries of journaling one answer after the store failed.
const answerRetryBound = time.Minute

// journalAnswer journals the answer to one send, retrying with backoff for up to answerRetryBound
// while the store fails in a way that may pass (a shared store that lost its leader or the member
// it talked to). An answer given up on leaves the job as journaled: RUNNING turns UNKNOWN at its
// deadline and is resolved, but a slot that only the answer could free stays held for as long as
// the sidecar lives. The call keeps its in-flight slot while it retries.
func (d *Dispatcher) journalAnswer(c *call, res rpc.MutateResult, err error) {
	backoff := 50 * time.Millisecond
	giveUp := time.Now().Add(answerRetryBound)
	for attempt := 0; ; attempt++ {
		ferr := d.finish(c, res, err, attempt > 0)
		if ferr == nil {
			return
		}
		final := errors.Is(ferr, ErrClosed) || errors.Is(ferr, ErrCorrupt) || errors.Is(ferr, ErrFormat) ||
			errors.Is(ferr, ErrNotFound) || time.Now().After(giveUp)
		if !final {
			d.log.Warn("cannot journal an answer yet; retrying", "job", c.jobID, "invocation", c.invocation, "error", ferr)
			select {
			case <-d.ctx.Done():
			case <-time.After(backoff):
				backoff = min(2*backoff, 2*time.Second)
				continue
			}
		}
		d.log.Error("cannot journal an answer; the job stays as journaled", "job", c.jobID, "invocation", c.invocation, "error", ferr)
		return
	}
}

// finish journals the answer to one send. On a retry it changes nothing if the job already
// holds an answer (the failed attempt committed after all: a job has one invocation, so any
// answer event is this one's). A late answer (the job already UNKNOWN by its deadline
// or by the epoch sweep) still settles it and, if it proves the worker gone, frees the slot.
func (d *Dispatcher) finish(c *call, res rpc.MutateResult, err error, retry bool) error {
	out := Classify(c.op, res, err)
	now := d.cfg.Now()
	_, _, merr := d.modify(c.jobID, func(j *Job) bool {
		if j.InvocationID != c.invocation || (retry && j.hasEvent(EventAnswer)) {
			return false
		}
		from := j.State
		detail := string(out.State)
		switch {
		case j.State == StateRunning || (j.State == StateUnknown && out.State.Settled()):
			j.State = out.State
		case j.State.Settled() && out.State.Settled() && out.State != j.State:
			detail = fmt.Sprintf("answer says %s but the job was already settled %s; kept", out.State, j.State)
			d.log.Error("answer disagrees with settled outcome", "job", j.ID, "answer", out.State, "settled", j.State)
		}
		j.Result = resultOf(res, err, now)
		if out.WorkerGone {
			j.SlotHeld = false
		}
		advanced := err == nil && res.ObservedLatestVersion > j.AdmittedVersion
		if (j.State == StateCommitted && from != StateCommitted) || advanced {
			d.requireRefresh(j)
		}
		if err != nil {
			detail += ": " + err.Error()
		}
		j.record(now, EventAnswer, from, detail)
		return true
	})
	if merr == nil {
		d.log.Info("job answered", "job", c.jobID, "invocation", c.invocation, "outcome", out.State, "error", err)
	}
	return merr
}
