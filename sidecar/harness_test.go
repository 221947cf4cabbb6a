package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
)

// sidecarEnv is one real sidecar process (internal/testing/testsidecar: private cgroup parent, leftover
// check at cleanup) and a local dataset store.
type sidecarEnv struct {
	t      testing.TB
	c      *host.Client
	parent string // cgroup parent of this sidecar's worker domains
	root   string // local store directory
	store  storage.Store
	logs   *testsidecar.Logs
	sc     *testsidecar.Sidecar // the process: Restart starts a successor on the same parent

	mu       sync.Mutex
	progress []rpc.ProgressParams
}

// lockedBuffer is a goroutine-safe buffer (a process's stderr, say).
type lockedBuffer = testsidecar.Logs

func randID(prefix string) string { return testbin.RandID(prefix) }

// newSidecar starts `steward serve` over stdio with test faults on, short kill-ladder timings and
// a private cgroup parent. At cleanup it shuts the sidecar down and checks that no worker process
// and no cgroup of it is left.
func newSidecar(t *testing.T, extra ...string) *sidecarEnv {
	t.Helper()
	return newSidecarWithEnv(t, nil, extra...)
}

// newSidecarWithEnv is newSidecar with an explicit environment for the sidecar (nil: inherit).
func newSidecarWithEnv(t testing.TB, env []string, extra ...string) *sidecarEnv {
	t.Helper()
	return newSidecarOpts(t, testsidecar.Options{Args: extra, Env: env})
}

// newSidecarOpts is newSidecar with testsidecar options (OnNotify is the env's own).
func newSidecarOpts(t testing.TB, opts testsidecar.Options) *sidecarEnv {
	t.Helper()
	e := &sidecarEnv{t: t, root: testenv.GuestDir(t)}
	opts.OnNotify = func(method string, params json.RawMessage) {
		var p rpc.ProgressParams
		if method == rpc.NotifyProgress && json.Unmarshal(params, &p) == nil {
			e.mu.Lock()
			e.progress = append(e.progress, p)
			e.mu.Unlock()
		}
	}
	sc := testsidecar.Start(t, opts)
	e.c, e.parent, e.logs, e.sc = sc.Client, sc.Parent, sc.Logs, sc
	st, err := storage.OpenStore(context.Background(), storage.StoreConfig{Kind: storage.KindLocal, Root: e.root})
	if err != nil {
		t.Fatal(err)
	}
	e.store = st
	return e
}

// makeDataset creates a generated dataset at path and returns its version (1).
func (e *sidecarEnv) makeDataset(path string, rows int64) {
	e.t.Helper()
	_, _, err := dataset.Create(context.Background(), e.store, path, dataset.NewGenerator(rows, 7), dataset.WriteOptions{RowsPerFragment: int(rows/2 + 1)})
	if err != nil {
		e.t.Fatalf("create dataset: %v", err)
	}
}

func (e *sidecarEnv) params(inv, path string, pinned int64, op, name, column, typ string) rpc.MutateParams {
	p := rpc.MutateParams{
		InvocationID: inv, JobID: "job-" + inv, DeadlineUnixMs: time.Now().Add(30 * time.Second).UnixMilli(),
		Dataset:       rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + e.root}, Path: path},
		PinnedVersion: pinned, Op: op, Index: rpc.IndexSpec{Name: name, Type: typ},
	}
	if column != "" {
		p.Index.Columns = []string{column}
	}
	return p
}

func (e *sidecarEnv) mutate(p rpc.MutateParams) rpc.MutateResult {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := e.c.Mutate(ctx, p)
	if err != nil {
		e.t.Fatalf("mutate %s: %v", p.InvocationID, err)
	}
	if res.InvocationID != p.InvocationID || res.Epoch != e.c.Epoch() {
		e.t.Fatalf("identity echo: %+v", res)
	}
	e.assertDomainGone(p.InvocationID, res)
	return res
}

func (e *sidecarEnv) latest(path string) int64 {
	e.t.Helper()
	v, err := dataset.LatestVersion(context.Background(), e.store, path)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

var hierarchies = []string{"memory", "pids", "freezer", "unified"}

// domainOf finds, in the sidecar's log, the worker domain an invocation was assigned to.
func (e *sidecarEnv) domainOf(inv string) string {
	for _, line := range strings.Split(e.logs.String(), "\n") {
		var entry struct {
			Message    string `json:"@message"`
			Invocation string `json:"invocation"`
			Domain     string `json:"domain"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Message == "worker assigned" && entry.Invocation == inv {
			return entry.Domain
		}
	}
	return ""
}

// assertDomainGone checks that the domain that served inv is gone, cgroups and processes, when its
// answer res arrives; the only domains left are idle spares (at most one per executor).
//
// The domain's name is in the sidecar's "worker assigned" line, written before the answer but
// copied from its stderr by another goroutine than the one that read the answer: an answer a
// worker gave (a native return, an indeterminate end but a duplicate's) waits up to 5 s for the
// line and fails without it. A pre-invocation rejection may come from a launched domain (the
// worker ended before its request) or from none (refused at dequeue, a failed launch): with no
// line there is no domain of inv to look for, and only the count of what is left is checked.
func (e *sidecarEnv) assertDomainGone(inv string, res rpc.MutateResult) {
	e.t.Helper()
	ran := res.Phase == rpc.PhaseNativeReturn || (res.Phase == rpc.PhaseIndeterminate && res.Code != rpc.ReasonDuplicate)
	dom := e.domainOf(inv)
	for deadline := time.Now().Add(5 * time.Second); dom == "" && ran && time.Now().Before(deadline); dom = e.domainOf(inv) {
		time.Sleep(5 * time.Millisecond)
	}
	if dom == "" && ran {
		e.t.Errorf("no \"worker assigned\" line for %s (answered %s %d) within 5 s: its domain cannot be checked", inv, res.Phase, res.Code)
	}
	left := 0
	for _, h := range hierarchies {
		owners, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h, e.parent))
		for _, o := range owners {
			domains, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h, e.parent, o.Name()))
			for _, d := range domains {
				if !d.IsDir() {
					continue
				}
				if dom != "" && d.Name() == dom {
					e.t.Errorf("the domain of %s (%s) is still in %s after its answer", inv, dom, h)
				}
				if h == "unified" {
					left++
				}
			}
		}
	}
	if left > 2 {
		e.t.Errorf("%d worker domains exist after the answer; at most one idle spare per executor (2)", left)
	}
	if dom == "" {
		return
	}
	if pids := testsidecar.ProcessesIn(e.parent + "/" + "*/" + dom); len(pids) > 0 {
		e.t.Errorf("processes of %s's domain left after the answer: %v", inv, pids)
	}
}

func (e *sidecarEnv) resolve(inv, path string, pinned int64) rpc.ResolveResult {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.c.Resolve(ctx, rpc.ResolveParams{InvocationID: inv, PinnedVersion: pinned,
		Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + e.root}, Path: path}})
	if err != nil {
		e.t.Fatalf("resolve %s: %v", inv, err)
	}
	return res
}

// metric reads one unlabeled sample from the sidecar's metrics.
func metric(t testing.TB, e *sidecarEnv, name string) float64 {
	t.Helper()
	text, err := e.c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// newSidecarB is newSidecar for benchmarks.
func newSidecarB(b *testing.B) *sidecarEnv { return newSidecarWithEnv(b, nil) }

// removeParent removes a benchmark's cgroup parent from every hierarchy.
func removeParent(parent string) { _ = testsidecar.RemoveParent(parent) }

// sigkill SIGKILLs the sidecar behind c and waits until it has exited.
func sigkill(t testing.TB, c *host.Client) {
	t.Helper()
	proc, err := os.FindProcess(c.Pid())
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.Exited()
}

// noTempDirsLeft registers a cleanup that fails t if a domain's private temp dir (steward-*) is
// left in dir. Registered before the sidecar starts, it runs after the sidecar exited (its spares
// too).
func noTempDirsLeft(t testing.TB, dir string) {
	t.Cleanup(func() {
		if left, _ := filepath.Glob(filepath.Join(dir, "steward-*")); len(left) > 0 {
			t.Errorf("domain temp dirs left after the sidecar exited: %v", left)
		}
	})
}
