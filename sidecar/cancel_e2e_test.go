package sidecar_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

// cancelCall is one index.mutate in flight and, once sent, its cancel.
type cancelCall struct {
	p      rpc.MutateParams
	answer chan mutateAnswer
	at     time.Time // when the answer arrived (cancelAnswered)
}

type mutateAnswer struct {
	res rpc.MutateResult
	err error
	at  time.Time
}

// start sends p and returns at once; the answer arrives on the call's channel.
func (e *sidecarEnv) start(p rpc.MutateParams) *cancelCall {
	c := &cancelCall{p: p, answer: make(chan mutateAnswer, 1)}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := e.c.Mutate(ctx, p)
		c.answer <- mutateAnswer{res, err, time.Now()}
	}()
	return c
}

func (e *sidecarEnv) cancel(inv string) (rpc.CancelResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return e.c.Cancel(ctx, inv)
}

// waitStage waits for a $/progress of inv with the given stage: the worker stands there.
func (e *sidecarEnv) waitStage(t *testing.T, inv, stage string) {
	t.Helper()
	waitFor(t, func() bool { return e.atStage(inv, stage) })
}

// atStage reports whether a $/progress of inv with the given stage has arrived.
func (e *sidecarEnv) atStage(inv, stage string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.progress {
		if p.InvocationID == inv && p.Stage == stage {
			return true
		}
	}
	return false
}

// startHeld makes dataset path (20,000 rows) and starts a CREATE on it with a hold fault; it
// returns once the worker stands at its hold.
func (e *sidecarEnv) startHeld(t *testing.T, path, fault string) *cancelCall {
	t.Helper()
	e.makeDataset(path, 20000)
	p := e.params(randID("inv-"), path, 1, rpc.OpCreate, "ix", "name", rpc.IndexBTree)
	p.Fault = fault
	c := e.start(p)
	e.waitStage(t, p.InvocationID, workerproto.HoldStage(fault))
	return c
}

// cancelAnswered cancels c's invocation, then takes the mutation's answer: it was sent before the
// cancel's reply, so it is in (or about to be in) the call's channel.
func (e *sidecarEnv) cancelAnswered(t *testing.T, c *cancelCall) (rpc.CancelResult, rpc.MutateResult) {
	t.Helper()
	cr, err := e.cancel(c.p.InvocationID)
	if err != nil {
		t.Fatalf("cancel %s: %v", c.p.InvocationID, err)
	}
	a := <-c.answer
	if a.err != nil {
		t.Fatalf("mutate %s: %v", c.p.InvocationID, a.err)
	}
	c.at = a.at
	return cr, a.res
}

// mustCancel is cancelAnswered checking that the reply repeats the answer and that the domain is
// gone; it also returns the time from the cancel to the answer.
func (e *sidecarEnv) mustCancel(t *testing.T, c *cancelCall) (rpc.CancelResult, rpc.MutateResult, time.Duration) {
	t.Helper()
	sent := time.Now()
	cr, res := e.cancelAnswered(t, c)
	a := mutateAnswer{res: res, at: c.at}
	if cr.InvocationID != c.p.InvocationID || cr.Phase != a.res.Phase || cr.Code != a.res.Code || cr.CommittedVersion != a.res.CommittedVersion {
		t.Fatalf("the cancel's reply %+v does not repeat the answer %+v", cr, a.res)
	}
	e.assertDomainGone(c.p.InvocationID, a.res)
	return cr, a.res, a.at.Sub(sent)
}

// A mutation still in the queue is answered at once, -9, without a launch.
func TestCancelQueued(t *testing.T) {
	e := newSidecar(t, "--executors", "1")
	e.makeDataset("cq", 2000)
	busy := e.params(randID("inv-busy-"), "cq", 1, rpc.OpCreate, "ix_busy", "id", rpc.IndexBTree)
	busy.Fault = workerproto.FaultHoldBeforeCommit
	b := e.start(busy)
	e.waitStage(t, busy.InvocationID, workerproto.HoldStage(busy.Fault))
	queued := e.start(e.params(randID("inv-queued-"), "cq", 1, rpc.OpCreate, "ix_q", "id", rpc.IndexBTree))
	waitFor(t, func() bool { return metric(t, e, "steward_mutate_queue_depth") == 1 })

	cr, res, took := e.mustCancel(t, queued)
	t.Logf("queued: answer %s %d cancelled=%v %q; cancel %s %s; cancel→answer %v", res.Phase, res.Code, res.Cancelled, res.Message, cr.State, cr.Outcome, took)
	expect(t, res, rpc.PhasePreInvocationRejected, rpc.ReasonCancelled)
	if !res.Cancelled || res.WallMs != 0 || cr.State != rpc.CancelCancelled || cr.Outcome != rpc.OutcomeNotCommitted {
		t.Fatalf("queued cancel: answer %+v, reply %+v", res, cr)
	}
	if d := e.domainOf(queued.p.InvocationID); d != "" {
		t.Fatalf("a cancelled queued mutation was assigned domain %s", d)
	}
	// It no longer counts as waiting; the executor, once free, skips it and nothing runs for it.
	if d := metric(t, e, "steward_mutate_queue_depth"); d != 0 {
		t.Fatalf("queue depth %v after the cancel, want 0", d)
	}
	cr, bres, _ := e.mustCancel(t, b)
	expect(t, bres, rpc.PhasePreInvocationRejected, rpc.ReasonCancelled)
	if cr.State != rpc.CancelCancelled {
		t.Fatalf("busy: %+v", cr)
	}
	after := e.mutate(e.params(randID("inv-after-"), "cq", 1, rpc.OpCreate, "ix_after", "id", rpc.IndexBTree))
	if after.Code != rpc.NativeOK || after.CommittedVersion != 2 {
		t.Fatalf("the next mutation: %+v", after)
	}
	if d := e.domainOf(queued.p.InvocationID); d != "" {
		t.Fatalf("the cancelled mutation ran later in domain %s", d)
	}
}

// A running worker held at its commit is killed and reaped, and its answer is what storage
// holds: held before the commit, fenced, NOT_COMMITTED -9 (the fence consumes no version: the
// next mutation pinned to the same version commits); held after it, the commit, NATIVE_RETURN 0
// with a message naming the cancel that came too late.
func TestCancelHeldAtTheCommit(t *testing.T) {
	for _, tc := range []struct {
		fault, phase string
		code         int
		outcome      string
		latest       int64
	}{
		{workerproto.FaultHoldBeforeCommit, rpc.PhasePreInvocationRejected, rpc.ReasonCancelled, rpc.OutcomeNotCommitted, 1},
		{workerproto.FaultHoldAfterCommit, rpc.PhaseNativeReturn, rpc.NativeOK, rpc.OutcomeCommitted, 2},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			e := newSidecar(t)
			c := e.startHeld(t, "ch", tc.fault)
			p := c.p
			cr, res, took := e.mustCancel(t, c)
			t.Logf("%s: answer %s %d %s v%d cancelled=%v signal=%s %q; cancel %s %s; cancel→answer %v", tc.fault, res.Phase, res.Code,
				res.CompletionReason, res.CommittedVersion, res.Cancelled, res.Signal, res.Message, cr.State, cr.Outcome, took)
			expect(t, res, tc.phase, tc.code)
			if !res.Cancelled || cr.State != rpc.CancelCancelled || cr.Outcome != tc.outcome {
				t.Fatalf("answer %+v, reply %+v", res, cr)
			}
			r := e.resolve(p.InvocationID, "ch", 1)
			if got := e.latest("ch"); r.Outcome != tc.outcome || got != tc.latest {
				t.Fatalf("resolve after the cancel: %+v; latest %d, want %d", r, got, tc.latest)
			}
			if tc.outcome == rpc.OutcomeCommitted {
				if res.CommittedVersion != 2 || res.CompletionReason != rpc.CompletionCommitted || !strings.Contains(res.Message, "too late") {
					t.Fatalf("answer %+v", res)
				}
				return
			}
			if !r.Fenced || res.CommittedVersion != 0 {
				t.Fatalf("answer %+v, resolve %+v", res, r)
			}
			next := e.mutate(e.params(randID("inv-"), "ch", 1, rpc.OpCreate, "ix", "name", rpc.IndexBTree))
			if next.Code != rpc.NativeOK || next.CommittedVersion != 2 {
				t.Fatalf("after the fence, a mutation pinned to 1: %+v", next)
			}
		})
	}
}

// The go-plugin transport carries index.cancel as stdio does (one protocol, two transports): a
// worker held before its commit, cancelled through a MuxBroker stream.
func TestCancelOverGoPlugin(t *testing.T) {
	e := newSidecarOpts(t, testsidecar.Options{Plugin: true})
	if !slices.Contains(e.c.Info().Capabilities, rpc.CapCancel) {
		t.Fatalf("hello lacks %s: %v", rpc.CapCancel, e.c.Info().Capabilities)
	}
	c := e.startHeld(t, "cp", workerproto.FaultHoldBeforeCommit)
	cr, res, _ := e.mustCancel(t, c)
	expect(t, res, rpc.PhasePreInvocationRejected, rpc.ReasonCancelled)
	if cr.State != rpc.CancelCancelled || cr.Outcome != rpc.OutcomeNotCommitted {
		t.Fatalf("reply %+v", cr)
	}
}

// Cancels thrown at plain builds at random moments: every answer is definite and agrees with
// index.resolve and with the dataset, whichever side of the commit the kill fell.
func TestCancelRacesTheCommit(t *testing.T) {
	e := newSidecar(t)
	e.makeDataset("cr", 20000)
	// One uncancelled build for the scale of the random delays.
	probe := e.mutate(e.params(randID("inv-"), "cr", 1, rpc.OpCreate, "ix_probe", "name", rpc.IndexBTree))
	span := time.Duration(probe.WallMs+5) * time.Millisecond
	pinned, kinds := int64(2), map[string]int{}
	for i := range 12 {
		p := e.params(randID("inv-"), "cr", pinned, rpc.OpCreate, "ix_"+string(rune('a'+i)), "name", rpc.IndexBTree)
		c := e.start(p)
		time.Sleep(time.Duration(rand.Int64N(int64(span) * 3 / 2)))
		cr, res := e.cancelAnswered(t, c)
		kind := cr.State + " " + res.Phase
		kinds[kind]++
		r := e.resolve(p.InvocationID, "cr", pinned)
		switch {
		case res.Phase == rpc.PhaseIndeterminate:
			t.Fatalf("a cancel answered indeterminate while storage answers: %+v", res)
		case res.Phase == rpc.PhaseNativeReturn && res.Code == rpc.NativeOK:
			if res.CommittedVersion != pinned+1 || r.Outcome != rpc.OutcomeCommitted || cr.Outcome != rpc.OutcomeCommitted {
				t.Fatalf("committed answer %+v, resolve %+v, cancel %+v", res, r, cr)
			}
			pinned++
		case res.Phase == rpc.PhasePreInvocationRejected && res.Code == rpc.ReasonCancelled:
			if r.Outcome != rpc.OutcomeNotCommitted || cr.Outcome != rpc.OutcomeNotCommitted || cr.State != rpc.CancelCancelled {
				t.Fatalf("cancelled answer %+v, resolve %+v, cancel %+v", res, r, cr)
			}
		default:
			t.Fatalf("unexpected answer to a cancelled build: %+v", res)
		}
		if got := e.latest("cr"); got != pinned {
			t.Fatalf("latest %d, want %d", got, pinned)
		}
	}
	t.Logf("cancel state and answer phase over 12 races: %v", kinds)
}

// The deadline and a cancel race for one worker that ignores SIGTERM: the first to start the kill
// names the one answer (-22 and ANSWERED, or -9 and CANCELLED), and the reply agrees with it.
func TestCancelVersusDeadline(t *testing.T) {
	e := newSidecar(t)
	e.makeDataset("cd", 2000)
	const budget = 3600 * time.Millisecond // kill budget of FastArgs: 100 ms + 500 ms + 3 s
	seen := map[int]int{}
	for i := range 4 {
		p := e.params(randID("inv-"), "cd", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
		p.Fault = workerproto.FaultHoldBeforeCommit
		deadline := time.Now().Add(budget + 1500*time.Millisecond)
		p.DeadlineUnixMs = deadline.UnixMilli()
		c := e.start(p)
		e.waitStage(t, p.InvocationID, workerproto.HoldStage(p.Fault))
		// Around run_until = deadline − budget: before, at, and inside the ladder.
		time.Sleep(time.Until(deadline.Add(-budget).Add(time.Duration(i-1) * 150 * time.Millisecond)))
		cr, res := e.cancelAnswered(t, c)
		seen[res.Code]++
		switch res.Code {
		case rpc.ReasonDeadline:
			// The ladder began first; the cancel came during it (named in the answer) or after.
			if cr.State != rpc.CancelAnswered || cr.Outcome != rpc.OutcomeNotCommitted {
				t.Fatalf("deadline first: answer %+v, reply %+v", res, cr)
			}
		case rpc.ReasonCancelled:
			if cr.State != rpc.CancelCancelled || cr.Outcome != rpc.OutcomeNotCommitted {
				t.Fatalf("cancel first: answer %+v, reply %+v", res, cr)
			}
		default:
			t.Fatalf("answer %+v", res)
		}
		if r := e.resolve(p.InvocationID, "cd", 1); r.Outcome != rpc.OutcomeNotCommitted {
			t.Fatalf("resolve %+v", r)
		}
	}
	t.Logf("answers by code: %v", seen)
}

// The sidecar dies between the cancel and the answers: neither comes, and index.resolve through
// the next sidecar gives the truth, the fence (held before its commit) or the commit (held after).
func TestCancelVersusSidecarCrash(t *testing.T) {
	for _, fault := range []string{workerproto.FaultHoldBeforeCommit, workerproto.FaultHoldAfterCommit} {
		t.Run(fault, func(t *testing.T) {
			// A state dir of its own, adopted by the next sidecar: the killed one's tickets are
			// settled there, not handed to another test's sidecar.
			e := newSidecar(t, "--state-dir", filepath.Join(t.TempDir(), "state"))
			c := e.startHeld(t, "cx", fault)
			p := c.p
			cancelled := make(chan error, 1)
			go func() { _, err := e.cancel(p.InvocationID); cancelled <- err }()
			sigkill(t, e.c)
			a, cerr := <-c.answer, <-cancelled
			if a.err == nil || cerr == nil {
				t.Logf("answered before the kill: %+v (cancel error %v)", a.res, cerr)
			}
			if a.err != nil && !errors.Is(a.err, rpc.ErrConnectionLost) {
				t.Fatalf("mutate after the crash: %v", a.err)
			}
			e.c.Close()
			e.sc.Restart()
			e.c = e.sc.Client
			want := rpc.OutcomeNotCommitted
			if fault == workerproto.FaultHoldAfterCommit {
				want = rpc.OutcomeCommitted
			}
			var r rpc.ResolveResult
			waitFor(t, func() bool { r = e.resolve(p.InvocationID, "cx", 1); return r.Outcome != rpc.OutcomeUnknown })
			if r.Outcome != want {
				t.Fatalf("resolve after the crash: %+v, want %s", r, want)
			}
			// Any further cancel reaches a sidecar that never saw the invocation.
			if cr, err := e.cancel(p.InvocationID); err != nil || cr.State != rpc.CancelUnknownInvocation {
				t.Fatalf("cancel on the new sidecar: %+v %v", cr, err)
			}
		})
	}
}

// A double cancel gets the same kind of reply, from the live job and then from the sidecar's
// memory; a cancel of an invocation that finished alone says so, and one of an id never seen too.
func TestCancelTwiceFinishedAndUnknown(t *testing.T) {
	e := newSidecar(t)
	c := e.startHeld(t, "c2", workerproto.FaultHoldBeforeCommit)
	p := c.p
	var wg sync.WaitGroup
	replies := make([]rpc.CancelResult, 2)
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.cancel(p.InvocationID)
			if err != nil {
				t.Error(err)
			}
			replies[i] = r
		}()
	}
	wg.Wait()
	a := <-c.answer
	expect(t, a.res, rpc.PhasePreInvocationRejected, rpc.ReasonCancelled)
	later, err := e.cancel(p.InvocationID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append(replies, later) {
		if r.State != rpc.CancelCancelled || r.Outcome != rpc.OutcomeNotCommitted || r.Code != rpc.ReasonCancelled {
			t.Fatalf("cancels of one invocation: %+v", append(replies, later))
		}
	}

	done := e.mutate(e.params(randID("inv-"), "c2", 1, rpc.OpCreate, "ix", "name", rpc.IndexBTree))
	fin, err := e.cancel(done.InvocationID)
	if err != nil {
		t.Fatal(err)
	}
	if fin.State != rpc.CancelAnswered || fin.Outcome != rpc.OutcomeCommitted || fin.Code != rpc.NativeOK || fin.CommittedVersion != 2 {
		t.Fatalf("cancel of a finished invocation: %+v", fin)
	}
	never, err := e.cancel("inv-never-seen")
	if err != nil {
		t.Fatal(err)
	}
	if never.State != rpc.CancelUnknownInvocation || never.Outcome != "" {
		t.Fatalf("cancel of an unknown id: %+v", never)
	}
	t.Logf("double: %s %s; finished: %s %s; never seen: %s %q", later.State, later.Outcome, fin.State, fin.Outcome, never.State, never.Message)
}

// A shutdown lets a running mutation finish, and leaves index.cancel served to end it sooner;
// other new requests are refused.
func TestCancelDuringShutdown(t *testing.T) {
	e := newSidecar(t)
	c := e.startHeld(t, "cs", workerproto.FaultHoldBeforeCommit)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var sr rpc.ShutdownResult // the call alone: host.Client.Shutdown would also close the connection
	if err := e.c.Call(ctx, rpc.MethodShutdown, rpc.ShutdownParams{Reason: "test"}, &sr); err != nil || sr.InFlight != 1 {
		t.Fatalf("shutdown: %+v %v", sr, err)
	}
	if _, err := e.c.Mutate(ctx, e.params(randID("inv-"), "cs", 1, rpc.OpCreate, "ix2", "name", rpc.IndexBTree)); !errors.Is(err, rpc.ErrShuttingDown) {
		t.Fatalf("a mutation during the shutdown: %v, want ErrShuttingDown", err)
	}
	cr, res, _ := e.mustCancel(t, c)
	expect(t, res, rpc.PhasePreInvocationRejected, rpc.ReasonCancelled)
	if cr.State != rpc.CancelCancelled || cr.Outcome != rpc.OutcomeNotCommitted {
		t.Fatalf("reply %+v", cr)
	}
}
