package sidecar

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"unsafe"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// supervisorLauncher is the supervisor's launcher, owned by it and ended by its Close (cleanup):
// the pool's tests check that the pool leaves nothing else behind.
var supervisorLauncher = goleak.IgnoreAnyFunction("github.com/cba1309c/steward/isolation.startLauncher.func1")

// spareTestMemory is each test spare's memory limit.
const spareTestMemory = 64 << 20

// testSparePool is a spare pool over a real supervisor whose workers are the built steward-worker,
// with a memory budget of n spares. Its cleanup closes the supervisor and removes its cgroups.
func testSparePool(t *testing.T, n int64) *sparePool {
	t.Helper()
	parent := testbin.RandID("steward-spares-")
	cfg := Config{Isolation: isolation.Config{Parent: parent, WorkerPath: testbin.Worker(t), WorkerArgs: []string{"worker"},
		MemoryLimit: spareTestMemory}, TempDir: t.TempDir(), Logger: hclog.NewNullLogger()}.withDefaults()
	// isolation.New makes this process a child subreaper: undone at cleanup, or the orphans of
	// the sidecars later tests kill would wait here as zombies, unreaped.
	var subreaper int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&subreaper)), 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	iso, err := isolation.New(cfg.Isolation)
	if err != nil {
		testenv.Unavailable(t, "isolation unavailable: "+err.Error())
	}
	t.Cleanup(func() {
		_ = iso.Close(context.Background())
		removeCgroupParent(t, parent)
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, uintptr(subreaper), 0, 0, 0); err != nil {
			t.Error(err)
		}
	})
	s := &Server{cfg: cfg, log: cfg.Logger, iso: iso, tempDir: t.TempDir(), budget: newMemBudget(n * spareTestMemory)}
	builtin := &engine{name: workerproto.BuiltinName, decl: workerproto.Builtin()}
	return newSparePool(s.log, s.launch, s.budget, spareTestMemory, builtin, iso.CPUs(), iso.Contained())
}

// removeCgroupParent removes parent's directories in every cgroup hierarchy, deepest first.
func removeCgroupParent(t *testing.T, parent string) {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, root := range append(roots, "/sys/fs/cgroup") {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(root, parent), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			if err := os.Remove(d); err != nil {
				t.Errorf("cgroup left: %v", err)
			}
		}
	}
}

// TestSparePoolCloseKillsIdleSpares: Close tears down every idle spare (its domain is dead and
// reaped, its grant given back), starts none after it, and leaves no goroutine behind.
func TestSparePoolCloseKillsIdleSpares(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	p := testSparePool(t, 3)
	var spares []*worker
	for range 2 {
		w := p.start(true)
		if w == nil {
			t.Fatal("no spare started with budget free")
		}
		spares = append(spares, w)
	}
	if st := p.budget.state(); st.used != 2*spareTestMemory || st.spares != 2*spareTestMemory {
		t.Fatalf("two idle spares hold %+v of the budget, want 2×%d as spares", st, spareTestMemory)
	}
	p.Close()
	for i, w := range spares {
		if !isClosed(w.dom.Done()) {
			t.Errorf("spare %d (%s) still runs after Close", i, w.dom.ID())
		}
		if _, err := os.Stat(w.tempDir); !os.IsNotExist(err) {
			t.Errorf("spare %d's temp dir is still there: %v", i, err)
		}
		if p.isIdle(w) {
			t.Errorf("spare %d is still idle after Close", i)
		}
	}
	if st := p.budget.state(); st.used != 0 || st.spares != 0 {
		t.Errorf("budget after Close: %+v, want nothing in use", st)
	}
	if w := p.start(true); w != nil {
		t.Errorf("a closed pool started spare %s", w.dom.ID())
		w.discard()
	}
	p.Close() // a second Close finds nothing
	goleak.VerifyNone(t, ignore, supervisorLauncher)
}

// TestSparePoolBudgetRetireAndClaim: a spare holds the configured limit of the budget and never
// waits for it; retiring one for a waiting call gives its grant back; a call with a lower limit
// cannot take a spare (it is torn down, its grant given back); a call with the configured ones
// takes it, grant and all, and a retired spare is taken by nobody.
func TestSparePoolBudgetRetireAndClaim(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	p := testSparePool(t, 2)
	defer p.Close()
	a, b := p.start(true), p.start(true)
	if a == nil || b == nil {
		t.Fatal("two spares did not start within a budget of two")
	}
	if w := p.start(true); w != nil {
		t.Fatalf("a third spare %s started past the budget", w.dom.ID())
	}
	if !p.retire() {
		t.Fatal("retire found no idle spare")
	}
	retired, kept := a, b
	if p.isIdle(a) {
		retired, kept = b, a
	}
	if st := p.budget.state(); st.used != spareTestMemory || st.spares != spareTestMemory || !isClosed(retired.dom.Done()) {
		t.Fatalf("after a retire: budget %+v, retired spare dead %v; want one spare's grant", st, isClosed(retired.dom.Done()))
	}
	if w := p.claim(retired, p.builtin, launchOptions{}, "inv-retired"); w != nil {
		t.Fatal("a retired spare was claimed")
	}
	if w := p.claim(kept, p.builtin, launchOptions{memory: spareTestMemory / 2}, "inv-lower"); w != nil || !isClosed(kept.dom.Done()) {
		t.Fatalf("a call with a lower memory limit took the spare (%v) or left it running", w != nil)
	}
	if st := p.budget.state(); st.used != 0 {
		t.Fatalf("after the unfit claim: budget %+v, want nothing in use", st)
	}
	c := p.start(true)
	if c == nil {
		t.Fatal("no spare started once the budget was free again")
	}
	w := p.claim(c, p.builtin, launchOptions{}, "inv-fits")
	if w != c || isClosed(c.dom.Done()) {
		t.Fatal("a call with the configured limits did not take the live spare")
	}
	if st := p.budget.state(); st.used != spareTestMemory || st.spares != 0 {
		t.Fatalf("a claimed spare's grant: budget %+v, want its call's, no spare's", st)
	}
	w.discard()
	p.Close()
	goleak.VerifyNone(t, ignore, supervisorLauncher)
}
