package sidecar_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testenv"
	"github.com/cba1309c/steward/internal/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage/dataset"
)

// buildTestEngine builds internal/testengine, a toy engine written against the Go SDK.
func buildTestEngine(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(testenv.GuestDir(t), "testengine") // the guest execs it
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "../internal/testengine")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build testengine: %v\n%s", err, out)
	}
	return bin
}

// TestEngineRegistry: engines other than the built-in one, registered with --engine and written
// against the Go SDK. hello lists each with its guarantee; a claimed commit that the engine's own
// settle does not confirm is INDETERMINATE -23; the prefix the engine reserved is deleted with
// what it wrote under it; its private TMPDIR is removed; an engine declaring settle none is never
// settled by index.resolve; an engine that does not start is not registered.
func TestEngineRegistry(t *testing.T) {
	bin := buildTestEngine(t)
	tmp := t.TempDir()
	noTempDirsLeft(t, tmp)
	// Its own state dir: the loose engine's ticket stays in this journal (a person's to settle),
	// and no later sidecar of this test process should adopt it.
	e := newSidecarWithEnv(t, append(os.Environ(), "TMPDIR="+tmp), "--state-dir", t.TempDir(),
		"--engine", "toy="+bin+" --settle fence", "--engine", "loose="+bin+" --settle none", "--engine", "broken=/bin/false")
	got := map[string]string{}
	for _, eng := range e.c.Info().Engines {
		got[eng.Name] = eng.Settle + " " + strings.Join(eng.IndexTypes, ",")
	}
	if len(got) != 3 || got["builtin"] != "fence BTREE,BITMAP" || got["toy"] != "fence TOY" || got["loose"] != "none TOY" {
		t.Fatalf("hello engines %v", got)
	}
	e.makeDataset("ds", 100)
	mut := func(engine, claim string) rpc.MutateResult {
		p := e.params(randID("inv-"), "ds", 1, rpc.OpCreate, "ix", "name", "TOY")
		p.Engine = engine
		if claim != "" {
			p.Index.Params = map[string]string{"claim": claim}
		}
		return e.mutate(p)
	}
	if res := mut("toy", ""); res.Phase != rpc.PhaseNativeReturn || res.Code != rpc.NativeNotSupported {
		t.Errorf("toy: %+v", res)
	}
	lie := mut("toy", "commit")
	if lie.Phase != rpc.PhaseIndeterminate || lie.Code != rpc.ReasonUnconfirmedCommit || lie.CommittedVersion != 0 {
		t.Errorf("a claimed commit the slot does not hold: %+v", lie)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := e.c.Resolve(ctx, rpc.ResolveParams{InvocationID: lie.InvocationID, Engine: "toy", PinnedVersion: 1,
		Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + e.root}, Path: "ds"}})
	if err != nil || r.Outcome != rpc.OutcomeNotCommitted {
		t.Errorf("resolve through the toy's settle: %+v %v", r, err)
	}
	loose := mut("loose", "")
	r, err = e.c.Resolve(ctx, rpc.ResolveParams{InvocationID: loose.InvocationID, Engine: "loose", PinnedVersion: 1,
		Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + e.root}, Path: "ds"}})
	if err != nil || r.Outcome != rpc.OutcomeUnknown {
		t.Errorf("resolve of an engine without a settle guarantee: %+v %v", r, err)
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
	// Custody: the loose engine's tickets stay until a person settles them (its settle is never
	// trusted); the toy's were abandoned and everything under its prefixes deleted.
	var st rpc.ObjectsStatusResult
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := e.c.Call(ctx, rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{}, &st); err != nil {
			t.Fatal(err)
		}
		if st.Ledger.PendingDelete == 0 && st.Ledger.Used <= 1 || time.Now().After(deadline) {
			break
		}
	}
	left, _ := filepath.Glob(filepath.Join(e.root, "ds", "_indices", "toy-*", "*"))
	t.Logf("ledger after the toy runs: %+v; objects left under toy prefixes: %v", st.Ledger, left)
	if st.Ledger.PrefixObjectsDeleted != 2 || st.Ledger.Used != 1 || len(left) != 1 || !strings.Contains(left[0], loose.InvocationID) {
		t.Errorf("want the toy's two prefixes deleted and only the loose engine's kept: %+v, left %v", st.Ledger, left)
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
