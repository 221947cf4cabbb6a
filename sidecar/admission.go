package sidecar

import (
	"context"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
)

// openBudget sizes the memory budget: Config.MemoryBudget, else budgetDefault over the memory
// the sidecar may use (its cgroup's limit, else MemTotal).
func (s *Server) openBudget() {
	worker := s.cfg.Isolation.MemoryLimit
	total, from := s.cfg.MemoryBudget, budgetSource{source: "flag"}
	if total <= 0 {
		c, err := isolation.OwnMemoryCeiling()
		if err != nil {
			// Off Linux nothing is launched; a reading that fails on Linux admits one worker at a time.
			c = isolation.MemoryCeiling{Bytes: worker, Source: isolation.CeilingMachine, Detail: "unreadable: " + err.Error()}
		}
		total, from = budgetDefault(c, worker)
	}
	s.budget, s.budgetFrom = newMemBudget(total), from
	if total < worker {
		s.log.Warn("the memory budget is below --worker-memory: calls without a lower limits.memory_bytes are refused, no spare is started",
			"memory_budget", total, "worker_memory", worker)
	}
	s.metrics.budgetGauges(s.budget)
}

// overBudget refuses at receive a call whose own memory limit exceeds the whole budget.
func (s *Server) overBudget(o launchOptions) error {
	need := s.memoryOf(o)
	if s.budget.fits(need) {
		return nil
	}
	return &errOverBudget{need: need, total: s.budget.total, worker: s.cfg.Isolation.MemoryLimit}
}

// awaitBudget waits for memory bytes of budget for j's domain, until j's run-until time (then j
// gets the deadline-lapsed answer, as from the queue), an index.cancel (the queued cancel's
// answer: nothing was launched) or the sidecar stops (the shutting-down answer). ok is false
// with the answer to give.
func (s *Server) awaitBudget(j *job, memory int64) (g *grant, res rpc.MutateResult, ok bool) {
	ctx, cancel := context.WithDeadline(context.Background(), j.runUntil)
	defer cancel()
	go func() { // owned by this call: ends with ctx
		select {
		case <-s.stop:
			cancel()
		case <-j.cx.requested: // index.cancel: nothing was launched yet
			cancel()
		case <-ctx.Done():
		}
	}()
	g, err := s.budget.acquire(ctx, memory, j.received)
	switch {
	case err == nil:
		return g, res, true
	case j.cx.isRequested():
		j.cx.byCancel = true
		return nil, cancelledQueued(), false
	case isClosed(s.stop):
		return nil, shuttingDown(), false
	}
	return nil, rpc.MutateResult{Phase: rpc.PhasePreInvocationRejected, Code: rpc.ReasonDeadlineLapsed,
		Message: "the deadline lapsed while waiting for memory budget: it can no longer fund the kill budget"}, false
}

// budgetHello is hello's memory_budget.
func (s *Server) helloBudget() *rpc.MemoryBudget {
	st := s.budget.state()
	return &rpc.MemoryBudget{BudgetBytes: st.total, InUseBytes: st.used, SparesBytes: st.spares, Waiting: st.waiting,
		Source: s.budgetFrom.source, BaseBytes: s.budgetFrom.base, Share: s.budgetFrom.share, Detail: s.budgetFrom.detail}
}
