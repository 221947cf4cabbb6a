package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/cba1309c/steward/storage/slot"
	"github.com/hashicorp/go-hclog"
)

// admitted is what admission learned of a mutation at receive, which its job carries to the
// end: nothing of it is parsed or looked up again.
type admitted struct {
	eng   *engine         // the registered engine that runs it
	store rpc.ParsedStore // the dataset's store, parsed once
	// creds are what the sidecar reaches the store with (credsFor): the call's keys, its own for
	// an allowed s3 store, or none.
	creds  *rpc.Credentials
	limits launchOptions // the call's limits: zero where they do not lower the configured ones
}

// job is one admitted mutation on its way through the queue and an executor.
type job struct {
	p rpc.MutateParams
	admitted
	launched time.Time // when its domain was started (set by invoke)
	received time.Time
	deadline time.Time // local monotonic deadline, converted once at receive
	runUntil time.Time // deadline minus the kill budget: the kill ladder starts here
	peer     *rpc.Peer
	done     chan rpc.MutateResult
	// afterAnswer, set by invoke, releases what the answer need not wait for (the domain's
	// empty namespaces, then its temp dir); the executor calls it once the answer is written.
	afterAnswer func()
	// outcome is what storage says of the invocation once its domain is reaped (invoke's
	// decide): custody settles its tickets by it. Unknown until decided.
	outcome slot.Outcome
	cx      *jobCancel // its side of index.cancel (cancel.go)
}

// killBudget is reserved in front of every deadline so that the answer, which waits for the kill
// ladder, still arrives before the host gives up.
func (s *Server) killBudget() time.Duration {
	return s.cfg.ClockSkew + s.cfg.Isolation.TermGrace + s.cfg.Isolation.ReapBound
}

// mutate admits one mutation at receive and waits for its single answer. Everything refused here
// is a JSON-RPC error: provably never executed. A host that disconnects does not cancel the work.
func (s *Server) mutate(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
	now := time.Now()
	// The absolute wall-clock deadline becomes a monotonic one exactly once; queueing never resets it.
	deadline := now.Add(time.UnixMilli(p.DeadlineUnixMs).Sub(now))
	runnable := deadline.Sub(now) - s.killBudget()
	if runnable < s.cfg.MinRunnable {
		s.metrics.outcome("rejected_at_receive")
		return rpc.MutateResult{}, fmt.Errorf("%w: %v left, kill budget %v + minimal window %v",
			rpc.ErrDeadlineUnfundable, deadline.Sub(now).Round(time.Millisecond), s.killBudget(), s.cfg.MinRunnable)
	}
	if b, err := json.Marshal(p); err != nil || len(b) > workerproto.MaxRequestFrame-1024 {
		s.metrics.outcome("rejected_at_receive")
		return rpc.MutateResult{}, fmt.Errorf("%w: request of %d bytes exceeds the worker frame (%d)", rpc.ErrInvalidParams, len(b), workerproto.MaxRequestFrame-1024)
	}
	if s.iso == nil {
		s.metrics.outcome("rejected_at_receive")
		return rpc.MutateResult{}, fmt.Errorf("%w: %s", rpc.ErrIsolationUnavailable, s.isoReport.Reason)
	}
	eng, err := s.admitEngine(&p)
	if err != nil {
		s.metrics.outcome("rejected_at_receive")
		return rpc.MutateResult{}, err
	}
	if p.Fault != "" && (!s.cfg.TestFaults || !slices.Contains(workerproto.Faults, p.Fault)) {
		s.metrics.outcome("rejected_at_receive")
		return rpc.MutateResult{}, fmt.Errorf("%w: fault %q is not enabled on this sidecar", rpc.ErrInvalidParams, p.Fault)
	}
	if p.Fault != "" && !slices.Contains(eng.decl.Faults, p.Fault) {
		s.metrics.outcome("rejected_at_receive")
		return rpc.MutateResult{}, fmt.Errorf("%w: fault %q is not acted out by engine %s (it declares %v)", rpc.ErrInvalidParams, p.Fault, eng.name, eng.decl.Faults)
	}
	a := admitted{eng: eng, limits: callLimits(s.cfg.Isolation, p.Limits)}
	if err := s.overBudget(a.limits); err != nil {
		s.metrics.outcome("rejected_at_receive")
		return rpc.MutateResult{}, fmt.Errorf("%w: %w", rpc.ErrOverMemoryBudget, err)
	}
	// The params check parsed the store to validate it; this is the parse the job keeps.
	if a.store, err = p.Dataset.Store.Parse(); err != nil {
		s.metrics.outcome("rejected_at_receive")
		return rpc.MutateResult{}, fmt.Errorf("%w: %w", rpc.ErrInvalidParams, err)
	}
	if a.creds, err = s.admitStore(ctx, a.store, p.Credentials); err != nil {
		s.metrics.outcome("rejected_at_receive")
		return rpc.MutateResult{}, err
	}
	if err := s.admitSegments(ctx, &p, a); err != nil {
		s.metrics.outcome("rejected_at_receive")
		return rpc.MutateResult{}, err
	}
	dup, full := s.dedup.admit(p.InvocationID, deadline.Add(s.cfg.DedupRetention))
	if full {
		s.metrics.outcome("rejected_at_receive")
		return rpc.MutateResult{}, fmt.Errorf("%w: invocation-id memory is full", rpc.ErrOverloaded)
	}
	if dup {
		// A resend of an admitted invocation. Refusing it with an error would fabricate "never
		// executed" evidence for the first send, so it is answered as indeterminate.
		s.log.Error("protocol violation: duplicate invocation id; not executed", "invocation", p.InvocationID, "job", p.JobID)
		s.metrics.outcome("indeterminate")
		return rpc.MutateResult{
			Phase: rpc.PhaseIndeterminate, Code: rpc.ReasonDuplicate, InvocationID: p.InvocationID, Epoch: s.epoch,
			Message: "duplicate invocation id: this request was not executed; an earlier one with this id was admitted",
		}, nil
	}
	j := &job{p: p, admitted: a, received: now, deadline: deadline, runUntil: deadline.Add(-s.killBudget()),
		peer: rpc.PeerFrom(ctx), done: make(chan rpc.MutateResult, 1), cx: newJobCancel()}
	s.cancels.add(j)
	if err := s.enqueue(j); err != nil {
		s.cancels.drop(p.InvocationID)
		s.dedup.forget(p.InvocationID)
		s.metrics.outcome("rejected_at_receive")
		return rpc.MutateResult{}, err
	}
	return <-j.done, nil
}

// enqueue admits j to the queue, or refuses it (never enqueued, so never executed).
func (s *Server) enqueue(j *job) error {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if s.qclosed {
		return fmt.Errorf("%w: %s", rpc.ErrShuttingDown, s.stopReason())
	}
	select {
	case s.queue <- j:
		s.metrics.queueDepth.Inc()
		return nil
	default:
		return fmt.Errorf("%w: receive queue full (%d)", rpc.ErrOverloaded, s.cfg.QueueCapacity)
	}
}

// closeQueue ends admission and answers every queued job at once: none of them was launched, so
// each gets PRE_INVOCATION_REJECTED -7 now rather than when an executor would have freed up (or
// never, once the shutdown grace ran out). Executors racing for the same jobs answer them alike.
func (s *Server) closeQueue() {
	s.qmu.Lock()
	if !s.qclosed {
		s.qclosed = true
		close(s.queue)
	}
	s.qmu.Unlock()
	for j := range s.queue {
		if j.cx.take() { // else a cancel answered it (and counted it out of the queue)
			s.metrics.queueDepth.Dec()
			s.answer(j, shuttingDown())
		}
	}
}

func shuttingDown() rpc.MutateResult {
	return rpc.MutateResult{Phase: rpc.PhasePreInvocationRejected, Code: rpc.ReasonShuttingDown,
		Message: "the sidecar began shutting down before the worker launched"}
}

// answer settles the job's custody from its answer, records it for index.cancel and hands it to
// the waiting call.
func (s *Server) answer(j *job, res rpc.MutateResult) {
	res.InvocationID, res.Epoch, res.TraceParent = j.p.InvocationID, s.epoch, j.p.TraceParent
	s.settleSegments(j, &res)
	s.settleCustody(j)
	s.cancels.finish(j, &res)
	s.metrics.observeMutation(res, time.Since(j.received))
	j.done <- res
}

// executor runs queued jobs one at a time; Executors of them run side by side. It returns once
// the queue is closed and drained (Shutdown), discarding its unused spare.
//
// Each executor keeps exactly one spare worker started ahead of demand (docs/PROTOCOL.md §3.4):
// a fresh domain per invocation, as always, but its exec and init are paid between jobs instead
// of inside one. A job refused at dequeue leaves the spare for the next one; an idle spare of an
// engine the calls have left is replaced.
func (s *Server) executor() {
	defer s.executors.Done()
	var spare *worker
	defer func() { s.spares.drop(spare) }()
	for {
		// A spare of an engine the calls have left (another executor's call, or this one's) would
		// only be discarded by the next call, a cold start: it is replaced now.
		if spare != nil && (s.spares.stale(spare) || !s.spares.isIdle(spare)) { // or retired for budget
			s.spares.drop(spare)
			spare = nil
		}
		if spare == nil {
			spare = s.spares.start(len(s.queue) == 0) // nil once the sidecar stops
		}
		var j *job
		select {
		case <-s.spares.movedCh():
			continue // see above
		case next, ok := <-s.queue:
			if !ok {
				return
			}
			j = next
		}
		if !j.cx.take() {
			continue // a cancel answered it while it was queued
		}
		s.metrics.queueDepth.Dec()
		ahead := s.spares.startAhead(j.eng, spare, len(s.queue) > 0, j.p.InvocationID)
		res, used := s.dequeue(j, spare)
		s.answer(j, res)
		if used || j.afterAnswer != nil {
			s.awaitReply(j)
		}
		if used {
			spare = nil
		}
		if ahead != nil {
			if w := <-ahead; spare == nil {
				spare = w
			} else {
				s.spares.drop(w)
			}
		}
		if j.afterAnswer != nil {
			j.afterAnswer()
		}
	}
}

// replyWait bounds how long an executor waits for an answer to be written before it launches
// its next spare: a host that does not read its answers must not hold the pool up.
const replyWait = 100 * time.Millisecond

// awaitReply waits until j's answer has been written to the host (at most replyWait, or until
// the sidecar stops). The spare launched next (fork, exec, the worker's start-up) would
// otherwise compete with the answer's hand-over and write for the 2 cores of a small machine:
// measured, the answer reached the host 0.3–0.6 ms later (median; 3–5 ms at p90). So would the
// destruction of the domain's namespaces, released after it (job.afterAnswer).
func (s *Server) awaitReply(j *job) {
	t := time.NewTimer(replyWait)
	defer t.Stop()
	select {
	case <-j.peer.Replied():
	case <-t.C:
	case <-s.stop:
	}
}

// dequeue re-checks the deadline and the lifecycle, then runs the job; used reports whether the
// spare was consumed (only a job that reaches invoke consumes it).
func (s *Server) dequeue(j *job, spare *worker) (res rpc.MutateResult, used bool) {
	if j.cx.isRequested() {
		// Cancelled as this executor took it: it never launches (cancel.go).
		j.cx.byCancel = true
		return cancelledQueued(), false
	}
	if time.Now().After(j.runUntil) {
		return rpc.MutateResult{Phase: rpc.PhasePreInvocationRejected, Code: rpc.ReasonDeadlineLapsed,
			Message: "the deadline lapsed while queued: it can no longer fund the kill budget"}, false
	}
	if isClosed(s.stop) {
		return shuttingDown(), false
	}
	if r := s.takeSegments(j); r != nil {
		return *r, false
	}
	s.metrics.workers.Inc()
	defer s.metrics.workers.Dec()
	if spare != nil && spare.eng != j.eng {
		// A spare of another engine is left for the next job (or replaced once the spares follow
		// this one's engine, sparePool.stale); this one starts cold.
		return s.invoke(j, nil), false
	}
	return s.invoke(j, spare), true
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// jobLog is the sidecar's logger for one invocation's lines: its id, and its trace id when the
// host sent a traceparent.
func (s *Server) jobLog(j *job) hclog.Logger {
	l := s.log.With("invocation", j.p.InvocationID)
	if id := rpc.TraceID(j.p.TraceParent); id != "" {
		l = l.With("trace_id", id)
	}
	return l
}
