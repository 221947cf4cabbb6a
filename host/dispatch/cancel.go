package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cba1309c/steward/rpc"
)

// A cancel is journaled before anything is sent, in the job's own record, so that any node may
// cancel any job and every node honours it:
//
//	PENDING  → settled NOT_COMMITTED in the same transaction: no node can journal its send any
//	           more (dispatch sends only PENDING jobs), so it is never sent.
//	sent     → the intent is journaled; the node whose sidecar holds the invocation (the one that
//	           sent it, or the same node after a restart) sends index.cancel in its next round
//	           (at once when Dispatcher.Cancel runs there). The job's one answer, journaled as
//	           always, settles it: COMMITTED if the commit landed first, NOT_COMMITTED, or
//	           UNKNOWN (then index.resolve settles it). The sidecar's reply is journaled too.
//	finished → nothing is journaled: the job is returned as it is.

// CancelIntent is a journaled request to cancel a job.
type CancelIntent struct {
	At     time.Time `json:"at"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	// Reply is the sidecar's index.cancel reply, once one came (nil: not sent, or not answered).
	Reply *CancelReply `json:"reply,omitempty"`
}

// CancelReply is a sidecar's index.cancel reply, as journaled.
type CancelReply struct {
	At      time.Time `json:"at"`
	Sidecar string    `json:"sidecar"`
	State   string    `json:"state"`             // rpc.CancelCancelled, rpc.CancelAnswered or rpc.CancelUnknownInvocation
	Outcome string    `json:"outcome,omitempty"` // what the sidecar knew of the slot
	Phase   string    `json:"phase,omitempty"`
	Code    int       `json:"code"`
}

// Events of a cancel.
const (
	EventCancel      = "cancel"       // a cancel was journaled (settling a PENDING job at once)
	EventCancelReply = "cancel-reply" // the sidecar answered the job's index.cancel
)

// canceller is a Sidecar that speaks index.cancel (*host.Client does).
type canceller interface {
	Cancel(ctx context.Context, inv string) (rpc.CancelResult, error)
}

// RequestCancel journals a cancel of job id on s (any store, any node, no dispatcher needed):
// a PENDING job becomes NOT_COMMITTED without a send; a sent job keeps its state and carries the
// intent, which the node driving its sidecar acts on; a finished job, or one already being
// cancelled, is returned unchanged. by and reason are recorded (by defaults to "api").
func RequestCancel(s Store, id, by, reason string, at time.Time) (Job, error) {
	if by == "" {
		by = "api"
	}
	var j Job
	err := s.Update(func(tx Tx) (err error) {
		if j, err = tx.Get(id); err != nil {
			return err
		}
		if j.Cancel != nil || !cancellable(&j) {
			return errNoChange
		}
		j.Cancel = &CancelIntent{At: at, By: by, Reason: reason}
		from := j.State
		detail := fmt.Sprintf("cancel of invocation %s at sidecar %s journaled", j.InvocationID, j.Sidecar)
		if j.State == StatePending {
			j.State, j.SlotHeld = StateNotCommitted, false
			detail = "cancelled before any send: NOT_COMMITTED, never sent"
		}
		if reason != "" {
			detail += ": " + reason
		}
		j.record(at, EventCancel, from, detail)
		j.History[len(j.History)-1].By = by
		return tx.Put(&j)
	})
	if errors.Is(err, errNoChange) {
		err = nil
	}
	return j, err
}

// cancellable: not yet sent, or sent and a worker may still be running for it.
func cancellable(j *Job) bool {
	switch {
	case j.Released:
		return false
	case j.State == StatePending:
		return true
	case j.State == StateRunning, j.State == StateUnknown:
		// A segmented job's parent is never sent: its cancel is carried out on its steps.
		return j.SlotHeld && (j.InvocationID != "" || j.Segmented != nil)
	}
	return false
}

// Cancel journals a cancel of job id (RequestCancel) and, when this dispatcher holds the job's
// sidecar, sends index.cancel at once, without waiting for its reply: Wait returns the job once
// its answer settles it. Any other node holding the sidecar sends it in its next round.
func (d *Dispatcher) Cancel(ctx context.Context, id string) (Job, error) {
	if err := ctx.Err(); err != nil {
		return Job{}, err
	}
	j, err := RequestCancel(d.store, id, "api", "", d.cfg.Now())
	if err != nil {
		return j, err
	}
	if j.Cancel != nil {
		d.log.Info("cancel journaled", "job", id, "state", j.State, "invocation", j.InvocationID)
		d.startCancel(j)
	}
	return j, nil
}

// driveCancels sends index.cancel for the journaled cancels of jobs whose sidecar this dispatcher
// holds and which no reply has answered yet.
func (d *Dispatcher) driveCancels(_ context.Context, _ *RoundStats) error {
	jobs, err := d.active(func(j *Job) bool {
		return j.Cancel != nil && j.Cancel.Reply == nil && j.SlotHeld && j.InvocationID != ""
	})
	for _, j := range jobs {
		d.startCancel(j)
	}
	return err
}

// startCancel sends job j's index.cancel in the background if j's sidecar is one of this
// dispatcher's and no cancel of j is in flight here.
func (d *Dispatcher) startCancel(j Job) {
	if j.Cancel == nil || j.InvocationID == "" || !j.SlotHeld {
		return
	}
	d.mu.Lock()
	e := d.byEpoch[j.Epoch]
	if e == nil || d.closed || d.cancelling[j.ID] {
		d.mu.Unlock()
		return
	}
	c, ok := e.sc.(canceller)
	if !ok || exited(e.sc) {
		d.mu.Unlock()
		return
	}
	d.cancelling[j.ID] = true
	d.wg.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		defer func() {
			d.mu.Lock()
			delete(d.cancelling, j.ID)
			d.mu.Unlock()
		}()
		d.sendCancel(c, e.name, j)
	}()
}

// sendCancel makes one index.cancel call and journals its reply. A reply that the sidecar does not
// know the invocation while this dispatcher's send of it is still in flight is not journaled: the
// cancel overtook its mutation (a sidecar handles requests concurrently), and the next round
// sends it again.
func (d *Dispatcher) sendCancel(c canceller, sidecar string, j Job) {
	res, err := c.Cancel(d.ctx, j.InvocationID)
	if err != nil {
		if d.ctx.Err() == nil {
			d.log.Warn("index.cancel failed; the next round tries again", "job", j.ID, "invocation", j.InvocationID, "error", err)
		}
		return
	}
	d.mu.Lock()
	call := d.inflight[j.ID]
	d.mu.Unlock()
	if res.State == rpc.CancelUnknownInvocation && call != nil && call.invocation == j.InvocationID {
		d.log.Info("index.cancel overtook its mutation; sent again next round", "job", j.ID, "invocation", j.InvocationID)
		return
	}
	// Without a send in flight here (this dispatcher restarted while the sidecar ran on) no answer
	// will be journaled: the reply, which follows the answer, settles the job instead.
	answered := res.State == rpc.CancelCancelled || res.State == rpc.CancelAnswered
	settle := answered && (call == nil || call.invocation != j.InvocationID)
	now := d.cfg.Now()
	_, _, err = d.modify(j.ID, func(x *Job) bool {
		if x.InvocationID != j.InvocationID || x.Cancel == nil || x.Cancel.Reply != nil {
			return false
		}
		x.Cancel.Reply = &CancelReply{At: now, Sidecar: sidecar, State: res.State, Outcome: res.Outcome, Phase: res.Phase, Code: res.Code}
		from := x.State
		if settle && (x.State == StateRunning || x.State == StateUnknown) {
			switch res.Outcome {
			case rpc.OutcomeCommitted:
				x.State = StateCommitted
				d.requireRefresh(x)
			case rpc.OutcomeNotCommitted:
				x.State = StateNotCommitted
			}
			x.SlotHeld = false // the sidecar answered the invocation: its worker is reaped
		}
		x.record(now, EventCancelReply, from, fmt.Sprintf("sidecar %s: %s, outcome %s (answer %s %d)", sidecar, res.State, dash(res.Outcome), dash(res.Phase), res.Code))
		return true
	})
	if err != nil {
		d.log.Warn("cannot journal the cancel's reply; the next round asks again", "job", j.ID, "error", err)
		return
	}
	d.log.Info("job cancel answered", "job", j.ID, "invocation", j.InvocationID, "state", res.State, "outcome", res.Outcome)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
