package dispatch

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
)

// realEnv is a dispatcher on a fresh store with real-sidecar timings.
func realEnv(t *testing.T, mod func(*Config)) *env {
	return newEnv(t, func(c *Config) {
		c.ExecuteDeadline = 6 * time.Second
		c.AnswerGrace = 5 * time.Second
		c.ResolveRetryInterval = 50 * time.Millisecond
		if mod != nil {
			mod(c)
		}
	})
}

// TestRealOutcomes sends one job per classification case to a real sidecar process and checks
// the journaled state, the slot, the typed result, and (for UNKNOWN) the settlement by the resolve
// driver against the real dataset.
func TestRealOutcomes(t *testing.T) {
	noLeaks(t)
	sc := launchSidecar(t)
	data := newRealData(t)
	for _, tc := range []struct {
		name string
		// setup returns the request; it may prepare the dataset.
		setup    func(path string) Request
		deadline time.Duration
		answered State // state journaled from the answer
		slotHeld bool  // slot after the answer
		phase    string
		code     int
		errCode  rpc.Code
		settled  State // after the resolve driver (= answered when already settled)
		refresh  bool  // a refresh ran (commit or observed advance)
		version  int64 // latest dataset version at the end
	}{
		{name: "native OK", setup: func(p string) Request { return createReq(data.make(p, 1), 1, "by_id", "id") },
			answered: StateCommitted, phase: rpc.PhaseNativeReturn, code: rpc.NativeOK, settled: StateCommitted, refresh: true, version: 2},
		{name: "refused at receive: deadline unfundable", deadline: 2 * time.Second,
			setup:    func(p string) Request { return createReq(data.make(p, 1), 1, "by_id", "id") },
			answered: StateNotCommitted, errCode: rpc.CodeDeadlineUnfundable, settled: StateNotCommitted, version: 1},
		{name: "refused at receive: unknown fault", setup: func(p string) Request {
			r := createReq(data.make(p, 1), 1, "by_id", "id")
			r.Fault = "no_such_fault"
			return r
		}, answered: StateNotCommitted, errCode: rpc.CodeInvalidParams, settled: StateNotCommitted, version: 1},
		{name: "pre-invocation rejected: schema contract", setup: func(p string) Request {
			r := createReq(data.make(p, 1), 1, "by_price", "price")
			r.Schema = []rpc.FieldContract{{Name: "price", Type: "string"}}
			return r
		}, answered: StateNotCommitted, phase: rpc.PhasePreInvocationRejected, code: rpc.ReasonSchemaMismatch, settled: StateNotCommitted, version: 1},
		{name: "native COMMIT_CONFLICT: admitted version is stale", setup: func(p string) Request { return createReq(data.make(p, 2), 1, "by_id", "id") },
			answered: StateNotCommitted, phase: rpc.PhaseNativeReturn, code: rpc.NativeCommitConflict, settled: StateNotCommitted, refresh: true, version: 2},
		{name: "native NOT_FOUND on DROP", setup: func(p string) Request {
			return Request{Dataset: data.make(p, 1), AdmittedVersion: 1, Op: rpc.OpDrop, Index: rpc.IndexSpec{Name: "nope"}}
		}, answered: StateNotCommitted, phase: rpc.PhaseNativeReturn, code: rpc.NativeNotFound, settled: StateNotCommitted, version: 1},
		{name: "other native code (INVALID_ARGUMENT) is UNKNOWN, then fenced", setup: func(p string) Request {
			return createReq(data.make(p, 1), 1, "by_missing", "no_such_column")
		}, answered: StateUnknown, phase: rpc.PhaseNativeReturn, code: rpc.NativeInvalidArgument, settled: StateNotCommitted, version: 1},
		{name: "indeterminate: crash after commit", setup: func(p string) Request {
			r := createReq(data.make(p, 1), 1, "by_id", "id")
			r.Fault = "crash_after_commit"
			return r
		}, answered: StateUnknown, phase: rpc.PhaseIndeterminate, code: rpc.ReasonWorkerLost, settled: StateCommitted, refresh: true, version: 2},
		{name: "indeterminate: crash before commit", setup: func(p string) Request {
			r := createReq(data.make(p, 1), 1, "by_id", "id")
			r.Fault = "crash_before_commit"
			return r
		}, answered: StateUnknown, phase: rpc.PhaseIndeterminate, code: rpc.ReasonWorkerLost, settled: StateNotCommitted, version: 1},
		{name: "indeterminate: garbage", setup: func(p string) Request {
			r := createReq(data.make(p, 1), 1, "by_id", "id")
			r.Fault = "garbage"
			return r
		}, answered: StateUnknown, phase: rpc.PhaseIndeterminate, code: rpc.ReasonWorkerLost, settled: StateNotCommitted, version: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var refreshes atomic.Int64
			e := realEnv(t, func(c *Config) {
				if tc.deadline > 0 {
					c.ExecuteDeadline = tc.deadline
				}
				c.Refresh = func(context.Context, Job) error { refreshes.Add(1); return nil }
			})
			e.d.AddSidecar("node-1", sc)
			path := randID("ds-")
			j := e.submit(tc.setup(path))
			sends := sc.sends.Load()
			if st := e.round(); st.Dispatched != 1 {
				t.Fatalf("round: %+v", st)
			}
			// The answer is journaled by the sender, not by a round.
			j = waitStored(t, e, j.ID, func(j Job) bool { return j.Result != nil })
			if j.State != tc.answered || j.SlotHeld != tc.slotHeld {
				t.Fatalf("answered %s slot held %t, want %s %t; result %+v", j.State, j.SlotHeld, tc.answered, tc.slotHeld, j.Result)
			}
			if r := j.Result; r.Phase != tc.phase || r.Code != tc.code || r.ErrorCode != int64(tc.errCode) {
				t.Fatalf("result %+v, want phase %s code %d error code %d", r, tc.phase, tc.code, tc.errCode)
			}
			j = e.waitJob(j.ID, "settled with refresh done", func(j Job) bool { return j.State.Settled() && !j.Active() })
			if j.State != tc.settled {
				t.Fatalf("settled %s, want %s (%s)", j.State, tc.settled, historyEvents(j))
			}
			if tc.answered == StateUnknown && (j.Resolution == nil || j.Resolution.Version != j.AdmittedVersion+1) {
				t.Fatalf("resolution %+v", j.Resolution)
			}
			if got := refreshes.Load() > 0; got != tc.refresh || (tc.refresh && j.Refresh != RefreshDone) {
				t.Fatalf("refresh ran %t (%s), want %t", got, j.Refresh, tc.refresh)
			}
			if v := data.latest(path); v != tc.version {
				t.Fatalf("dataset at version %d, want %d", v, tc.version)
			}
			if n := sc.sends.Load() - sends; n != 1 {
				t.Fatalf("%d sends", n)
			}
			e.close()
		})
	}
}

// waitStored polls the store (running no round) until cond holds.
func waitStored(t *testing.T, e *env, id string, cond func(Job) bool) Job {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j := e.job(id)
		if cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: condition never held: %s", id, historyEvents(j))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRealLostAnswer: the sidecar is stopped (SIGSTOP) before the send, so the request is
// delivered into its pipe and no answer ever comes. At the deadline the job is UNKNOWN with its
// slot held (the sidecar's epoch is alive); the resolve driver settles it through another sidecar
// by fencing; the slot is freed only when the stopped sidecar is killed and its epoch is gone.
func TestRealLostAnswer(t *testing.T) {
	noLeaks(t)
	stopped, other := launchSidecar(t), launchSidecar(t)
	data := newRealData(t)
	e := realEnv(t, nil)
	e.d.AddSidecar("node-1", stopped)
	if err := syscall.Kill(stopped.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	j := e.submit(createReq(data.make("ds", 1), 1, "by_id", "id"))
	if st := e.round(); st.Dispatched != 1 {
		t.Fatalf("round: %+v", st)
	}
	e.d.RemoveSidecar("node-1") // no new work for it; its job's slot stays tied to its epoch
	e.d.AddSidecar("node-2", other)
	// One round turns it UNKNOWN at the deadline and (resolve comes next in the round) settles it.
	j = e.waitJob(j.ID, "resolved", settled)
	if time.Now().Before(j.Deadline) {
		t.Fatalf("settled before the deadline: %s", historyEvents(j))
	}
	for _, want := range []string{"deadline:UNKNOWN:held", "resolve:NOT_COMMITTED:held"} {
		if !slices.Contains(splitEvents(j), want) {
			t.Fatalf("history lacks %s: %s", want, historyEvents(j))
		}
	}
	if j.State != StateNotCommitted || !j.SlotHeld || j.Resolution == nil || !j.Resolution.Fenced {
		t.Fatalf("after resolve: %s held %t %+v", j.State, j.SlotHeld, j.Resolution)
	}
	if _, err := e.d.Submit(context.Background(), createReq(data.ref("ds"), 2, "BY_ID", "id")); !errors.Is(err, ErrNameBusy) {
		t.Fatalf("same name while the slot is held: %v", err)
	}
	for range 3 {
		if st := e.round(); st.Freed != 0 {
			t.Fatalf("slot freed while the epoch lives: %+v", st)
		}
	}
	if err := syscall.Kill(stopped.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j = e.waitJob(j.ID, "slot freed", func(j Job) bool { return !j.SlotHeld })
	if j.State != StateNotCommitted || stopped.sends.Load() != 1 || other.sends.Load() != 0 {
		t.Fatalf("end: %s sends %d/%d: %s", j.State, stopped.sends.Load(), other.sends.Load(), historyEvents(j))
	}
	if data.latest("ds") != 1 || len(data.indices("ds")) != 0 {
		t.Fatalf("dataset: version %d indices %v (want version 1, no index: a fence takes no version)", data.latest("ds"), data.indices("ds"))
	}
	e.submit(createReq(data.ref("ds"), 1, "BY_ID", "id"))
}

// TestRealSidecarKilled: a sidecar SIGKILLed while its worker hangs. The transport failure makes
// the job UNKNOWN with its slot held; a round then frees the slot through the epoch sweep (that
// sidecar's process has exited) and settles the outcome through index.resolve on a new sidecar.
// Admission meanwhile rejects the same name and the quotas with typed errors.
func TestRealSidecarKilled(t *testing.T) {
	noLeaks(t)
	doomed := launchSidecar(t)
	data := newRealData(t)
	e := realEnv(t, func(c *Config) {
		c.ExecuteDeadline = 30 * time.Second
		c.MaxUnresolvedPerDataset, c.MaxUnresolved = 2, 3
	})
	e.d.AddSidecar("node-1", doomed)
	hang := createReq(data.make("ds", 1), 1, "by_id", "id")
	hang.Fault = "hang"
	j := e.submit(hang)
	if st := e.round(); st.Dispatched != 1 {
		t.Fatalf("round: %+v", st)
	}
	// Admission while the job runs: fence, per-dataset quota, total quota.
	if _, err := e.d.Submit(context.Background(), createReq(data.ref("ds"), 1, "By_Id", "id")); !errors.Is(err, ErrNameBusy) {
		t.Fatalf("same name: %v", err)
	}
	e.submit(createReq(data.ref("ds"), 1, "by_name", "name"))
	if _, err := e.d.Submit(context.Background(), createReq(data.ref("ds"), 1, "by_price", "price")); !errors.Is(err, ErrDatasetQuota) {
		t.Fatalf("dataset quota: %v", err)
	}
	e.submit(createReq(data.make("ds2", 1), 1, "by_id", "id"))
	if _, err := e.d.Submit(context.Background(), createReq(data.make("ds3", 1), 1, "by_id", "id")); !errors.Is(err, ErrTotalQuota) {
		t.Fatalf("total quota: %v", err)
	}
	e.d.RemoveSidecar("node-1") // keep the two queued jobs PENDING until the new sidecar comes

	time.Sleep(500 * time.Millisecond) // let the worker start hanging
	if err := syscall.Kill(doomed.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j = waitStored(t, e, j.ID, func(j Job) bool { return j.Result != nil })
	if j.State != StateUnknown || !j.SlotHeld || j.Result.ErrorClass != ErrorConnectionLost {
		t.Fatalf("after SIGKILL: %s held %t result %+v", j.State, j.SlotHeld, j.Result)
	}
	<-doomed.Exited()
	fresh := launchSidecar(t)
	e.d.AddSidecar("node-1", fresh)
	j = e.waitJob(j.ID, "settled and freed", func(j Job) bool { return j.State.Settled() && !j.SlotHeld })
	if j.State != StateNotCommitted || j.Resolution == nil || !j.Resolution.Fenced {
		t.Fatalf("settled %s %+v", j.State, j.Resolution)
	}
	for _, want := range []string{"answer:UNKNOWN:held", "epoch-gone:UNKNOWN:released", "resolve:NOT_COMMITTED:released"} {
		if !slices.Contains(splitEvents(j), want) {
			t.Fatalf("history lacks %s: %s", want, historyEvents(j))
		}
	}
	// The queued jobs run on the new sidecar. The one admitted on ds at version 1 commits version
	// 2: the fence closed that version to the killed invocation alone.
	jobs, _ := e.d.List(ListOptions{})
	if q := e.waitJob(jobs[1].ID, "settled", settled); q.State != StateCommitted || q.Result.CommittedVersion != 2 {
		t.Fatalf("queued job on the fenced dataset: %s %+v", q.State, q.Result)
	}
	e.waitJob(jobs[2].ID, "committed", stateIs(StateCommitted))
	if doomed.sends.Load() != 1 || fresh.sends.Load() != 2 {
		t.Fatalf("sends: killed sidecar %d, new sidecar %d", doomed.sends.Load(), fresh.sends.Load())
	}
	e.submit(createReq(data.ref("ds"), data.latest("ds"), "BY_ID", "id"))
}

func splitEvents(j Job) []string {
	var ev []string
	for _, h := range j.History {
		ev = append(ev, h.Event+":"+string(h.To)+":"+h.Slot)
	}
	return ev
}

// TestRealIdleRound: with a job hanging on a real sidecar at its in-flight cap, another PENDING
// behind it, a committed job whose refresh failed (not yet due again) and a settled one, rounds
// have nothing to do and leave the store file byte-for-byte and mtime unchanged.
func TestRealIdleRound(t *testing.T) {
	noLeaks(t)
	sc := launchSidecar(t)
	data := newRealData(t)
	e := realEnv(t, func(c *Config) {
		c.ExecuteDeadline = time.Minute
		c.MaxInFlightPerSidecar = 1
		c.RefreshRetryInterval = time.Hour
		c.Refresh = func(context.Context, Job) error { return errors.New("catalog down") }
	})
	e.d.AddSidecar("node-1", sc)
	committed := e.submit(createReq(data.make("a", 1), 1, "by_id", "id"))
	e.waitJob(committed.ID, "refresh failed", func(j Job) bool { return j.Refresh == RefreshFailed })
	conflict := e.submit(createReq(data.make("b", 2), 1, "by_id", "id"))
	e.waitJob(conflict.ID, "settled", settled)
	hang := createReq(data.make("c", 1), 1, "by_id", "id")
	hang.Fault = "hang"
	e.waitJob(e.submit(hang).ID, "running", stateIs(StateRunning))
	e.submit(createReq(data.make("d", 1), 1, "by_id", "id"))
	e.round()
	before := fileState(t, e.path)
	time.Sleep(50 * time.Millisecond)
	for range 20 {
		if st := e.round(); st != (RoundStats{}) {
			t.Fatalf("idle round did something: %+v", st)
		}
	}
	if after := fileState(t, e.path); after != before {
		t.Fatalf("idle rounds changed the store: %+v → %+v", before, after)
	}
	if sc.sends.Load() != 3 {
		t.Fatalf("%d sends", sc.sends.Load())
	}
}
