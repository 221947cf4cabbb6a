package v2vm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
)

// Guest-side: what the VM's plan sets for the tests that run in it.
const (
	stewardEnv = "STEWARD_V2VM_BINARY" // the steward binary in the initramfs (no Go toolchain there)
)

// build runs `go <args...>` static (CGO_ENABLED=0) from the repository root.
func build(t *testing.T, args ...string) {
	t.Helper()
	root, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// goTest is one "--- PASS|FAIL|SKIP: name (secs)" line of `go test -v` output.
var goTest = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)

// verdicts maps each test and subtest named in a step's -test.v output to its verdict and time.
func verdicts(lines []string) map[string]string {
	m := map[string]string{}
	for _, l := range lines {
		if g := goTest.FindStringSubmatch(l); g != nil {
			m[g[2]] = g[1] + " " + g[3] + "s"
		}
	}
	return m
}

// inGuest are the isolation tests (and subtests) that must pass in the pure v2 guest: the v2
// tests of isolation/v2_linux_test.go and the v2 runs of the mode-table tests. Not
// TestUnifiedKillAndPlacement (hybrid's controller-less placement) nor
// TestTreeWithEscapeesKilledAndReaped: each starts 51 Go processes, 7-23 s under TCG on a loaded
// machine (once past its 20 s read deadline); on v2 the zombie, orphan and fork bomb tests below
// kill and reap escapees, orphans and a dozen processes through cgroup.kill.
var inGuest = []string{
	"TestV2LimitsReadBack",
	"TestV2LimitNotReadBackRejected",
	"TestDomainLimitsVerifiedOrRejected/v2",
	"TestOwnMemoryCeilingInADomain/v2",
	"TestV2OOMGroupKillsTheWholeDomain",
	"TestV2WorkerBornInItsCgroup",
	"TestV2DelegatedUnprivileged",
	"TestOOMKilledWorker/v2",
	"TestForkBombStopsAtPidsMax/v2",
	"TestKillLadder/v2/honours_SIGTERM",
	"TestKillLadder/v2/ignores_SIGTERM",
	"TestZombieChildrenReaped/v2",
	"TestWorkerExitsWhileChildrenRun/v2",
	"TestWorkerEntryHardening/v2",
	"TestSidecarKilledLeavesNothing/v2",
	"TestFreezeThaw/v2",
	"TestPreflight/auto_picks_the_best_verified_mode",
	"TestMainProcessReaped/exit-notice",
	"TestMainProcessReaped/waitid",
	"TestStartRefusals",
	"TestLandlockABIVerifiedOrRejected",
	"TestProbeLeavesTheTreeAsFound",
	"TestV2ProbeLeavesTheDelegatedTreeAsFound",
}

// guestRun is the -test.run pattern that selects inGuest's top-level tests.
func guestRun() string {
	seen := map[string]bool{}
	var top []string
	for _, n := range inGuest {
		n, _, _ = strings.Cut(n, "/")
		if !seen[n] {
			seen[n] = true
			top = append(top, n)
		}
	}
	return "^(" + strings.Join(top, "|") + ")$"
}

// TestOnPureCgroupV2 boots the pinned kernel with cgroup_no_v1=all under QEMU and runs there, for
// real: isolation's v2 tests (inGuest, as root; TestV2DelegatedUnprivileged as uid 65534 in a
// delegated cgroup), the sidecar end to end (TestSidecarOnPureV2) as root and as uid 65534 in
// DelegateSubgroup's shape, and `steward doctor` as root and as uid 65534 in a delegated cgroup.
// Every step must exit 0, every test of inGuest pass, and each doctor say ready on v2.
func TestOnPureCgroupV2(t *testing.T) {
	tools, err := FindTools()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	dir := t.TempDir()
	t0 := time.Now()
	build(t, "build", "-o", filepath.Join(dir, "init"), "./internal/testing/v2vm/guestinit")
	// The v2guest tag adds the tests that only a pure v2 host can run (and that fail elsewhere).
	build(t, "test", "-c", "-tags=v2guest", "-o", filepath.Join(dir, "isolation.test"), "./isolation")
	build(t, "test", "-c", "-tags=v2guest", "-o", filepath.Join(dir, "v2vm.test"), "./internal/testing/v2vm")
	files := append(guestFiles(), File{Path: "/v2/steward", Mode: 0o755, Src: testbin.Steward(t)},
		File{Path: "/v2/isolation.test", Mode: 0o755, Src: filepath.Join(dir, "isolation.test")},
		File{Path: "/v2/v2vm.test", Mode: 0o755, Src: filepath.Join(dir, "v2vm.test")})
	r := boot(t, tools, dir, files, guestPlan(), Options{}, time.Since(t0))
	checkIsolation(t, r)
	t.Logf("Landlock on this kernel:\n%s", strings.Join(section(step(t, r, "isolation").Lines, "TestLandlockABIVerifiedOrRejected"), "\n"))
	for _, name := range []string{"sidecar-root", "sidecar-65534"} {
		s := step(t, r, name)
		t.Logf("%s:\n%s", name, strings.Join(s.Lines, "\n"))
		if v := verdicts(s.Lines)["TestSidecarOnPureV2"]; s.Exit != 0 || !strings.HasPrefix(v, "PASS") {
			t.Errorf("%s: exit %d, TestSidecarOnPureV2 %q", name, s.Exit, v)
		}
	}
	checkDoctors(t, r)
}

// doctorSteps run `steward doctor` as root and as uid 65534 alone in a delegated cgroup.
func doctorSteps(env []string) []Step {
	return []Step{
		{Name: "doctor-root", Args: []string{"/v2/steward", "doctor", "--state-dir", "/tmp/doctor-root"}, Env: env, Timeout: 60},
		{Name: "doctor-65534", Args: []string{"/v2/steward", "doctor", "--cgroup-parent", "auto", "--state-dir", "/tmp/doctor-65534"}, Env: env,
			Timeout: 60, UID: 65534, Delegate: "/sys/fs/cgroup/steward-doctor.service", Cgroup: "/sys/fs/cgroup/steward-doctor.service"},
	}
}

// checkDoctors: each of doctorSteps said ready on v2.
func checkDoctors(t *testing.T, r Result) {
	t.Helper()
	for _, name := range []string{"doctor-root", "doctor-65534"} {
		s := step(t, r, name)
		out := strings.Join(s.Lines, "\n")
		t.Logf("%s:\n%s", name, out)
		if s.Exit != 0 || !strings.Contains(out, "verdict: ready (isolation v2)") {
			t.Errorf("%s: exit %d, want the verdict ready on v2", name, s.Exit)
		}
	}
}

// boot boots dir/init with files and plan, fails t without guestinit's "done", and logs the
// pinned versions, the guest's kernel, the times (built: making the binaries) and each step's exit.
func boot(t *testing.T, tools Tools, dir string, files []File, plan []Step, o Options, built time.Duration) Result {
	t.Helper()
	r, err := Boot(context.Background(), tools, dir, filepath.Join(dir, "init"), files, plan, o)
	if err != nil {
		t.Fatalf("%v\nconsole:\n%s", err, strings.Join(r.Console, "\n"))
	}
	t.Logf("pinned: %s", tools.Versions)
	if r.Rebooted != "" {
		t.Logf("booted twice: %s", r.Rebooted)
	}
	t.Logf("guest kernel %s, controllers: %s", r.Kernel, r.Controllers)
	t.Logf("binaries built in %v; QEMU start to guest init %v, to power-off %v", built.Round(time.Millisecond), r.Boot.Round(time.Millisecond), r.Wall.Round(time.Millisecond))
	for _, s := range r.Steps {
		t.Logf("step %-14s exit %d in %v", s.Name, s.Exit, s.Took)
	}
	return r
}

// guestPlan is what the guest runs, in order.
func guestPlan() []Step {
	env := []string{"PATH=/v2", "HOME=/tmp", "TMPDIR=/tmp", testenv.RequireRealEnv + "=1", stewardEnv + "=/v2/steward"}
	sidecar := []string{"/v2/v2vm.test", "-test.v", "-test.count=1", "-test.timeout=110s", "-test.run", "^TestSidecarOnPureV2$"}
	return append([]Step{
		{Name: "isolation", Args: []string{"/v2/isolation.test", "-test.v", "-test.count=1", "-test.timeout=280s", "-test.run", guestRun(),
			// No /bin/true in the guest: that refusal is host-agnostic and runs on the host.
			"-test.skip", "^TestPreflight$/^worker_that_skips_EnterWorker_fails_the_probe$"},
			Env: env, Timeout: 300},
		{Name: "sidecar-root", Args: sidecar, Env: env, Timeout: 120},
		// systemd's Delegate=yes with DelegateSubgroup=supervisor: the unit's cgroup is the
		// service user's, its processes start in the subgroup.
		{Name: "sidecar-65534", Args: sidecar, Env: env, Timeout: 120, UID: 65534,
			Delegate: "/sys/fs/cgroup/steward-e2e.service", Cgroup: "/sys/fs/cgroup/steward-e2e.service/supervisor"},
	}, doctorSteps(env)...)
}

func step(t *testing.T, r Result, name string) StepResult {
	t.Helper()
	s, ok := r.Step(name)
	if !ok {
		t.Fatalf("step %s did not run", name)
	}
	return s
}

// checkIsolation: the isolation step passed every test of inGuest and failed none.
func checkIsolation(t *testing.T, r Result) {
	t.Helper()
	iso := step(t, r, "isolation")
	v := verdicts(iso.Lines)
	failed := false
	for _, name := range inGuest {
		t.Logf("  %-48s %s", name, v[name])
		failed = failed || !strings.HasPrefix(v[name], "PASS")
	}
	for name, verdict := range v {
		if strings.HasPrefix(verdict, "FAIL") {
			failed = true
			t.Logf("  %-48s %s", name, verdict)
		}
	}
	if failed || iso.Exit != 0 {
		t.Errorf("isolation tests on pure cgroup v2: exit %d; output:\n%s", iso.Exit, strings.Join(iso.Lines, "\n"))
	}
}

// section is test name's output in -test.v lines: from its "=== RUN" line to its verdict.
func section(lines []string, name string) []string {
	var out []string
	in := false
	for _, l := range lines {
		switch {
		case strings.TrimSpace(l) == "=== RUN   "+name:
			in = true
		case in && goTest.MatchString(l):
			return append(out, l)
		case in:
			out = append(out, l)
		}
	}
	return out
}

// guestFiles are the initramfs's files besides init, the plan and the binaries.
func guestFiles() []File {
	return []File{
		{Path: "/etc/hostname", Mode: 0o644, Data: []byte("v2vm\n")},
		{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/tmp:/v2/none\nnobody:x:65534:65534:nobody:/nonexistent:/v2/none\n")},
		{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
	}
}
