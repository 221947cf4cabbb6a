package dispatch

import (
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestRealAnswerPastTheCallBound: a sidecar stopped (SIGSTOP) before the send answers only once
// it continues, after the job's deadline plus AnswerGrace: the job is UNKNOWN, journaled overdue,
// settled by index.resolve through another sidecar, and its slot stays held while the stopped
// sidecar lives. The dispatcher is still waiting on the call, so the late answer (a refusal: the
// deadline has passed) is journaled when it comes, and it frees the slot while that sidecar lives
// on. A call that gave up at its bound would drop it, and hold the name for the sidecar's life.
func TestRealAnswerPastTheCallBound(t *testing.T) {
	noLeaks(t)
	late, other := launchSidecar(t), launchSidecar(t)
	data := newRealData(t)
	e := realEnv(t, func(c *Config) { c.AnswerGrace = time.Second })
	e.d.AddSidecar("node-1", late)
	if err := syscall.Kill(late.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = syscall.Kill(late.Pid(), syscall.SIGCONT)
		}
	}()
	path := randID("ds-")
	j := e.submit(createReq(data.make(path, 1), 1, "by_id", "id"))
	if st := e.round(); st.Dispatched != 1 {
		t.Fatalf("round: %+v", st)
	}
	e.d.RemoveSidecar("node-1") // no new work for it; resolve goes through node-2
	e.d.AddSidecar("node-2", other)
	j = e.waitJob(j.ID, "overdue and resolved", func(j Job) bool { return j.hasEvent(EventOverdue) && j.State.Settled() })
	if j.State != StateNotCommitted || !j.SlotHeld || j.Result != nil || j.Resolution == nil {
		t.Fatalf("before the late answer: %s held %t result %+v: %s", j.State, j.SlotHeld, j.Result, historyEvents(j))
	}
	if _, err := e.d.Submit(t.Context(), createReq(data.ref(path), 2, "BY_ID", "id")); !errors.Is(err, ErrNameBusy) {
		t.Fatalf("same name while the call is unanswered: %v", err)
	}
	if err := syscall.Kill(late.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	j = e.waitJob(j.ID, "released by the late answer", func(j Job) bool { return !j.SlotHeld })
	if exited(late) || j.State != StateNotCommitted || j.Result == nil || j.Result.ErrorClass != ErrorRefused ||
		!slices.Contains(splitEvents(j), "answer:NOT_COMMITTED:released") || late.sends.Load() != 1 || other.sends.Load() != 0 {
		t.Fatalf("after the late answer: %s result %+v, sidecar exited %t, sends %d/%d: %s", j.State, j.Result, exited(late),
			late.sends.Load(), other.sends.Load(), historyEvents(j))
	}
	again := e.waitJob(e.submit(createReq(data.ref(path), 1, "BY_ID", "id")).ID, "committed", settled)
	if again.State != StateCommitted || data.latest(path) != 2 {
		t.Fatalf("the same name afterwards: %s at version %d: %s", again.State, data.latest(path), historyEvents(again))
	}
}
