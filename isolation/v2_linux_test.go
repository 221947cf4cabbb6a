//go:build linux && v2guest

package isolation

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests of this file need a pure cgroup v2 host (cgroup2 alone, offering memory and pids),
// which this project's hybrid machines are not: they are built only with the v2guest tag, into
// the test binary internal/testing/v2vm boots under QEMU, and there they fail, never skip,
// without what they need.

func init() {
	helpers["oomgroup"] = helperOOMGroup
	helpers["whereami"] = helperWhereAmI
	helpers["delegated"] = helperDelegated
}

// needPureV2 fails t unless it runs as root on a pure v2 host.
func needPureV2(t testing.TB) {
	t.Helper()
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "needs root"
	case hostLayout() != "unified":
		why = "host cgroups are " + hostLayout() + ", not pure v2"
	case available(ModeV2) != nil:
		why = available(ModeV2).Error()
	default:
		return
	}
	t.Fatalf("pure cgroup v2 test: %s", why)
}

// TestV2LimitsReadBack: a v2 domain's interface files hold what steward promises: memory.max,
// memory.swap.max=0, memory.oom.group=1 and pids.max, and the preflight reports birth placement
// without a barrier.
func TestV2LimitsReadBack(t *testing.T) {
	needPureV2(t)
	s := newSupervisor(t, ModeV2, nil)
	r := s.Report()
	if !r.Verified || !r.BornInCgroup || r.Barrier || r.SwapLimit != 0 || !slices.Equal(r.Controllers, []string{"memory", "pids"}) {
		t.Fatalf("report %+v, want v2 verified, born in its cgroup, no barrier, swap 0, memory and pids", r)
	}
	const mem, pids = 48 << 20, 20
	d, read := startReporting(t, s, "ignoreterm-no", Spec{MemoryLimit: mem, PidsLimit: pids})
	read(1)
	dir := domainDir(s, d)
	for file, want := range map[string]int64{"memory.max": mem, "memory.swap.max": 0, "memory.oom.group": 1, "pids.max": pids} {
		got, err := readInt(filepath.Join(dir, file))
		if err != nil || got != want {
			t.Errorf("%s/%s = %d, %v; want %d", dir, file, got, err, want)
		}
	}
	if d.cg.mem != mem || d.cg.swap != 0 || d.cg.pids != pids {
		t.Errorf("limits read back as memory %d swap %d pids %d", d.cg.mem, d.cg.swap, d.cg.pids)
	}
	sub, err := os.ReadFile(filepath.Join(filepath.Dir(dir), "cgroup.subtree_control"))
	if f := strings.Fields(string(sub)); err != nil || !slices.Contains(f, "memory") || !slices.Contains(f, "pids") {
		t.Errorf("owner directory's subtree_control %q, %v: memory and pids must reach the domain", sub, err)
	}
	o, err := d.Terminate(context.Background())
	assertReaped(t, o, err, "term")
}

// TestV2LimitNotReadBackRejected: memory.max written as 2^63-1 bytes is clamped by the kernel to
// its page counter's maximum and reads back "max": a limit that does not read back as written
// fails the start (ErrLimitMismatch) and leaves no cgroup. The report lists memory.max,
// memory.swap.max=0, memory.oom.group=1 and pids.max as enforced.
func TestV2LimitNotReadBackRejected(t *testing.T) {
	needPureV2(t)
	s := newSupervisor(t, ModeV2, nil)
	enforced := map[string]int64{}
	for _, l := range s.Report().DomainLimits {
		if l.Enforced {
			enforced[l.File] = l.Value
		}
	}
	for file, want := range map[string]int64{"memory.max": DefaultMemoryLimit, "memory.swap.max": 0, "memory.oom.group": 1, "pids.max": DefaultPidsLimit} {
		if got, ok := enforced[file]; !ok || got != want {
			t.Errorf("report: %s enforced %v as %d, want %d (%+v)", file, ok, got, want, s.Report().DomainLimits)
		}
	}
	_, err := s.Start(context.Background(), Spec{ID: "unbounded", Env: workerEnv("noop"), MemoryLimit: 1<<63 - 1})
	if !errors.Is(err, ErrLimitMismatch) || !strings.Contains(err.Error(), "memory.max") {
		t.Fatalf("Start with memory.max 2^63-1 = %v, want ErrLimitMismatch on memory.max", err)
	}
	if _, err := os.Stat(filepath.Join(unifiedMount(), testParent, s.owner, "unbounded")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused domain's cgroup is still there: %v", err)
	}
}

// TestV2OOMGroupKillsTheWholeDomain: with memory.oom.group=1 an OOM kill takes every process of
// the domain, not one victim: the worker's three idle children die with the allocating worker
// before any kill of steward's, memory.events counts the group kill and the outcome is OOM-killed.
func TestV2OOMGroupKillsTheWholeDomain(t *testing.T) {
	needPureV2(t)
	s := newSupervisor(t, ModeV2, nil)
	d, read := startReporting(t, s, "oomgroup", Spec{MemoryLimit: 64 << 20})
	procs := starts(t, read(3))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	// The worker's exit was seen; its children were killed in the same OOM event.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		alive := 0
		for pid, start := range procs {
			if st, err := readProcStat(pid); err == nil && st.start == start && st.state != 'Z' {
				alive++
			}
		}
		if alive == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the worker's children outlived its OOM kill: memory.oom.group did not take the domain", alive)
		}
	}
	ev, err := os.ReadFile(filepath.Join(domainDir(s, d), "memory.events"))
	if err != nil {
		t.Fatal(err)
	}
	group, err1 := parseKey(ev, "oom_group_kill", "memory.events")
	kills, err2 := parseKey(ev, "oom_kill", "memory.events")
	if err := errors.Join(err1, err2); err != nil || group < 1 || kills < 4 {
		t.Fatalf("memory.events %q (%v): want oom_group_kill >= 1 and oom_kill >= 4 (the worker and its 3 children)", ev, err)
	}
	o, err := d.Terminate(ctx)
	if err != nil || !o.AllReaped || !o.OOMKilled || o.SignalName != "SIGKILL" {
		t.Fatalf("Terminate = %+v, %v; want all reaped, OOM-killed by SIGKILL", o, err)
	}
	assertAllGone(t, procs)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	assertCgroupsRemoved(t, s, d)
}

// helperOOMGroup starts three idle children, reports them, then allocates until the OOM killer
// comes.
func helperOOMGroup() {
	enter()
	for range 3 {
		spawn("block", "idle", false)
	}
	time.Sleep(200 * time.Millisecond) // the reports are on the pipe before the allocation starts
	helperAllocate()
}

// TestV2WorkerBornInItsCgroup: a v2 worker is cloned into its domain (CLONE_INTO_CGROUP), so its
// first look at /proc/self/cgroup, before anything could have moved it, already names the domain.
func TestV2WorkerBornInItsCgroup(t *testing.T) {
	needPureV2(t)
	s := newSupervisor(t, ModeV2, nil)
	if !s.Report().BornInCgroup || s.Report().Barrier {
		t.Fatalf("report %+v: want born in cgroup, no barrier", s.Report())
	}
	for i := range 5 {
		d, read := startReporting(t, s, "whereami", Spec{})
		l := read(1)[0]
		if want := "0::/" + s.CgroupPath(d); l.kind != want {
			t.Fatalf("worker %d's first /proc/self/cgroup line %q, want %q", i, l.kind, want)
		}
		if _, err := d.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		o, err := d.Terminate(context.Background())
		assertReaped(t, o, err, "exited")
	}
}

// helperWhereAmI reports its own /proc/self/cgroup line before doing anything else.
func helperWhereAmI() {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		os.Exit(3)
	}
	where := strings.TrimSpace(string(b))
	enter()
	report(where)
}

// delegatedReport is what the delegated helper found, as uid 65534 in a delegated subtree.
type delegatedReport struct {
	UID          int
	Report       Report
	OOM, Bomb    Outcome
	Ladder       Outcome
	PidsEvents   int64 // pids.events max of the fork bomb's domain
	PidsCurrent  int64
	LadderTookMs int64
}

// TestV2DelegatedUnprivileged: as systemd's Delegate=yes hands a service its cgroup, root
// creates a cgroup owned by uid 65534 and starts the helper there as that uid. With
// --cgroup-parent auto it moves itself into the supervisor leaf, enables memory and pids below its
// own cgroup and runs, unprivileged: an OOM kill, a fork bomb held at pids.max and the kill ladder
// ending in cgroup.kill. Afterwards only the leaf remains.
func TestV2DelegatedUnprivileged(t *testing.T) {
	needPureV2(t)
	const uid = 65534
	deleg := filepath.Join(unifiedMount(), testParent+"-delegated")
	if err := os.Mkdir(deleg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Remove(filepath.Join(deleg, LeafName))
		if err := os.Remove(deleg); err != nil {
			t.Errorf("remove the delegated cgroup: %v", err)
		}
	})
	for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
		if err := os.Chown(filepath.Join(deleg, f), uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	cg, err := os.Open(deleg)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{helperEnv + "=delegated", runEnv + "=" + strconv.Itoa(os.Getpid())}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid},
		UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("delegated helper: %s%s", out, stderr.String())
	if err != nil {
		t.Fatalf("delegated helper: %v", err)
	}
	var r delegatedReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("decode the helper's report: %v", err)
	}
	switch {
	case r.UID != uid:
		t.Errorf("helper ran as uid %d", r.UID)
	case r.Report.Mode != ModeV2 || r.Report.Parent.Source != "delegated" || !slices.Equal(r.Report.Parent.Leaf, []string{filepath.Join(deleg, LeafName)}):
		t.Errorf("report %+v: want v2 under the delegated parent, the process moved into %s/%s", r.Report, deleg, LeafName)
	case !r.OOM.OOMKilled || !r.OOM.AllReaped:
		t.Errorf("allocating worker: %+v, want OOM-killed and reaped", r.OOM)
	case r.PidsEvents < 1 || r.PidsCurrent > 12 || !r.Bomb.AllReaped || r.Bomb.Stage != "kill":
		t.Errorf("fork bomb: pids.events max %d, pids.current %d, outcome %+v", r.PidsEvents, r.PidsCurrent, r.Bomb)
	case r.Ladder.Stage != "kill" || r.Ladder.SignalName != "SIGKILL" || !r.Ladder.AllReaped:
		t.Errorf("kill ladder: %+v, want ended by cgroup.kill", r.Ladder)
	}
	ents, err := os.ReadDir(deleg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() && e.Name() != LeafName {
			t.Errorf("the helper left %s/%s", deleg, e.Name())
		}
	}
	if procs, _ := readPids(filepath.Join(deleg, LeafName, "cgroup.procs")); len(procs) > 0 {
		t.Errorf("processes %v left in the leaf", procs)
	}
}

// helperDelegated plays an unprivileged sidecar in a delegated cgroup (TestV2DelegatedUnprivileged)
// and prints a delegatedReport, or "ERR ..." and exits 1.
func helperDelegated() {
	fail := func(format string, a ...any) {
		fmt.Printf("ERR "+format+"\n", a...)
		os.Exit(1)
	}
	ctx := contextBackground()
	s, err := New(Config{Parent: ParentAuto, Mode: ModeV2, Containment: ContainOff, TermGrace: 300 * time.Millisecond})
	if err != nil {
		fail("New: %v", err)
	}
	r := delegatedReport{UID: os.Geteuid(), Report: s.Report()}
	env := func(h string) []string { return []string{helperEnv + "=" + h, runEnv + "=" + os.Getenv(runEnv)} }
	d, err := s.Start(ctx, Spec{Env: env("alloc"), MemoryLimit: 32 << 20})
	if err != nil {
		fail("Start alloc: %v", err)
	}
	if _, err := d.Wait(ctx); err != nil {
		fail("Wait alloc: %v", err)
	}
	if r.OOM, err = d.Terminate(ctx); err != nil {
		fail("Terminate alloc: %v", err)
	}
	_ = d.Close()
	if d, err = s.Start(ctx, Spec{Env: env("forkbomb"), PidsLimit: 12}); err != nil {
		fail("Start forkbomb: %v", err)
	}
	dir := domainDir(s, d)
	for deadline := time.Now().Add(20 * time.Second); r.PidsEvents == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			fail("the fork bomb never hit pids.max")
		}
		r.PidsEvents, _ = readKey(filepath.Join(dir, "pids.events"), "max")
		r.PidsCurrent, _ = readInt(filepath.Join(dir, "pids.current"))
	}
	if r.Bomb, err = d.Kill(ctx); err != nil {
		fail("Kill forkbomb: %v", err)
	}
	_ = d.Close()
	rp, w, _ := os.Pipe()
	if d, err = s.Start(ctx, Spec{Env: env("ignoreterm"), ExtraFiles: []*os.File{w}}); err != nil {
		fail("Start ignoreterm: %v", err)
	}
	w.Close()
	if line, _ := bufio.NewReader(rp).ReadString('\n'); !strings.HasPrefix(line, "ready") {
		fail("ignoreterm worker not ready: %q", line)
	}
	t0 := time.Now()
	if r.Ladder, err = d.Terminate(ctx); err != nil {
		fail("Terminate ignoreterm: %v", err)
	}
	r.LadderTookMs = time.Since(t0).Milliseconds()
	_ = d.Close()
	if err := s.Close(ctx); err != nil {
		fail("Close: %v", err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fail("encode: %v", err)
	}
}
