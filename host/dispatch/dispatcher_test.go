package dispatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/rpc"
)

func TestSubmitRejections(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxUnresolvedPerDataset = 2; c.MaxUnresolved = 3 })
	first := e.submit(fakeRequest("Idx"))
	other := fakeRequest("other")
	other.Dataset.Path = "ds2"
	bad := fakeRequest("x")
	bad.Op = "TRUNCATE"
	for _, tc := range []struct {
		name string
		req  Request
		want error
	}{
		{"same name, other case", fakeRequest("IDX"), ErrNameBusy},
		{"same name, same dataset path spelled differently", func() Request { r := fakeRequest("idx"); r.Dataset.Path = "ds/"; return r }(), ErrNameBusy},
		{"same name, same store spelled differently", func() Request {
			r := fakeRequest("idx")
			r.Dataset.Store.URL = "FILE:" + r.Dataset.Store.URL[len("file:"):] + "/"
			return r
		}(), ErrNameBusy},
		{"invalid op", bad, ErrInvalidJob},
		{"existing id", func() Request { r := fakeRequest("x"); r.ID = first.ID; return r }(), ErrJobExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.d.Submit(context.Background(), tc.req); !errors.Is(err, tc.want) {
				t.Fatalf("Submit = %v, want %v", err, tc.want)
			}
		})
	}
	e.submit(fakeRequest("second"))
	if _, err := e.d.Submit(context.Background(), fakeRequest("third")); !errors.Is(err, ErrDatasetQuota) {
		t.Fatalf("third on one dataset: %v, want ErrDatasetQuota", err)
	}
	e.submit(other)
	other.Index.Name = "other2"
	if _, err := e.d.Submit(context.Background(), other); !errors.Is(err, ErrTotalQuota) {
		t.Fatalf("fourth in total: %v, want ErrTotalQuota", err)
	}
	e.d.SetEnabled(false)
	if _, err := e.d.Submit(context.Background(), fakeRequest("zzz")); !errors.Is(err, ErrDisabled) {
		t.Fatalf("disabled: %v", err)
	}
	e.d.SetEnabled(true)
	// Settling frees the fence and the quota.
	f := newFake()
	e.d.AddSidecar("n1", f)
	e.waitJob(first.ID, "committed", settled)
	e.submit(fakeRequest("IDX"))
}

// TestOutcomesFake drives each classified answer through a dispatcher with a fake sidecar; the
// same cases run against a real sidecar in real_test.go, except the identity mismatch, which a
// correct sidecar cannot produce.
func TestOutcomesFake(t *testing.T) {
	noLeaks(t)
	for _, tc := range []struct {
		name     string
		op       string
		answer   func(f *fakeSidecar, p rpc.MutateParams) (rpc.MutateResult, error)
		want     State
		slotHeld bool
	}{
		{"ok", rpc.OpCreate, func(f *fakeSidecar, p rpc.MutateParams) (rpc.MutateResult, error) { return okAnswer(f, p), nil }, StateCommitted, false},
		{"refused at receive", rpc.OpCreate, func(f *fakeSidecar, p rpc.MutateParams) (rpc.MutateResult, error) {
			return rpc.MutateResult{}, &rpc.Error{Code: rpc.CodeOverloaded}
		}, StateNotCommitted, false},
		{"identity mismatch", rpc.OpCreate, func(f *fakeSidecar, p rpc.MutateParams) (rpc.MutateResult, error) {
			r := okAnswer(f, p)
			r.InvocationID = "someone-else"
			return r, fmt.Errorf("%w: echo differs", host.ErrIdentity)
		}, StateUnknown, true},
		{"indeterminate", rpc.OpCreate, func(f *fakeSidecar, p rpc.MutateParams) (rpc.MutateResult, error) {
			return rpc.MutateResult{Phase: rpc.PhaseIndeterminate, Code: rpc.ReasonWorkerLost, InvocationID: p.InvocationID, Epoch: f.Epoch()}, nil
		}, StateUnknown, false},
		{"connection lost", rpc.OpCreate, func(f *fakeSidecar, p rpc.MutateParams) (rpc.MutateResult, error) {
			return rpc.MutateResult{}, fmt.Errorf("%w: eof", rpc.ErrConnectionLost)
		}, StateUnknown, true},
		{"drop not found", rpc.OpDrop, func(f *fakeSidecar, p rpc.MutateParams) (rpc.MutateResult, error) {
			return rpc.MutateResult{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeNotFound, InvocationID: p.InvocationID, Epoch: f.Epoch()}, nil
		}, StateNotCommitted, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			f := newFake()
			f.setAnswer(func(_ context.Context, p rpc.MutateParams) (rpc.MutateResult, error) { return tc.answer(f, p) })
			e.d.AddSidecar("n1", f)
			r := fakeRequest("idx")
			r.Op = tc.op
			if tc.op == rpc.OpDrop {
				r.Index = rpc.IndexSpec{Name: "idx"}
			}
			j := e.submit(r)
			j = e.waitJob(j.ID, "answered", func(j Job) bool { return j.Result != nil })
			if j.State != tc.want || j.SlotHeld != tc.slotHeld {
				t.Fatalf("state %s slot held %t, want %s %t; history %+v", j.State, j.SlotHeld, tc.want, tc.slotHeld, j.History)
			}
			if f.sent() != 1 {
				t.Fatalf("%d sends", f.sent())
			}
			e.close()
		})
	}
}

func TestDeadlineSweepKeepsSlotAndLateAnswerSettles(t *testing.T) {
	noLeaks(t)
	e := newEnv(t, nil)
	f := newFake()
	release := make(chan struct{})
	f.setAnswer(func(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
		<-release
		return okAnswer(f, p), nil
	})
	e.d.AddSidecar("n1", f)
	j := e.submit(fakeRequest("idx"))
	if st := e.round(); st.Dispatched != 1 {
		t.Fatalf("round: %+v", st)
	}
	e.clock.Advance(2 * time.Minute)
	if st := e.round(); st.Expired != 1 {
		t.Fatalf("round after deadline: %+v", st)
	}
	j = e.job(j.ID)
	if j.State != StateUnknown || !j.SlotHeld {
		t.Fatalf("after deadline: %s held %t", j.State, j.SlotHeld)
	}
	if _, err := e.d.Submit(context.Background(), fakeRequest("IDX")); !errors.Is(err, ErrNameBusy) {
		t.Fatalf("fence after deadline: %v", err)
	}
	close(release)
	j = e.waitJob(j.ID, "settled by the late answer", settled)
	if j.State != StateCommitted || j.SlotHeld || f.sent() != 1 {
		t.Fatalf("late answer: %s held %t sends %d", j.State, j.SlotHeld, f.sent())
	}
}

// hungJob dispatches one job to a fake sidecar that never answers.
func hungJob(t *testing.T) (*env, *fakeSidecar, Job) {
	e := newEnv(t, nil)
	f := newFake()
	f.setAnswer(blockUntilCtx)
	e.d.AddSidecar("n1", f)
	j := e.submit(fakeRequest("idx"))
	if st := e.round(); st.Dispatched != 1 {
		t.Fatalf("round: %+v", st)
	}
	return e, f, j
}

func TestEpochSweep(t *testing.T) {
	noLeaks(t)
	for _, tc := range []struct {
		name string
		gone func(e *env, f *fakeSidecar)
	}{
		{"exited", func(e *env, f *fakeSidecar) { f.exit() }},
		{"handle reports a new epoch", func(e *env, f *fakeSidecar) { f.restart() }},
		{"replaced under the same name, then exited", func(e *env, f *fakeSidecar) {
			e.d.AddSidecar("n1", newFake())
			if st := e.round(); st.Freed != 0 {
				t.Fatalf("freed while the replaced sidecar still runs: %+v", st)
			}
			f.exit()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, f, j := hungJob(t)
			if st := e.round(); st.Freed != 0 {
				t.Fatalf("freed with the epoch alive: %+v", st)
			}
			e.clock.Advance(2 * time.Minute) // the deadline alone frees nothing
			if st := e.round(); st.Freed != 0 || st.Expired != 1 {
				t.Fatalf("deadline round: %+v", st)
			}
			tc.gone(e, f)
			if st := e.round(); st.Freed != 1 {
				t.Fatalf("epoch gone round: %+v", st)
			}
			j = e.job(j.ID)
			if j.State != StateUnknown || j.SlotHeld {
				t.Fatalf("after epoch gone: %s held %t", j.State, j.SlotHeld)
			}
			e.close()
		})
	}
	t.Run("no handle proves nothing", func(t *testing.T) {
		e, _, j := hungJob(t)
		e.reopen() // the new dispatcher has never heard of n1
		e.clock.Advance(2 * time.Minute)
		if st := e.round(); st.Freed != 0 || st.Expired != 1 {
			t.Fatalf("round: %+v", st)
		}
		if j = e.job(j.ID); !j.SlotHeld {
			t.Fatal("slot released without evidence")
		}
		e.d.AddSidecar("n1", newFake()) // n1 is back with a new epoch: the old one is gone
		if st := e.round(); st.Freed != 1 {
			t.Fatalf("round: %+v", st)
		}
		e.close()
	})
}

func TestResolveDriver(t *testing.T) {
	noLeaks(t)
	refreshed := make(chan string, 4)
	e := newEnv(t, func(c *Config) {
		c.Refresh = func(_ context.Context, j Job) error { refreshed <- j.ID; return nil }
	})
	f := newFake()
	f.setAnswer(func(_ context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
		return rpc.MutateResult{Phase: rpc.PhaseIndeterminate, Code: rpc.ReasonWorkerLost, InvocationID: p.InvocationID, Epoch: f.Epoch()}, nil
	})
	e.d.AddSidecar("n1", f)
	j := e.submit(fakeRequest("idx"))
	j = e.waitJob(j.ID, "unknown", func(j Job) bool { return j.Result != nil })
	if j.State != StateUnknown {
		t.Fatalf("state %s", j.State)
	}
	// Storage unavailable: still UNKNOWN, and nothing is written.
	before := fileState(t, e.path)
	for range 3 {
		if st := e.round(); st != (RoundStats{}) {
			t.Fatalf("round with storage down: %+v", st)
		}
	}
	if after := fileState(t, e.path); after != before {
		t.Fatal("a failed resolve wrote to the store")
	}
	var got rpc.ResolveParams
	f.setResolve(func(_ context.Context, p rpc.ResolveParams) (rpc.ResolveResult, error) {
		got = p
		return rpc.ResolveResult{InvocationID: p.InvocationID, Outcome: rpc.OutcomeCommitted, Version: p.PinnedVersion + 1}, nil
	})
	if st := e.round(); st.Resolved != 1 || st.Refreshed != 1 {
		t.Fatalf("resolve round: %+v", st)
	}
	j = e.job(j.ID)
	if j.State != StateCommitted || j.Resolution == nil || j.Refresh != RefreshDone || got.InvocationID != j.InvocationID || got.PinnedVersion != 1 {
		t.Fatalf("after resolve: %+v (params %+v)", j, got)
	}
	if id := <-refreshed; id != j.ID {
		t.Fatalf("refreshed %s", id)
	}
}

func TestRefreshRetryThrottled(t *testing.T) {
	noLeaks(t)
	calls := 0
	e := newEnv(t, func(c *Config) {
		c.RefreshRetryInterval = time.Minute
		c.Refresh = func(context.Context, Job) error {
			calls++
			if calls < 3 {
				return errors.New("catalog unavailable")
			}
			return nil
		}
	})
	f := newFake()
	e.d.AddSidecar("n1", f)
	j := e.submit(fakeRequest("idx"))
	j = e.waitJob(j.ID, "refresh attempted", func(j Job) bool { return j.Refresh == RefreshFailed })
	if calls != 1 {
		t.Fatalf("first REQUIRED refresh: %d calls", calls)
	}
	for range 3 {
		e.round()
	}
	if calls != 1 {
		t.Fatalf("retried within the interval: %d calls", calls)
	}
	e.clock.Advance(time.Minute)
	e.round()
	e.round()
	if calls != 2 {
		t.Fatalf("after one interval: %d calls", calls)
	}
	e.clock.Advance(time.Minute)
	e.round()
	if j = e.job(j.ID); j.Refresh != RefreshDone || j.RefreshAttempts != 3 || calls != 3 {
		t.Fatalf("refresh %s attempts %d calls %d", j.Refresh, j.RefreshAttempts, calls)
	}
	if j.Active() {
		t.Fatal("a finished job stays active")
	}
}

func TestCapsAndSeveralSidecars(t *testing.T) {
	noLeaks(t)
	e := newEnv(t, func(c *Config) { c.MaxPerRound = 3; c.MaxInFlightPerSidecar = 2 })
	a, b := newFake(), newFake()
	a.setAnswer(blockUntilCtx)
	b.setAnswer(blockUntilCtx)
	e.d.AddSidecar("a", a)
	e.d.AddSidecar("b", b)
	for i := range 6 {
		e.submit(fakeRequest(fmt.Sprintf("idx%d", i)))
	}
	if st := e.round(); st.Dispatched != 3 {
		t.Fatalf("first round: %+v", st)
	}
	if st := e.round(); st.Dispatched != 1 {
		t.Fatalf("second round: %+v", st)
	}
	if st := e.round(); st.Dispatched != 0 {
		t.Fatalf("third round: %+v", st)
	}
	for start := time.Now(); a.sent()+b.sent() < 4 && time.Since(start) < 5*time.Second; {
		time.Sleep(time.Millisecond) // sends run on their own goroutines
	}
	if a.sent() != 2 || b.sent() != 2 {
		t.Fatalf("sends a=%d b=%d, want 2 each", a.sent(), b.sent())
	}
	if got := e.d.InFlight(); got["a"] != 2 || got["b"] != 2 {
		t.Fatalf("in flight %v", got)
	}
	pending, _ := e.d.List(ListOptions{State: StatePending})
	if len(pending) != 2 {
		t.Fatalf("%d pending", len(pending))
	}
}

func TestRestartNeverResends(t *testing.T) {
	noLeaks(t)
	e := newEnv(t, nil)
	f := newFake()
	f.setAnswer(blockUntilCtx)
	e.d.AddSidecar("n1", f)
	j := e.submit(fakeRequest("idx"))
	e.round()
	e.reopen()
	e.d.AddSidecar("n1", f) // the same sidecar process, still alive
	for range 5 {
		e.round()
	}
	if f.sent() != 1 {
		t.Fatalf("%d sends after restart", f.sent())
	}
	if j = e.job(j.ID); j.State != StateRunning {
		t.Fatalf("state %s", j.State)
	}
	e.clock.Advance(2 * time.Minute)
	e.round()
	if j = e.job(j.ID); j.State != StateUnknown || !j.SlotHeld || f.sent() != 1 {
		t.Fatalf("after deadline: %s held %t sends %d", j.State, j.SlotHeld, f.sent())
	}
}

func TestForceRelease(t *testing.T) {
	noLeaks(t)
	e := newEnv(t, nil)
	f := newFake()
	f.setAnswer(func(context.Context, rpc.MutateParams) (rpc.MutateResult, error) {
		return rpc.MutateResult{}, rpc.ErrConnectionLost
	})
	e.d.AddSidecar("n1", f)
	j := e.submit(fakeRequest("idx"))
	j = e.waitJob(j.ID, "answered", func(j Job) bool { return j.Result != nil })
	if _, err := e.d.Release(j.ID, "", "why"); !errors.Is(err, ErrAuditRequired) {
		t.Fatalf("release without who: %v", err)
	}
	pending := e.submit(fakeRequest("other"))
	if _, err := e.d.Release(pending.ID, "ops", "x"); !errors.Is(err, ErrNotReleasable) && e.job(pending.ID).State != StateCommitted {
		t.Fatalf("release of a non-UNKNOWN job: %v", err)
	}
	if _, err := e.d.Release("nope", "ops", "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("release of a missing job: %v", err)
	}
	j, err := e.d.Release(j.ID, "alice", "storage bucket deleted; ticket OPS-1")
	if err != nil {
		t.Fatal(err)
	}
	last := j.History[len(j.History)-1]
	if j.State != StateUnknown || j.SlotHeld || !j.Released || last.Event != EventForceRelease || last.By != "alice" || last.Detail == "" || last.At.IsZero() {
		t.Fatalf("released job %+v, last %+v", j, last)
	}
	if j.Active() {
		t.Fatal("released job still active")
	}
	e.submit(fakeRequest("IDX"))
	if _, err := e.d.Release(j.ID, "alice", "again"); !errors.Is(err, ErrNotReleasable) {
		t.Fatalf("second release: %v", err)
	}
}

func TestIdleRoundWritesNothingFake(t *testing.T) {
	noLeaks(t)
	e := newEnv(t, func(c *Config) { c.Refresh = func(context.Context, Job) error { return errors.New("down") } })
	f := newFake()
	e.d.AddSidecar("n1", f)
	j := e.submit(fakeRequest("idx"))
	e.waitJob(j.ID, "refresh failed", func(j Job) bool { return j.Refresh == RefreshFailed })
	hung := newFake()
	hung.setAnswer(blockUntilCtx)
	e.d.AddSidecar("n1", hung)
	e.waitJob(e.submit(fakeRequest("b")).ID, "running", stateIs(StateRunning))
	e.submit(fakeRequest("c")) // PENDING: the only sidecar is at its cap... once it is
	e.submit(fakeRequest("d"))
	e.round()
	before := fileState(t, e.path)
	time.Sleep(20 * time.Millisecond) // mtime granularity
	for range 10 {
		if st := e.round(); st != (RoundStats{}) {
			t.Fatalf("idle round did something: %+v", st)
		}
	}
	if after := fileState(t, e.path); after != before {
		t.Fatalf("idle rounds changed the store file: %v → %v", before, after)
	}
}

type fstate struct {
	size  int64
	mtime time.Time
	sum   string
}

func fileState(t *testing.T, path string) fstate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fstate{size: fi.Size(), mtime: fi.ModTime(), sum: fmt.Sprintf("%x", sha(b))}
}

func TestRefreshHistoryBounded(t *testing.T) {
	var j Job
	now := time.Now()
	j.record(now, EventSubmit, "", "")
	j.record(now, EventForceRelease, StateUnknown, "audit")
	for range 100 {
		j.record(now, EventRefresh, StateCommitted, "failed")
	}
	n := 0
	for _, h := range j.History {
		if h.Event == EventRefresh {
			n++
		}
	}
	if n != maxRefreshHistory || j.History[0].Event != EventSubmit || j.History[1].Event != EventForceRelease {
		t.Fatalf("%d refresh entries of %d; first %s %s", n, len(j.History), j.History[0].Event, j.History[1].Event)
	}
}

// TestTraceParentPassed: a job carries the host's traceparent to its send, or a new trace of
// the dispatcher's own; a malformed one is refused at submit.
func TestTraceParentPassed(t *testing.T) {
	noLeaks(t)
	e := newEnv(t, nil)
	f := newFake()
	e.d.AddSidecar("n1", f)
	r := fakeRequest("traced")
	r.TraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	j := e.submit(r)
	e.waitJob(j.ID, "answered", func(j Job) bool { return j.Result != nil })
	r2 := fakeRequest("untraced")
	j2 := e.submit(r2)
	e.waitJob(j2.ID, "answered", func(j Job) bool { return j.Result != nil })
	f.mu.Lock()
	sends := append([]rpc.MutateParams(nil), f.sends...)
	f.mu.Unlock()
	byJob := map[string]string{}
	for _, p := range sends {
		byJob[p.JobID] = p.TraceParent
	}
	if byJob[j.ID] != r.TraceParent {
		t.Fatalf("the host's traceparent was not sent: %q", byJob[j.ID])
	}
	if err := rpc.ValidateTraceParent(byJob[j2.ID]); err != nil || byJob[j2.ID] == byJob[j.ID] {
		t.Fatalf("a job without a traceparent was sent %q (%v)", byJob[j2.ID], err)
	}
	bad := fakeRequest("bad")
	bad.TraceParent = "00-zz-01"
	if _, err := e.d.Submit(context.Background(), bad); !errors.Is(err, ErrInvalidJob) {
		t.Fatalf("malformed traceparent: %v", err)
	}
	e.close()
}
