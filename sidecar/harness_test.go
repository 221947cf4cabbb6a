package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testbin"
	"github.com/cba1309c/steward/internal/testenv"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/hashicorp/go-hclog"
)

// sidecarEnv is one real sidecar process with a private cgroup parent, and a local dataset.
type sidecarEnv struct {
	t      testing.TB
	c      *host.Client
	parent string // cgroup parent of this sidecar's worker domains
	root   string // local store directory
	store  storage.Store
	logs   *lockedBuffer

	mu       sync.Mutex
	progress []rpc.ProgressParams
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

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
	testenv.NeedRoot(t)
	e := &sidecarEnv{t: t, parent: randID("steward-test-"), root: t.TempDir(), logs: &lockedBuffer{}}
	args := append([]string{"--test-faults", "--cgroup-parent", e.parent, "--term-grace", "500ms",
		"--reap-bound", "3s", "--clock-skew", "100ms", "--min-runnable", "300ms", "--worker-memory", "268435456"}, extra...)
	logger := hclog.New(&hclog.LoggerOptions{Name: "test", Output: e.logs, Level: hclog.Debug, JSONFormat: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := host.LaunchStdio(ctx, host.Config{Path: testbin.Steward(t), Args: args, Logger: logger, Env: env,
		OnNotify: func(method string, params json.RawMessage) {
			var p rpc.ProgressParams
			if method == rpc.NotifyProgress && json.Unmarshal(params, &p) == nil {
				e.mu.Lock()
				e.progress = append(e.progress, p)
				e.mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatalf("launch sidecar: %v", err)
	}
	if iso := c.Info().Isolation; iso == nil || !iso.Verified {
		c.Close()
		testenv.Unavailable(t, fmt.Sprintf("isolation did not verify: %+v", iso))
	}
	e.c = c
	st, err := storage.OpenStore(ctx, storage.StoreConfig{Kind: storage.KindLocal, Root: e.root})
	if err != nil {
		t.Fatal(err)
	}
	e.store = st
	t.Cleanup(func() {
		c.Close()
		e.assertNoLeftovers()
	})
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
	e.assertDomainGone(p.InvocationID)
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
// answer arrives; the only domains left are idle spares (at most one per executor).
func (e *sidecarEnv) assertDomainGone(inv string) {
	e.t.Helper()
	dom := e.domainOf(inv)
	if dom == "" {
		return // never launched (rejected before launch)
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
				if d.Name() == dom {
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
	if pids := processesIn(e.parent + "/" + "*/" + dom); len(pids) > 0 {
		e.t.Errorf("processes of %s's domain left after the answer: %v", inv, pids)
	}
}

// assertNoDomains checks that no worker cgroup and no process in one exists: the answer is sent
// only after the domain is dead, reaped and removed.
func (e *sidecarEnv) assertNoDomains() {
	e.t.Helper()
	for _, h := range hierarchies {
		owners, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h, e.parent))
		for _, o := range owners {
			if !o.IsDir() {
				continue
			}
			domains, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h, e.parent, o.Name()))
			for _, d := range domains {
				if d.IsDir() {
					e.t.Errorf("worker cgroup left after the answer: %s/%s/%s/%s", h, e.parent, o.Name(), d.Name())
				}
			}
		}
	}
	if pids := processesIn(e.parent); len(pids) > 0 {
		e.t.Errorf("processes left in %s after the answer: %v", e.parent, pids)
	}
}

// processesIn lists processes whose cgroup path matches "/parent/" or, for a pattern
// "parent/*/domain", has parent and domain as components.
func processesIn(pattern string) []string {
	parent, domain, _ := strings.Cut(pattern, "/*/")
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(b), "/"+parent+"/") {
			continue
		}
		if domain == "" || strings.Contains(string(b), "/"+domain+"\n") || strings.Contains(string(b), "/"+domain+"/") {
			out = append(out, ent.Name())
		}
	}
	return out
}

// assertNoLeftovers runs after the sidecar exited: its whole cgroup parent must be removable.
func (e *sidecarEnv) assertNoLeftovers() {
	e.t.Helper()
	e.assertNoDomains()
	for _, h := range hierarchies {
		dir := filepath.Join("/sys/fs/cgroup", h, e.parent)
		owners, _ := os.ReadDir(dir)
		for _, o := range owners {
			if o.IsDir() {
				if err := os.Remove(filepath.Join(dir, o.Name())); err != nil {
					e.t.Errorf("owner cgroup %s/%s not removable: %v", dir, o.Name(), err)
				}
			}
		}
		if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
			e.t.Errorf("cgroup parent %s not removable: %v", dir, err)
		}
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
func removeParent(parent string) {
	for _, h := range hierarchies {
		dir := filepath.Join("/sys/fs/cgroup", h, parent)
		owners, _ := os.ReadDir(dir)
		for _, o := range owners {
			if o.IsDir() {
				os.Remove(filepath.Join(dir, o.Name()))
			}
		}
		os.Remove(dir)
	}
}
