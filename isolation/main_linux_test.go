package isolation

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testenv"
)

// testParent is this run's cgroup parent, so a real sidecar on the machine is never touched.
var testParent = fmt.Sprintf("steward-test-%d", os.Getpid())

func contextBackground() context.Context { return context.Background() }

func TestMain(m *testing.M) {
	if s := os.Getenv(EnvLauncher); s != "" {
		os.Exit(serveLauncher(s))
	}
	if os.Getenv(EnvProbe) == "1" {
		enter() // exits with probeExitCode after its checks in probe mode
		os.Exit(ExitRefused)
	}
	if h := os.Getenv(helperEnv); h != "" {
		f, ok := helpers[h]
		if !ok {
			os.Exit(2)
		}
		f()
		os.Exit(0)
	}
	code := m.Run()
	if err := suiteLeftovers(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: suite left something behind:", err)
		code = 1
	}
	os.Exit(code)
}

// suiteLeftovers is the invariant checked after every run: no cgroup directory under this
// run's parent, no process carrying this run's marker, no zombie child. It removes what it finds.
func suiteLeftovers() error {
	var problems []string
	for _, root := range hierarchyRoots() {
		dir := filepath.Join(root, testParent)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				problems = append(problems, "cgroup "+filepath.Join(dir, e.Name()))
				_ = killOwnerTree(context.Background(), fixedTree(testParent), e.Name())
				_ = removeOwnerDirs(fixedTree(testParent), e.Name())
			}
		}
		_ = os.Remove(dir)
	}
	if pids := markedProcesses(); len(pids) > 0 {
		problems = append(problems, fmt.Sprintf("processes %v", pids))
		for _, p := range pids {
			if fd, err := pidfdOpen(p); err == nil {
				_ = pidfdSignal(fd, 9)
			}
		}
	}
	if z := zombieChildren(); len(z) > 0 {
		problems = append(problems, fmt.Sprintf("zombie children %v", z))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// markedProcesses lists live processes whose environment carries this run's marker.
func markedProcesses() []int {
	marker := runEnv + "=" + strconv.Itoa(os.Getpid())
	var out []int
	for _, pid := range allPids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(b), "\x00") {
			if kv == marker {
				out = append(out, pid)
			}
		}
	}
	return out
}

// zombieChildren lists this process's zombie children, those of every thread: a worker is the
// child of the thread that forked it (or, forked by the launcher, of the thread that started
// the launcher), an orphan the leader's.
func zombieChildren() []int {
	kids := childrenOf(os.Getpid())
	var out []int
	for _, k := range kids {
		if st, err := readProcStat(k); err == nil && st.state == 'Z' {
			out = append(out, k)
		}
	}
	return out
}

// needCgroups skips (or fails under STEWARD_REQUIRE_REAL=1) without root and either v1
// hierarchies (memory, pids, freezer) or a pure v2 one offering memory and pids.
func needCgroups(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t)
	if available(ModeV2) == nil {
		return
	}
	if !v1Mounted("memory") || !v1Mounted("pids") || !v1Mounted("freezer") {
		testenv.Unavailable(t, "v1 memory, pids and freezer hierarchies not mounted, and no cgroup2 offering memory and pids")
	}
}

// realModes are the modes this machine can run for real: v2 where cgroup2 offers memory and pids
// (a pure v2 host: internal/testing/v2vm boots one), hybrid (needs the unified mount beside v1) and
// v1-only.
func realModes(t testing.TB) []Mode {
	var modes []Mode
	if available(ModeV2) == nil {
		modes = append(modes, ModeV2)
	}
	if v1Mounted("memory") && v1Mounted("pids") && v1Mounted("freezer") {
		if available(ModeHybrid) == nil {
			modes = append(modes, ModeHybrid)
		} else if testenv.RequireReal() {
			t.Fatalf("hybrid mode unavailable: %v", available(ModeHybrid))
		}
		modes = append(modes, ModeV1)
	}
	return modes
}

// domainDir is the directory of d's cgroup in the hierarchy that counts its tasks: the unified
// one in v2 mode, else v1 pids.
func domainDir(s *Supervisor, d *Domain) string {
	if s.Mode() == ModeV2 {
		return filepath.Join(unifiedMount(), s.CgroupPath(d))
	}
	return filepath.Join(v1Root, "pids", s.CgroupPath(d))
}

func newSupervisor(t testing.TB, mode Mode, tweak func(*Config)) *Supervisor {
	t.Helper()
	// The cgroup tests see the worker's processes by their pids (reported by the helpers), so
	// they run uncontained; contain_linux_test.go covers the contained domain.
	cfg := Config{Parent: testParent, Mode: mode, TermGrace: 300 * time.Millisecond, ReapBound: 5 * time.Second, Containment: ContainOff}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%s): %v", mode, err)
	}
	if s.Mode() != mode && mode != ModeAuto {
		t.Fatalf("mode %s, want %s", s.Mode(), mode)
	}
	t.Cleanup(func() {
		if err := s.Close(context.Background()); err != nil {
			t.Errorf("Supervisor.Close: %v", err)
		}
		for _, root := range hierarchyRoots() {
			if _, err := os.Stat(filepath.Join(root, testParent, s.owner)); err == nil {
				t.Errorf("cgroup dir %s left after Close", filepath.Join(root, testParent, s.owner))
			}
		}
	})
	return s
}

func workerEnv(helper string, extra ...string) []string {
	return append([]string{helperEnv + "=" + helper, runEnv + "=" + strconv.Itoa(os.Getpid())}, extra...)
}

// dumpZombies logs each zombie child's stat and cgroup lines: the evidence needed when a
// reaping assertion fails.
func dumpZombies(t *testing.T, where string) {
	for _, z := range zombieChildren() {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", z))
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", z))
		t.Logf("%s: zombie %d: %s %q", where, z, st, cg)
	}
}
