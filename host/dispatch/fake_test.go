package dispatch

import (
	"context"
	"crypto/sha256"
	"fmt"
	"go.uber.org/goleak"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
)

// fakeSidecar stands in for a sidecar where a fault cannot be produced for real. answer decides
// each Mutate (default: OK, identity echoed); resolve each Resolve (default: storage unavailable).
type fakeSidecar struct {
	epoch  string
	exited chan struct{}
	once   sync.Once

	mu      sync.Mutex
	answer  func(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error)
	resolve func(ctx context.Context, p rpc.ResolveParams) (rpc.ResolveResult, error)
	sends   []rpc.MutateParams
}

var fakeEpochs atomic.Int64

func newFake() *fakeSidecar {
	return &fakeSidecar{epoch: fmt.Sprintf("fake-epoch-%d", fakeEpochs.Add(1)), exited: make(chan struct{})}
}

func (f *fakeSidecar) Epoch() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch
}

// restart makes the handle report a new epoch, as a handle that reconnected to a restarted
// sidecar would.
func (f *fakeSidecar) restart() {
	f.mu.Lock()
	f.epoch = fmt.Sprintf("fake-epoch-%d", fakeEpochs.Add(1))
	f.mu.Unlock()
}
func (f *fakeSidecar) Exited() <-chan struct{} { return f.exited }
func (f *fakeSidecar) exit()                   { f.once.Do(func() { close(f.exited) }) }

func (f *fakeSidecar) Mutate(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
	f.mu.Lock()
	f.sends = append(f.sends, p)
	answer := f.answer
	f.mu.Unlock()
	if answer == nil {
		return okAnswer(f, p), nil
	}
	return answer(ctx, p)
}

func (f *fakeSidecar) Resolve(ctx context.Context, p rpc.ResolveParams) (rpc.ResolveResult, error) {
	f.mu.Lock()
	resolve := f.resolve
	f.mu.Unlock()
	if resolve == nil {
		return rpc.ResolveResult{}, fmt.Errorf("fake: %w", rpc.ErrStorageUnavailable)
	}
	return resolve(ctx, p)
}

func (f *fakeSidecar) setAnswer(a func(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error)) {
	f.mu.Lock()
	f.answer = a
	f.mu.Unlock()
}

func (f *fakeSidecar) setResolve(r func(ctx context.Context, p rpc.ResolveParams) (rpc.ResolveResult, error)) {
	f.mu.Lock()
	f.resolve = r
	f.mu.Unlock()
}

func (f *fakeSidecar) sent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sends)
}

func okAnswer(f *fakeSidecar, p rpc.MutateParams) rpc.MutateResult {
	return rpc.MutateResult{
		Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, InvocationID: p.InvocationID, Epoch: f.Epoch(),
		ObservedLatestVersion: p.PinnedVersion + 1, CommittedVersion: p.PinnedVersion + 1,
	}
}

// blockUntilCtx is an answer that never comes: the call ends only with its context.
func blockUntilCtx(ctx context.Context, _ rpc.MutateParams) (rpc.MutateResult, error) {
	<-ctx.Done()
	return rpc.MutateResult{}, ctx.Err()
}

// testClock is wall time plus an offset the test moves forward.
type testClock struct{ off atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *testClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

type env struct {
	t     *testing.T
	path  string
	store *BoltStore
	d     *Dispatcher
	clock *testClock
	cfg   Config
}

// newEnv opens a bolt store in a temp dir and a dispatcher on it; mod adjusts the config.
func newEnv(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	e := &env{t: t, path: filepath.Join(t.TempDir(), "jobs.db"), clock: &testClock{}}
	e.cfg = Config{
		Interval: 10 * time.Millisecond, ExecuteDeadline: time.Minute, ResolveRetryInterval: time.Nanosecond,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "dispatch", Level: hclog.Warn}), Now: e.clock.Now,
	}
	if mod != nil {
		mod(&e.cfg)
	}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) open() {
	e.t.Helper()
	s, err := OpenBolt(e.path, BoltOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.store = s
	cfg := e.cfg
	cfg.Store = s
	d, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.d = d
}

func (e *env) close() {
	if e.d != nil {
		e.d.Close()
		e.store.Close()
		e.d = nil
	}
}

// reopen simulates a dispatcher restart on the same store file.
func (e *env) reopen() {
	e.close()
	e.open()
}

func (e *env) round() RoundStats {
	e.t.Helper()
	st, err := e.d.Round(context.Background())
	if err != nil {
		e.t.Fatalf("round: %v", err)
	}
	return st
}

func (e *env) job(id string) Job {
	e.t.Helper()
	j, err := e.d.Get(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// waitJob runs rounds until cond holds for job id.
func (e *env) waitJob(id string, what string, cond func(Job) bool) Job {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		e.round()
		j := e.job(id)
		if cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %s never %s: %+v", id, what, j)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) submit(r Request) Job {
	e.t.Helper()
	j, err := e.d.Submit(context.Background(), r)
	if err != nil {
		e.t.Fatalf("submit: %v", err)
	}
	return j
}

func fakeRequest(name string) Request {
	return Request{
		Dataset:         rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file:///nowhere"}, Path: "ds"},
		AdmittedVersion: 1, Op: rpc.OpCreate,
		Index: rpc.IndexSpec{Name: name, Columns: []string{"id"}, Type: rpc.IndexBTree},
	}
}

func settled(j Job) bool             { return j.State.Settled() }
func stateIs(s State) func(Job) bool { return func(j Job) bool { return j.State == s } }

func sha(b []byte) [32]byte { return sha256.Sum256(b) }

// noLeaks checks for leaked goroutines after every cleanup registered later has run. The waiters
// of the test binary's shared etcd cluster (testetcd.Shared) live as long as the binary.
func noLeaks(t *testing.T) {
	t.Cleanup(func() {
		goleak.VerifyNone(t, goleak.IgnoreAnyFunction("github.com/cba1309c/steward/internal/lockedproc.Start.func1"))
	})
}
