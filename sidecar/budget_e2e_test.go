package sidecar_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

// budgetObserver polls the sidecar's memory cgroups (the hierarchy that holds the limits) and
// records the most call domains and the largest sum of domain limits seen at once.
type budgetObserver struct {
	dir, file string // owner directory and the limit's file name
	mu        sync.Mutex
	maxCalls  int
	maxSum    int64
	polls     int
}

func newBudgetObserver(t *testing.T, e *sidecarEnv) *budgetObserver {
	t.Helper()
	iso := e.c.Info().Isolation
	for _, d := range iso.Cgroups {
		switch {
		case strings.Contains(d, "/memory/"):
			return &budgetObserver{dir: d, file: "memory.limit_in_bytes"}
		case iso.Mode == "v2":
			return &budgetObserver{dir: d, file: "memory.max"}
		}
	}
	t.Fatalf("no memory cgroup among the sidecar's %v", iso.Cgroups)
	return nil
}

// poll reads every domain once: calls are the domains named after an invocation ("inv-…").
func (o *budgetObserver) poll() {
	ds, _ := os.ReadDir(o.dir)
	calls, sum := 0, int64(0)
	for _, d := range ds {
		if !d.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(o.dir, d.Name(), o.file))
		if err != nil {
			continue // removed since the listing
		}
		v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		sum += v
		if strings.HasPrefix(d.Name(), "inv-") {
			calls++
		}
	}
	o.mu.Lock()
	o.maxCalls, o.maxSum, o.polls = max(o.maxCalls, calls), max(o.maxSum, sum), o.polls+1
	o.mu.Unlock()
}

// TestMemoryBudgetHoldsUnderBurst: nine calls of 128 MiB each (1152 MiB) on six executors under a
// 384 MiB budget: never more than three domains' limits exist at once (read from the real
// cgroups while the calls run, spares included), the in-use gauge never passes the budget, and
// every call runs and is answered. Each call holds at its commit until index.cancel ends it, one
// at a time, so each freed share of the budget admits the next waiting call: the order of events
// is fixed by the test, not by the machine's speed.
func TestMemoryBudgetHoldsUnderBurst(t *testing.T) {
	const limit, budget, calls, executors = 128 << 20, 3 * 128 << 20, 9, 6
	e := newSidecar(t, "--executors", strconv.Itoa(executors), "--worker-memory", strconv.Itoa(limit), "--memory-budget", strconv.Itoa(budget))
	e.makeDataset("burst", 1000)
	mb := e.c.Info().MemoryBudget
	if mb == nil || mb.BudgetBytes != budget || mb.Source != "flag" {
		t.Fatalf("hello memory_budget %+v, want %d from the flag", mb, budget)
	}
	obs := newBudgetObserver(t, e)
	stop := make(chan struct{})
	var polling sync.WaitGroup
	var gaugeMax float64
	polling.Add(1)
	go func() {
		defer polling.Done()
		for {
			obs.poll()
			gaugeMax = max(gaugeMax, metric(t, e, "steward_memory_budget_in_use_bytes"))
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	stage := workerproto.HoldStage(workerproto.FaultHoldBeforeCommit)
	running := make([]*cancelCall, 0, calls)
	for range calls {
		p := e.params(randID("inv-"), "burst", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
		p.Fault = workerproto.FaultHoldBeforeCommit
		p.DeadlineUnixMs = time.Now().Add(3 * time.Minute).UnixMilli()
		running = append(running, e.start(p))
	}
	// Three run; three more hold an executor and wait for budget; the rest wait in the queue.
	waitLong(t, func() bool { return metric(t, e, "steward_memory_budget_waiting") == executors-budget/limit })
	for range calls {
		// End whichever call stands at its hold; the next waiting one then gets its budget.
		var held *cancelCall
		waitLong(t, func() bool {
			for i, c := range running {
				if e.atStage(c.p.InvocationID, stage) {
					held = c
					running = slices.Delete(running, i, i+1)
					return true
				}
			}
			return false
		})
		// cancelAnswered, not mustCancel: the other held calls' domains still exist.
		_, res := e.cancelAnswered(t, held)
		expect(t, res, rpc.PhasePreInvocationRejected, rpc.ReasonCancelled) // it ran, held, was cancelled
	}
	close(stop)
	polling.Wait()
	t.Logf("max call domains at once %d (budget/limit = %d), max sum of domain limits %d of %d, max in-use gauge %.0f, %d polls",
		obs.maxCalls, budget/limit, obs.maxSum, budget, gaugeMax, obs.polls)
	if obs.maxCalls > budget/limit || obs.maxSum > budget || gaugeMax > budget {
		t.Fatalf("the budget did not hold: %d calls, %d bytes of limits, gauge %.0f at once; budget %d", obs.maxCalls, obs.maxSum, gaugeMax, budget)
	}
	if obs.maxCalls < budget/limit {
		t.Fatalf("at most %d calls ran at once: the first three (held at their commit) should have filled the budget", obs.maxCalls)
	}
}

// waitLong is waitFor for a step that includes a cold worker launch on a loaded machine.
func waitLong(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMemoryBudgetRefusesAndLapses: a call whose own limit exceeds the whole budget is refused at
// receive with -32020 naming cause and fix; one with a lower limit runs; a call waiting for
// budget behind a hanging one gets the deadline-lapsed answer once its run-until time passes.
func TestMemoryBudgetRefusesAndLapses(t *testing.T) {
	const budget = 96 << 20
	e := newSidecar(t, "--executors", "2", "--memory-budget", strconv.Itoa(budget)) // --worker-memory is 256 MiB
	e.makeDataset("lapse", 1000)

	big := e.params(randID("inv-"), "lapse", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
	_, err := e.c.Mutate(context.Background(), big)
	var we *rpc.Error
	if !errors.Is(err, rpc.ErrOverMemoryBudget) || !errors.As(err, &we) || we.Code != -32020 ||
		!strings.Contains(we.Message, "268435456") || !strings.Contains(we.Message, "--memory-budget") || !strings.Contains(we.Message, "limits.memory_bytes") {
		t.Fatalf("a 256 MiB call under a 96 MiB budget: %v, want -32020 naming the limit, the budget and the fix", err)
	}

	hang := e.params(randID("inv-"), "lapse", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
	hang.Fault, hang.Limits = "hang", &rpc.WorkerLimits{MemoryBytes: 64 << 20}
	hang.DeadlineUnixMs = time.Now().Add(6 * time.Second).UnixMilli()
	waiting := e.params(randID("inv-"), "lapse", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
	waiting.Limits = &rpc.WorkerLimits{MemoryBytes: 64 << 20}
	var hres rpc.MutateResult
	var herr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		hres, herr = e.c.Mutate(context.Background(), hang)
	}()
	waitFor(t, func() bool { return metric(t, e, "steward_memory_budget_in_use_bytes") == 64<<20 })
	waiting.DeadlineUnixMs = time.Now().Add(4200 * time.Millisecond).UnixMilli() // runs until +0.6 s: lapses behind the hang
	res, err := e.c.Mutate(context.Background(), waiting)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, res, rpc.PhasePreInvocationRejected, rpc.ReasonDeadlineLapsed)
	if !strings.Contains(res.Message, "memory budget") {
		t.Fatalf("lapsed answer %q does not say it waited for memory budget", res.Message)
	}
	<-done
	if herr != nil {
		t.Fatal(herr)
	}
	expect(t, hres, rpc.PhaseIndeterminate, rpc.ReasonDeadline)

	small := e.params(randID("inv-"), "lapse", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
	small.Limits = &rpc.WorkerLimits{MemoryBytes: 80 << 20}
	expect(t, e.mutate(small), rpc.PhaseNativeReturn, rpc.NativeOK)

	// The budget comes back once the domain's namespaces are released, right after the answer.
	waitFor(t, func() bool { return metric(t, e, "steward_memory_budget_in_use_bytes") == 0 })
	h, err := e.c.Hello(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(struct {
		MemoryBudget *rpc.MemoryBudget `json:"memory_budget"`
		DomainLimits []rpc.DomainLimit `json:"domain_limits"`
	}{h.MemoryBudget, h.Isolation.DomainLimits})
	t.Logf("hello: %s", b)
	if h.MemoryBudget.InUseBytes != 0 || h.MemoryBudget.SparesBytes != 0 || len(h.Isolation.DomainLimits) != 5 {
		t.Fatalf("hello %s: want nothing in use (no spare fits a 256 MiB worker in 96 MiB) and five domain limits", b)
	}
}

// TestMemoryBudgetDefault: without --memory-budget the budget is a documented share of what the
// sidecar may use, read from the real cgroup files or /proc/meminfo.
func TestMemoryBudgetDefault(t *testing.T) {
	e := newSidecar(t)
	mb := e.c.Info().MemoryBudget
	want := map[string]float64{"cgroup": 0.8, "machine": 0.5}[mb.Source]
	if want == 0 || mb.Share != want || mb.BudgetBytes != max(int64(float64(mb.BaseBytes)*want), min(256<<20, mb.BaseBytes)) || mb.Detail == "" {
		t.Fatalf("default budget %+v: want %v of its base", mb, want)
	}
	t.Logf("default budget %+v", *mb)
}

// TestMemoryBudgetDefaultFromOwnCgroup: a sidecar started inside a memory cgroup limited to
// 3 GiB (as systemd places a unit with MemoryMax=) takes 80% of that limit as its default budget,
// read from the real cgroup file.
func TestMemoryBudgetDefaultFromOwnCgroup(t *testing.T) {
	const limit = 3 << 30
	dir, file := filepath.Join("/sys/fs/cgroup/memory", randID("steward-budget-")), "memory.limit_in_bytes"
	if _, err := os.Stat("/sys/fs/cgroup/memory/cgroup.procs"); err != nil {
		dir, file = filepath.Join("/sys/fs/cgroup", randID("steward-budget-")), "memory.max" // pure v2
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("a memory cgroup for the sidecar: %v", err)
	}
	t.Cleanup(func() { // after the sidecar's own cleanup: it has exited
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			err := os.Remove(dir)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("remove %s: %v", dir, err)
				return
			}
		}
	})
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.Itoa(limit)), 0); err != nil {
		t.Fatal(err)
	}
	sc := testsidecar.Start(t, testsidecar.Options{Enter: []string{dir}})
	mb := sc.Client.Info().MemoryBudget
	if mb == nil || mb.Source != "cgroup" || mb.BaseBytes != limit || mb.Share != 0.8 ||
		mb.BudgetBytes != limit*4/5 || mb.Detail != filepath.Join(dir, file) {
		t.Fatalf("hello memory_budget %+v: want 80%% of the %d-byte limit of %s", mb, limit, filepath.Join(dir, file))
	}
	t.Logf("default budget %+v", *mb)
}

// TestCancelWhileWaitingForBudget: a call that holds an executor but waits for memory budget has
// launched nothing, so index.cancel answers it as a queued one (-9, no domain) at once instead of
// leaving it to lapse at its deadline.
func TestCancelWhileWaitingForBudget(t *testing.T) {
	e := newSidecar(t, "--executors", "2", "--memory-budget", strconv.Itoa(96<<20))
	e.makeDataset("cwb", 1000)
	hold := e.params(randID("inv-hold-"), "cwb", 1, rpc.OpCreate, "ix_hold", "id", rpc.IndexBTree)
	hold.Fault, hold.Limits = workerproto.FaultHoldBeforeCommit, &rpc.WorkerLimits{MemoryBytes: 64 << 20}
	h := e.start(hold)
	e.waitStage(t, hold.InvocationID, workerproto.HoldStage(hold.Fault))

	waiting := e.params(randID("inv-wait-"), "cwb", 1, rpc.OpCreate, "ix_wait", "id", rpc.IndexBTree)
	waiting.Limits = &rpc.WorkerLimits{MemoryBytes: 64 << 20}
	w := e.start(waiting)
	waitFor(t, func() bool { return metric(t, e, "steward_memory_budget_waiting") == 1 })

	cr, res, took := e.mustCancel(t, w)
	t.Logf("waiting for budget: answer %s %d %q; cancel %s %s; cancel→answer %v", res.Phase, res.Code, res.Message, cr.State, cr.Outcome, took)
	expect(t, res, rpc.PhasePreInvocationRejected, rpc.ReasonCancelled)
	if !res.Cancelled || cr.State != rpc.CancelCancelled || cr.Outcome != rpc.OutcomeNotCommitted {
		t.Fatalf("cancel while waiting for budget: answer %+v, reply %+v", res, cr)
	}
	if d := e.domainOf(waiting.InvocationID); d != "" {
		t.Fatalf("a call cancelled while waiting for budget was given domain %s", d)
	}
	if n := metric(t, e, "steward_memory_budget_waiting"); n != 0 {
		t.Fatalf("%v calls still wait for budget after the cancel", n)
	}
	_, hres, _ := e.mustCancel(t, h)
	expect(t, hres, rpc.PhasePreInvocationRejected, rpc.ReasonCancelled)
}
