package sidecar_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/slot"
)

// buildTestEngine builds internal/testing/testengine, a toy engine written against the Go SDK.
func buildTestEngine(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(testenv.GuestDir(t), "testengine") // the guest execs it
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "../internal/testing/testengine")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testengine: %v\n%s", err, out)
	}
	return bin
}

// TestEngineRegistry: engines other than the built-in one, registered with --engine and written
// against the Go SDK, reach storage through their gateway and are judged by storage alone. hello
// lists every engine with settle "fence" — including one registered with --settle none — and
// leaves out one that does not start. A claimed commit with no manifest is INDETERMINATE -23 and
// index.resolve, for either engine, fences the slot and answers NOT_COMMITTED. A manifest PUT
// through the gateway commits: the sidecar claimed the slot for it first, the answer is
// COMMITTED, resolve agrees, and the engine's objects are kept; a second writer of the same
// version is refused at the gateway and answers NOT_COMMITTED; a commit the engine denies is
// -23 and resolve says COMMITTED. What the uncommitted invocations wrote is deleted by custody;
// every domain's TMPDIR is removed; undeclared types and faults are -32602.
func TestEngineRegistry(t *testing.T) {
	bin := buildTestEngine(t)
	tmp := t.TempDir()
	noTempDirsLeft(t, tmp)
	e := newSidecarWithEnv(t, append(os.Environ(), "TMPDIR="+tmp), "--state-dir", t.TempDir(),
		"--engine", "toy="+bin+" --settle fence", "--engine", "loose="+bin+" --settle none", "--engine", "broken=/bin/false")
	got := map[string]string{}
	for _, eng := range e.c.Info().Engines {
		got[eng.Name] = eng.Settle + " " + strings.Join(eng.IndexTypes, ",")
	}
	if len(got) != 3 || got["builtin"] != "fence BTREE,BITMAP" || got["toy"] != "fence TOY" || got["loose"] != "fence TOY" {
		t.Fatalf("hello engines %v", got)
	}
	for _, ds := range []string{"ds", "commit", "deny"} {
		e.makeDataset(ds, 100)
	}
	mut := func(engine, path, commit string) rpc.MutateResult {
		p := e.params(randID("inv-"), path, 1, rpc.OpCreate, "ix", "name", "TOY")
		p.Engine = engine
		if commit != "" {
			p.Index.Params = map[string]string{"commit": commit}
		}
		return e.mutate(p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resolve := func(res rpc.MutateResult, engine, path string) rpc.ResolveResult {
		r, err := e.c.Resolve(ctx, rpc.ResolveParams{InvocationID: res.InvocationID, Engine: engine, PinnedVersion: 1,
			Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + e.root}, Path: path}})
		if err != nil {
			t.Fatalf("resolve %s: %v", res.InvocationID, err)
		}
		return r
	}
	wrote := func(res rpc.MutateResult) bool {
		return res.Phase == rpc.PhaseNativeReturn && res.Code == rpc.NativeNotSupported &&
			strings.HasSuffix(res.Message, "/part-0.toy=ok")
	}
	if res := mut("toy", "ds", ""); !wrote(res) {
		t.Errorf("toy: %+v, want NOT_SUPPORTED after its object went through its gateway", res)
	}
	for _, engine := range []string{"toy", "loose"} {
		lie := mut(engine, "ds", "lie")
		if lie.Phase != rpc.PhaseIndeterminate || lie.Code != rpc.ReasonUnconfirmedCommit || lie.CommittedVersion != 0 {
			t.Errorf("%s: a claimed commit storage lacks: %+v, want INDETERMINATE -23", engine, lie)
		}
		if r := resolve(lie, engine, "ds"); r.Outcome != rpc.OutcomeNotCommitted || !r.Fenced {
			t.Errorf("%s: resolve of a claimed commit storage lacks: %+v, want NOT_COMMITTED, fenced", engine, r)
		}
		fence, err := slot.Read(ctx, e.store, "ds", 2, lie.InvocationID)
		if err != nil || fence.Kind != slot.KindFence {
			t.Errorf("%s: the fence resolve wrote: %+v %v", engine, fence, err)
		}
	}
	// A real commit through the slot, and a second writer of the same version.
	won := mut("toy", "commit", "yes")
	if won.Phase != rpc.PhaseNativeReturn || won.Code != rpc.NativeOK || won.CommittedVersion != 2 {
		t.Fatalf("a commit through the gateway: %+v, want NATIVE_RETURN 0 at version 2", won)
	}
	if c, err := slot.Read(ctx, e.store, "commit", 2, won.InvocationID); err != nil || c.Kind != slot.KindCommit ||
		c.Key != "commit/_versions/00000000000000000002.manifest" {
		t.Errorf("the sidecar's claim of the commit: %+v %v", c, err)
	}
	if r := resolve(won, "toy", "commit"); r.Outcome != rpc.OutcomeCommitted || r.Fenced {
		t.Errorf("resolve of the commit: %+v", r)
	}
	lost := mut("toy", "commit", "yes")
	if lost.Phase != rpc.PhaseNativeReturn || lost.Code != rpc.NativeNotSupported || !strings.HasSuffix(lost.Message, "; put the manifest=PreconditionFailed") {
		t.Errorf("a second commit of version 2: %+v, want the gateway's PreconditionFailed", lost)
	}
	if r := resolve(lost, "toy", "commit"); r.Outcome != rpc.OutcomeNotCommitted {
		t.Errorf("resolve of the second writer: %+v", r)
	}
	denied := mut("toy", "deny", "deny")
	if denied.Phase != rpc.PhaseIndeterminate || denied.Code != rpc.ReasonUnconfirmedCommit {
		t.Errorf("a commit the engine denies: %+v, want INDETERMINATE -23", denied)
	}
	if r := resolve(denied, "toy", "deny"); r.Outcome != rpc.OutcomeCommitted {
		t.Errorf("resolve of the denied commit: %+v, want COMMITTED", r)
	}
	for name, p := range map[string]rpc.MutateParams{
		"unknown engine": func() rpc.MutateParams {
			p := e.params("inv-x1", "ds", 1, rpc.OpCreate, "ix", "name", "TOY")
			p.Engine = "broken"
			return p
		}(),
		"undeclared type": func() rpc.MutateParams {
			p := e.params("inv-x2", "ds", 1, rpc.OpCreate, "ix", "name", "BTREE")
			p.Engine = "toy"
			return p
		}(),
		"builtin and TOY": e.params("inv-x3", "ds", 1, rpc.OpCreate, "ix", "name", "TOY"),
		"undeclared fault": func() rpc.MutateParams {
			p := e.params("inv-x4", "ds", 1, rpc.OpCreate, "ix", "name", "TOY")
			p.Engine = "toy"
			p.Fault = "hang"
			return p
		}(),
	} {
		if _, err := e.c.Mutate(ctx, p); !errors.Is(err, rpc.ErrInvalidParams) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Custody: the four uncommitted invocations' objects are deleted, the two committed ones'
	// kept (the denied commit is in storage all the same).
	st := waitTickets(t, e.c, 0)
	left, _ := filepath.Glob(filepath.Join(e.root, "*", "_indices", "toy-*", "*"))
	slices.Sort(left)
	want := []string{filepath.Join(e.root, "commit", "_indices", "toy-"+won.InvocationID, "part-0.toy"),
		filepath.Join(e.root, "deny", "_indices", "toy-"+denied.InvocationID, "part-0.toy")}
	slices.Sort(want)
	if st.Deleted != 4 || !slices.Equal(left, want) {
		t.Errorf("ledger %+v and toy objects left %v: want the 4 uncommitted ones deleted and %v kept", st, left, want)
	}
}

// TestEngineSpares: executors keep their spares for the engine of the last call, for any store:
// a spare reaches no store until its request opens its gateway (its key comes with the
// request). The first toy call starts cold (the spares are the built-in engine's); once the
// spares have followed it, the next toy calls are served by prestarted toy workers, with a key of
// each call's own; a built-in call after them starts cold again, and the built-in calls after
// that find built-in spares; a toy spare serves a file:// dataset as it serves an s3:// one. At
// most one idle spare per executor exists at any time. An idle toy spare is frozen once its
// start-up has had 2 s (the built-in ones never are), and thawed to serve.
func TestEngineSpares(t *testing.T) {
	bin := buildTestEngine(t)
	e := newLedgerEnv(t, "--engine", "toy="+bin+" --settle fence")
	ctx := context.Background()
	if _, _, err := dataset.Create(ctx, e.store, "ds", dataset.NewGenerator(100, 1), dataset.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	s3 := rpc.DatasetRef{Store: e.spec, Path: "ds"}
	local := rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + t.TempDir()}, Path: "ds"}
	for i, step := range []struct {
		engine     string
		ds         rpc.DatasetRef
		prestarted bool
		idle       bool // wait past spareFreezeAfter first: the toy spares are frozen, and thawed to serve
	}{
		{"toy", s3, false, false}, {"toy", s3, true, false}, {"toy", s3, true, true}, {"builtin", s3, false, true},
		{"builtin", s3, true, false}, {"toy", local, false, false}, {"toy", local, true, false},
		{"builtin", s3, false, false}, {"builtin", s3, true, false},
	} {
		time.Sleep(300 * time.Millisecond) // the spares follow the last call
		if step.idle {
			time.Sleep(2500 * time.Millisecond)
			idle := idleSpares(e.sc.Parent)
			if len(idle) == 0 {
				t.Fatalf("call %d: no idle spare to look at", i)
			}
			for name, frozen := range idle {
				if !frozen {
					t.Errorf("call %d: idle toy spare %s is not frozen after %v", i, name, 2500*time.Millisecond)
				}
			}
			// A frozen spare's memory is what hello reports for its engine.
			if h, err := e.c.Hello(ctx); err != nil || idleMemory(h, "toy") <= 0 {
				t.Errorf("call %d: hello after a frozen toy spare: idle_memory_bytes %d, %v", i, idleMemory(h, "toy"), err)
			}
		}
		p := rpc.MutateParams{InvocationID: randID("inv-"), DeadlineUnixMs: time.Now().Add(45 * time.Second).UnixMilli(),
			Dataset: step.ds, PinnedVersion: 1, Op: rpc.OpCreate, Engine: step.engine,
			Index: rpc.IndexSpec{Name: "ix", Columns: []string{"name"}, Type: "TOY", Params: map[string]string{"report": "credentials"}}}
		want := rpc.NativeNotSupported
		if step.engine == "builtin" {
			latest, err := dataset.LatestVersion(ctx, e.store, "ds")
			if err != nil {
				t.Fatal(err)
			}
			p.PinnedVersion, p.IfNotExists = latest, true
			p.Index = rpc.IndexSpec{Name: "ix", Columns: []string{"id"}, Type: rpc.IndexBTree}
			want = rpc.NativeOK
		}
		res, err := e.c.Mutate(ctx, p)
		if err != nil || res.Phase != rpc.PhaseNativeReturn || res.Code != want {
			t.Fatalf("call %d (%s): %+v %v", i, step.engine, res, err)
		}
		if got := servedBySpare(t, e.logs, p.InvocationID); got != step.prestarted {
			t.Errorf("call %d (%s on %s): prestarted %v, want %v", i, step.engine, step.ds.Store.URL, got, step.prestarted)
		}
		if n := domainsIn(e.sc.Parent); n > 2 {
			t.Errorf("call %d: %d domains after the answer, want at most one idle spare per executor", i, n)
		}
	}
}

// TestEngineSpareBesideQueuedJob: with one executor and toy calls queued behind each other, the
// executor starts its next toy spare beside the job it runs (its start-up is not left in front
// of the next job), and every call is answered, with at most the running domain and one spare
// per executor at a time beyond the calls' own.
func TestEngineSpareBesideQueuedJob(t *testing.T) {
	bin := buildTestEngine(t)
	e := newLedgerEnv(t, "--engine", "toy="+bin+" --settle fence", "--executors", "1", "--log-level", "debug")
	ctx := context.Background()
	if _, _, err := dataset.Create(ctx, e.store, "ds", dataset.NewGenerator(100, 1), dataset.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	call := func() error {
		p := rpc.MutateParams{InvocationID: randID("inv-"), DeadlineUnixMs: time.Now().Add(60 * time.Second).UnixMilli(),
			Dataset: rpc.DatasetRef{Store: e.spec, Path: "ds"}, PinnedVersion: 1, Op: rpc.OpCreate, Engine: "toy",
			Index: rpc.IndexSpec{Name: "ix", Columns: []string{"name"}, Type: "TOY", Params: map[string]string{"report": "credentials"}}}
		res, err := e.c.Mutate(ctx, p)
		if err == nil && (res.Phase != rpc.PhaseNativeReturn || res.Code != rpc.NativeNotSupported) {
			err = fmt.Errorf("%s: %+v", p.InvocationID, res)
		}
		return err
	}
	// The first toy call starts cold and the spares follow it; the calls after it queue.
	if err := call(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	const n = 6
	errs := make(chan error, n)
	for range n {
		go func() { errs <- call() }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(e.logs.String(), "spare started beside a job, jobs queued") {
		t.Errorf("no spare was started beside a job while %d calls queued on one executor", n)
	}
}

// idleMemory is engine name's idle_memory_bytes in hello.
func idleMemory(h rpc.HelloResult, name string) int64 {
	for _, e := range h.Engines {
		if e.Name == name {
			return e.IdleMemoryBytes
		}
	}
	return 0
}

// servedBySpare reports, from the sidecar's "worker assigned" line for inv (waited for up to 5 s:
// another goroutine than the answer's writes it), whether a prestarted worker served inv.
func servedBySpare(t *testing.T, logs *testsidecar.Logs, inv string) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, inv) && strings.Contains(l, `"worker assigned"`) {
				return strings.Contains(l, `"prestarted":true`)
			}
		}
	}
	t.Fatalf("no \"worker assigned\" line for %s", inv)
	return false
}

// idleSpares lists the idle spares' domains under cgroup parent, each with whether it is frozen:
// by its cgroup2 group (hybrid's unified hierarchy, or pure v2), else its v1 freezer group.
func idleSpares(parent string) map[string]bool {
	out := map[string]bool{}
	for _, h := range []struct{ root, file, frozen string }{
		{"/sys/fs/cgroup/unified", "cgroup.events", "frozen 1"},
		{"/sys/fs/cgroup", "cgroup.events", "frozen 1"},
		{"/sys/fs/cgroup/freezer", "freezer.state", "FROZEN"},
	} {
		dirs, _ := filepath.Glob(filepath.Join(h.root, parent, "*", "spare-*"))
		for _, d := range dirs {
			if b, err := os.ReadFile(filepath.Join(d, h.file)); err == nil {
				out[filepath.Base(d)] = strings.Contains(string(b), h.frozen)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return out
}
