package sidecar_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
)

// domains counts the worker domains of the sidecar in the unified hierarchy (v2 and hybrid
// place every domain there; on v1 the memory hierarchy).
func (e *sidecarEnv) domains() int { return domainsIn(e.parent) }

// domainsIn counts the worker domains under cgroup parent (see sidecarEnv.domains).
func domainsIn(parent string) int {
	n := 0
	for _, h := range []string{"unified", "memory"} {
		owners, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h, parent))
		c := 0
		for _, o := range owners {
			ds, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h, parent, o.Name()))
			for _, d := range ds {
				if d.IsDir() {
					c++
				}
			}
		}
		if c > n {
			n = c
		}
	}
	return n
}

// TestOneSparePerExecutor: jobs refused at dequeue (-1) must not add prestarted workers; an
// executor keeps exactly one spare.
func TestOneSparePerExecutor(t *testing.T) {
	e := newSidecar(t, "--executors", "1", "--queue", "8")
	e.makeDataset("spare", 1000)
	ctx := context.Background()
	waitFor(t, func() bool { return e.domains() == 1 })

	// The kill budget is 100 ms + 500 ms + 3 s: `hang` runs about 1 s, each queued job can wait
	// only 400 ms, so all of them lapse behind it.
	hang := e.params(randID("inv-"), "spare", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
	hang.Fault, hang.DeadlineUnixMs = "hang", time.Now().Add(4600*time.Millisecond).UnixMilli()
	var wg sync.WaitGroup
	results := make([]rpc.MutateResult, 4)
	errs := make([]error, 4)
	for i := range results {
		p := hang
		if i > 0 {
			p = e.params(randID("inv-"), "spare", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
			p.DeadlineUnixMs = time.Now().Add(4 * time.Second).UnixMilli()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.c.Mutate(ctx, p)
		}()
		waitFor(t, func() bool {
			return metric(t, e, "steward_mutate_workers_in_flight") == 1 && metric(t, e, "steward_mutate_queue_depth") == float64(i)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("mutate %d: %v", i, err)
		}
	}
	expect(t, results[0], rpc.PhaseIndeterminate, rpc.ReasonDeadline)
	for _, r := range results[1:] {
		expect(t, r, rpc.PhasePreInvocationRejected, rpc.ReasonDeadlineLapsed)
	}
	// The spare started after the hang's teardown is the only domain; give a wrongly started
	// extra one the time to appear.
	waitFor(t, func() bool { return e.domains() >= 1 })
	time.Sleep(500 * time.Millisecond)
	if n := e.domains(); n != 1 {
		t.Fatalf("%d worker domains with --executors 1 after 3 jobs refused at dequeue; want the one spare", n)
	}
}

// TestShutdownAnswersQueuedAtOnce: a mutation still queued when the shutdown starts provably never
// ran; it is answered PRE_INVOCATION_REJECTED -7 at once, not when an executor frees up, and so
// still within a short shutdown grace.
func TestShutdownAnswersQueuedAtOnce(t *testing.T) {
	e := newSidecar(t, "--executors", "1", "--shutdown-grace", "1s")
	e.makeDataset("sd", 1000)
	ctx := context.Background()
	hang := e.params(randID("inv-"), "sd", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
	hang.Fault, hang.DeadlineUnixMs = "hang", time.Now().Add(time.Minute).UnixMilli()
	queued := e.params(randID("inv-"), "sd", 1, rpc.OpCreate, "ix2", "id", rpc.IndexBTree)
	queued.DeadlineUnixMs = time.Now().Add(time.Minute).UnixMilli()

	hangDone := make(chan struct{})
	go func() {
		defer close(hangDone)
		_, _ = e.c.Mutate(ctx, hang)
	}()
	waitFor(t, func() bool { return metric(t, e, "steward_mutate_workers_in_flight") == 1 })
	type answer struct {
		res rpc.MutateResult
		err error
	}
	queuedDone := make(chan answer, 1)
	go func() {
		res, err := e.c.Mutate(ctx, queued)
		queuedDone <- answer{res, err}
	}()
	waitFor(t, func() bool { return metric(t, e, "steward_mutate_queue_depth") == 1 })

	var sd rpc.ShutdownResult
	if err := e.c.Call(ctx, rpc.MethodShutdown, rpc.ShutdownParams{Reason: "test"}, &sd); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	a := <-queuedDone
	if a.err != nil {
		t.Fatalf("the queued mutation got no answer: %v", a.err)
	}
	select {
	case <-hangDone:
		t.Fatal("the running mutation ended before the queued one was answered")
	default:
	}
	expect(t, a.res, rpc.PhasePreInvocationRejected, rpc.ReasonShuttingDown)
	<-hangDone
}

// TestHelloReportsOwnCgroups: hello names the sidecar's own cgroup directories
// (<root>/<parent>/<pid>-<start>), one per hierarchy in use; each holds the worker domains.
func TestHelloReportsOwnCgroups(t *testing.T) {
	e := newSidecar(t, "--executors", "1")
	iso := e.c.Info().Isolation
	if len(iso.Cgroups) != len(iso.Controllers) {
		t.Fatalf("hello cgroups %v for controllers %v", iso.Cgroups, iso.Controllers)
	}
	// The spare's directories are made one hierarchy after the other: wait for all of them.
	domainsIn := func(dir string) int {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("hello's cgroup %s: %v", dir, err)
		}
		n := 0
		for _, d := range ents {
			if d.IsDir() {
				n++
			}
		}
		return n
	}
	waitFor(t, func() bool {
		for _, dir := range iso.Cgroups {
			if domainsIn(dir) != 1 {
				return false
			}
		}
		return true
	}) // each holds the one spare
	for _, dir := range iso.Cgroups {
		if filepath.Base(filepath.Dir(dir)) != e.parent || !strings.HasPrefix(filepath.Base(dir), fmt.Sprintf("%d-", e.c.Pid())) {
			t.Errorf("cgroup %s is not <root>/%s/%d-<start>", dir, e.parent, e.c.Pid())
		}
	}
}

// TestTraceParentCrossesTheBoundary: a mutation's W3C traceparent comes back in its answer and
// in every $/progress, and its trace id is on the sidecar's log lines of the invocation; a
// malformed one is refused at receive (-32602).
func TestTraceParentCrossesTheBoundary(t *testing.T) {
	e := newSidecar(t)
	e.makeDataset("trace", 50000)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	p := e.params(randID("inv-"), "trace", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
	p.TraceParent = tp
	res := e.mutate(p)
	expect(t, res, rpc.PhaseNativeReturn, rpc.NativeOK)
	if res.TraceParent != tp {
		t.Fatalf("answer traceparent %q, want %q", res.TraceParent, tp)
	}
	e.mu.Lock()
	var mine int
	for _, pr := range e.progress {
		if pr.InvocationID == p.InvocationID {
			mine++
			if pr.TraceParent != tp {
				t.Errorf("$/progress without the traceparent: %+v", pr)
			}
		}
	}
	e.mu.Unlock()
	if mine == 0 {
		t.Fatal("no $/progress for the traced mutation")
	}
	// The sidecar's stderr reaches e.logs on its own pipe: a line written before the answer may
	// still be on its way when the answer arrives.
	traced := func() bool {
		for _, line := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(line, p.InvocationID) && strings.Contains(line, `"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"`) {
				return true
			}
		}
		return false
	}
	for wait := time.Now().Add(10 * time.Second); !traced() && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
	}
	if !traced() {
		t.Fatalf("no sidecar log line of %s carries its trace id", p.InvocationID)
	}
	bad := e.params(randID("inv-"), "trace", 1, rpc.OpCreate, "ix2", "id", rpc.IndexBTree)
	bad.TraceParent = "00-not-a-trace-01"
	if _, err := e.c.Mutate(context.Background(), bad); !errors.Is(err, rpc.ErrInvalidParams) {
		t.Fatalf("malformed traceparent: want -32602, got %v", err)
	}
}
