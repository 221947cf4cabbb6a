package sidecar

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/custody"
	"github.com/cba1309c/steward/storage/gateway"
	"github.com/cba1309c/steward/storage/slot"
)

// index.cancel (docs/PROTOCOL.md §3.12) ends one admitted mutation and answers only once the
// mutation's own answer has been sent:
//
//	queued   → the cancel takes the job from the queue (an executor that dequeues it later skips
//	           it) and answers it PRE_INVOCATION_REJECTED -9: nothing was launched.
//	running  → the session stops waiting and the kill ladder runs as at the deadline; once the
//	           domain is reaped and its gateway closed the slot pinned+1 is decided by storage,
//	           and a slot nobody offered a manifest for is fenced: COMMITTED (the commit landed
//	           first: the answer is that commit), NOT_COMMITTED (-9), or, only when storage cannot
//	           be read, INDETERMINATE -24.
//	ended    → the engine had answered, or the deadline or a violation had begun the kill, or the
//	           answer was sent: nothing changes; the reply says what the answer was.
//
// Whoever moves a queued job first (an executor's take, a cancel) owns its answer.

// Job states of a queued job's race between executors and cancels.
const (
	jobQueued    int32 = iota
	jobTaken           // an executor runs it
	jobCancelled       // a cancel answered it in the queue
)

// jobCancel is one job's side of index.cancel.
type jobCancel struct {
	state     atomic.Int32
	requested chan struct{} // closed by the first index.cancel
	once      sync.Once
	// byCancel: the answer is the cancel's (the cancel answered it queued, or killed its worker);
	// set before answer, by the goroutine that builds the answer.
	byCancel bool
	// decided: the job's outcome is storage's verdict (invoke).
	decided bool
	settled chan struct{} // closed by answer once rec is set, before the answer is handed over
	rec     *answerRec
}

func newJobCancel() *jobCancel {
	return &jobCancel{requested: make(chan struct{}), settled: make(chan struct{})}
}

// take moves a queued job to an executor; false if a cancel answered it first.
func (c *jobCancel) take() bool { return c.state.CompareAndSwap(jobQueued, jobTaken) }

func (c *jobCancel) request() { c.once.Do(func() { close(c.requested) }) }

func (c *jobCancel) isRequested() bool { return isClosed(c.requested) }

// answerRec is what the sidecar remembers of an answered mutation, for later cancels.
type answerRec struct {
	state   string // rpc.CancelCancelled or rpc.CancelAnswered
	outcome string
	res     rpc.MutateResult // phase, code, committed version and message (clipped)
	replied <-chan struct{}  // closed once the answer was written to its connection
	expires time.Time
}

// maxRememberedMessage bounds the message an answer record keeps: 65,536 records stay within
// ~25 MB however long the answers' messages.
const maxRememberedMessage = 256

// cancels tracks the admitted mutations by invocation id: the live ones (queued or running) and,
// bounded in number and time, the answered ones.
type cancels struct {
	mu     sync.Mutex
	live   map[string]*job
	done   map[string]*answerRec
	order  []doneEntry // the records in done, oldest answer first
	cap    int
	retain time.Duration
}

type doneEntry struct {
	id  string
	rec *answerRec
}

func newCancels(capacity int, retain time.Duration) *cancels {
	return &cancels{live: map[string]*job{}, done: map[string]*answerRec{}, cap: capacity, retain: retain}
}

func (c *cancels) add(j *job) {
	c.mu.Lock()
	c.live[j.p.InvocationID] = j
	c.mu.Unlock()
}

// drop forgets a job refused before it was enqueued.
func (c *cancels) drop(id string) {
	c.mu.Lock()
	delete(c.live, id)
	c.mu.Unlock()
}

// request marks the live job id cancelled and returns it, or returns the record of its answer.
func (c *cancels) request(id string) (*job, *answerRec) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if j := c.live[id]; j != nil {
		j.cx.request()
		return j, nil
	}
	if r := c.done[id]; r != nil && time.Now().Before(r.expires) {
		return nil, r
	}
	return nil, nil
}

// finish records j's answer res (marking it when a cancel came first) and moves j out of the live
// set: under the same lock as request, so a cancel either finds j live and is named in res, or
// finds the record.
func (c *cancels) finish(j *job, res *rpc.MutateResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if j.cx.isRequested() {
		res.Cancelled = true
		if !j.cx.byCancel {
			res.Message = joinMessage(res.Message, "index.cancel came too late: the invocation had already ended on its own; this is its answer")
		}
	}
	rec := &answerRec{state: rpc.CancelAnswered, outcome: cancelOutcome(j, *res), replied: j.peer.Replied(), expires: time.Now().Add(c.retain),
		res: rpc.MutateResult{Phase: res.Phase, Code: res.Code, CommittedVersion: res.CommittedVersion, Message: engineText(res.Message, maxRememberedMessage)}}
	if j.cx.byCancel {
		rec.state = rpc.CancelCancelled
	}
	id := j.p.InvocationID
	delete(c.live, id)
	c.done[id] = rec
	c.order = append(c.order, doneEntry{id, rec})
	c.evict()
	j.cx.rec = rec
	close(j.cx.settled)
}

// evict drops expired records, and the oldest beyond the capacity. A record is dropped only by
// its own entry: an id used again later has a record of its own.
func (c *cancels) evict() {
	now := time.Now()
	for len(c.order) > 0 {
		e := c.order[0]
		if len(c.order) <= c.cap && now.Before(e.rec.expires) {
			return
		}
		if c.done[e.id] == e.rec {
			delete(c.done, e.id)
		}
		c.order = c.order[1:]
	}
}

// cancelOutcome is whether the invocation committed pinned+1, as far as the sidecar knows.
func cancelOutcome(j *job, res rpc.MutateResult) string {
	switch {
	case res.Phase == rpc.PhasePreInvocationRejected:
		return rpc.OutcomeNotCommitted
	case j.cx.decided:
		return j.outcome.String()
	}
	return rpc.OutcomeUnknown
}

func (r *answerRec) reply(inv string) rpc.CancelResult {
	msg := "the invocation had already ended on its own: the cancel changed nothing"
	if r.state == rpc.CancelCancelled {
		msg = "the cancel ended the invocation"
	}
	return rpc.CancelResult{InvocationID: inv, State: r.state, Outcome: r.outcome, Phase: r.res.Phase, Code: r.res.Code,
		CommittedVersion: r.res.CommittedVersion, Message: msg + "; its answer: " + r.res.Message}
}

// cancel serves index.cancel.
func (s *Server) cancel(ctx context.Context, p rpc.CancelParams) (rpc.CancelResult, error) {
	j, rec := s.cancels.request(p.InvocationID)
	if j != nil {
		if j.cx.state.CompareAndSwap(jobQueued, jobCancelled) {
			// Its place in the queue's channel is freed when an executor skips it; the depth
			// counts the mutations still waiting.
			s.metrics.queueDepth.Dec()
			j.cx.byCancel = true
			s.jobLog(j).Info("cancelled while queued: answered without a launch")
			s.answer(j, cancelledQueued())
		} else {
			s.jobLog(j).Info("cancel requested: ending the running invocation")
		}
		select {
		case <-j.cx.settled:
			rec = j.cx.rec
		case <-ctx.Done():
			return rpc.CancelResult{}, fmt.Errorf("%w: the cancel's connection ended before the mutation's answer", rpc.ErrInternal)
		}
	}
	if rec == nil {
		return rpc.CancelResult{InvocationID: p.InvocationID, State: rpc.CancelUnknownInvocation,
			Message: fmt.Sprintf("this sidecar holds no invocation %s: never admitted here, or answered more than %v ago", p.InvocationID, s.cfg.DedupRetention)}, nil
	}
	// The cancel's reply follows the mutation's answer onto the wire.
	select {
	case <-rec.replied:
	case <-ctx.Done():
		return rpc.CancelResult{}, fmt.Errorf("%w: the cancel's connection ended before the mutation's answer was sent", rpc.ErrInternal)
	}
	return rec.reply(p.InvocationID), nil
}

// settleCancelled makes a cancelled invocation's verdict storage's: a slot nobody offered a
// manifest for is fenced (the gateway's record already says NOT_COMMITTED, and the fence makes
// storage say so too, for any later index.resolve); a claim too young to judge is judged again
// once ClaimGrace has passed, while the deadline allows. What is still Unknown after that is
// storage not answering.
func (s *Server) settleCancelled(j *job, rec gateway.Record, v slot.Verdict, err error) (slot.Verdict, error) {
	if err == nil && rec.Slot == gateway.SlotNone {
		ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
		defer cancel()
		st, oerr := s.openStore(ctx, j.store, j.creds)
		if oerr == nil {
			fv, ferr := custody.Decide(ctx, st, j.p.Dataset.Path, j.p.PinnedVersion, j.p.InvocationID, j.eng.builtin(), false)
			if ferr == nil {
				return fv, nil
			}
			oerr = ferr
		}
		s.jobLog(j).Warn("cancelled invocation not fenced: NOT_COMMITTED stands on its gateway's record", "error", s.sanitize(j, oerr.Error()))
		return v, nil
	}
	for err == nil && v.Outcome == slot.Unknown {
		wait := time.Until(time.UnixMilli(v.Holder.UnixMS).Add(slot.ClaimGrace)) + 50*time.Millisecond
		wait = max(wait, 50*time.Millisecond)
		if time.Until(j.deadline) < wait {
			break
		}
		select {
		case <-time.After(wait):
		case <-s.stop:
			return v, err
		}
		v, err = s.decide(j, rec)
	}
	return v, err
}

// cancelledAnswer is the answer of an invocation whose worker a cancel killed after its request
// was written: what storage says of its slot.
func (s *Server) cancelledAnswer(j *job, res rpc.MutateResult, v slot.Verdict, err error) rpc.MutateResult {
	next := j.p.PinnedVersion + 1
	switch {
	case err == nil && v.Outcome == slot.Committed:
		res.Phase, res.Code, res.CompletionReason, res.CommittedVersion = rpc.PhaseNativeReturn, rpc.NativeOK, rpc.CompletionCommitted, next
		res.ObservedLatestVersion = max(res.ObservedLatestVersion, next)
		res.Message = fmt.Sprintf("index.cancel came too late: the invocation's commit of version %d landed before the cancel killed its worker; this answer is that commit, read back from storage", next)
	case err == nil && v.Outcome == slot.NotCommitted:
		res.Phase, res.Code = rpc.PhasePreInvocationRejected, rpc.ReasonCancelled
		res.Message = fmt.Sprintf("cancelled by index.cancel while running: the worker was killed and reaped before any commit; version %d: %s", next, v.Reason)
	default:
		why := v.Reason
		if err != nil {
			why = s.sanitize(j, err.Error())
		}
		res.Phase, res.Code = rpc.PhaseIndeterminate, rpc.ReasonCancelUnsettled
		res.Message = "index.cancel killed the worker and storage could not be read to settle its commit: " + why + "; settle with index.resolve"
	}
	return res
}

func cancelledQueued() rpc.MutateResult {
	return rpc.MutateResult{Phase: rpc.PhasePreInvocationRejected, Code: rpc.ReasonCancelled,
		Message: "cancelled by index.cancel while queued: the worker was never launched"}
}

func joinMessage(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
