package isolation

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tasksEnv lists the v1 tasks files helperV1Thread's extra thread enters.
const tasksEnv = "STEWARD_TEST_TASKS"

// helperV1Thread moves one thread (not the leader) into the v1 groups whose tasks files
// tasksEnv lists, as a launcher's forking thread does for a fork, reports "entered" and sleeps.
func helperV1Thread() {
	entered := make(chan error)
	var enter func()
	enter = func() {
		runtime.LockOSThread() // never unlocked: the thread stays where it went
		if unix.Gettid() == unix.Getpid() {
			go enter() // the leader: another thread must go, this one stays locked here
			sleepForever()
		}
		for _, f := range strings.Split(os.Getenv(tasksEnv), ":") {
			if err := os.WriteFile(f, []byte("0"), 0); err != nil {
				entered <- err
				return
			}
		}
		entered <- nil
		sleepForever()
	}
	go enter()
	if err := <-entered; err != nil {
		fmt.Fprintln(os.Stderr, "enter:", err)
		os.Exit(2)
	}
	report("entered")
	sleepForever()
}

// helperSidecarChurn is a sidecar that launches contained no-op workers through its launcher,
// one after another, until it is killed; it prints "ready" once its launcher is proven.
func helperSidecarChurn() {
	s, err := New(Config{Parent: os.Getenv(parentEnv), Mode: Mode(os.Getenv(modeEnv)), Containment: ContainRequire})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	if s.fork == nil {
		fmt.Println("ERR no launcher:", launcherCheck(s))
		os.Exit(1)
	}
	fmt.Println("ready")
	env := []string{helperEnv + "=noop-contained", runEnv + "=" + os.Getenv(runEnv)}
	for {
		d, err := s.Start(context.Background(), Spec{Env: env})
		if err != nil {
			fmt.Fprintln(os.Stderr, "churn:", err)
			continue
		}
		_, _ = d.Wait(context.Background())
		_ = d.Close()
	}
}

func init() {
	helpers["v1thread"] = helperV1Thread
	helpers["sidecar-churn"] = helperSidecarChurn
}

// TestLeftoverSweepKillsWhatOnlyV1Holds: a sidecar SIGKILLed in the middle of a launch through
// its launcher leaves, for a moment, processes that only its domain's v1 groups hold: the
// launcher's forking thread (entered for the fork), and in hybrid mode the child it just forked,
// born in the v1 groups but not yet placed in the unified one. Both die soon after the sidecar
// (PDEATHSIG), but a successor's sweep that looked only where a placed worker is — the unified
// group — found the domain empty and failed to remove its busy v1 directories, which then
// stayed behind for good (the campaign's leftover-cgroup). The sweep must kill both, wait for
// the groups to empty, and remove everything.
func TestLeftoverSweepKillsWhatOnlyV1Holds(t *testing.T) {
	needCgroups(t)
	for _, mode := range realModes(t) {
		t.Run(string(mode), func(t *testing.T) {
			tr := fixedTree(testParent)
			owner := deadOwner(t)
			const dom = "spare-1"
			var v1 []string
			for _, h := range hierarchiesOf(mode) {
				dir := tr.abs(h, owner, dom)
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if h != hUnified {
					v1 = append(v1, dir)
				}
			}
			t.Cleanup(func() { _ = removeOwnerDirs(tr, owner) })

			// A process born in the v1 groups only (the unplaced child), and one with a thread
			// there (the launcher).
			born := startHelper(t, "block", nil)
			for _, dir := range v1 {
				if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(born.Process.Pid)), 0); err != nil {
					t.Fatal(err)
				}
			}
			var tasks []string
			for _, dir := range v1 {
				tasks = append(tasks, filepath.Join(dir, "tasks"))
			}
			threaded := startHelper(t, "v1thread", []string{tasksEnv + "=" + strings.Join(tasks, ":")})
			if p, _ := procCgroupPath(threaded.Process.Pid, hPids); p == "/"+tr.rel(hPids, owner, dom) {
				t.Fatalf("the thread-group leader of pid %d moved too: the test needs only a thread there", threaded.Process.Pid)
			}

			bornSt, err1 := readProcStat(born.Process.Pid)
			threadedSt, err2 := readProcStat(threaded.Process.Pid)
			if err := errors.Join(err1, err2); err != nil {
				t.Fatal(err)
			}

			sweepOwner(t, tr, owner, hierarchiesOf(mode))
			for name, c := range map[string]struct {
				cmd   *exec.Cmd
				start uint64
			}{"v1-only process": {born, bornSt.start}, "process with a thread in v1": {threaded, threadedSt.start}} {
				if how := waitKilled(t, c.cmd, c.start); how != "signal: killed" && how != "reaped by the sweep" {
					t.Errorf("%s: %s, want killed by SIGKILL", name, how)
				}
			}
		})
	}
}

// TestSweepRightAfterSidecarKill kills a sidecar that keeps launching contained workers through
// its launcher at a random moment and, as a host restarting it does, starts a successor at
// once: the successor's sweep must remove the dead sidecar's every directory, whatever the
// launch was doing (CI's campaign once found a spare's v1 directories left; see
// TestLeftoverSweepKillsWhatOnlyV1Holds).
func TestSweepRightAfterSidecarKill(t *testing.T) {
	needCgroups(t)
	for _, mode := range realModes(t) {
		t.Run(string(mode), func(t *testing.T) {
			newSupervisor(t, mode, nil) // this process is a subreaper before any sidecar dies
			r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
			for i := range 25 {
				cmd := exec.Command("/proc/self/exe")
				cmd.Env = []string{helperEnv + "=sidecar-churn", runEnv + "=" + strconv.Itoa(os.Getpid()), parentEnv + "=" + testParent, modeEnv + "=" + string(mode)}
				out, _ := cmd.StdoutPipe()
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				line, _ := bufio.NewReader(out).ReadString('\n')
				if line != "ready\n" {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
					t.Fatalf("churning sidecar: %q", line)
				}
				owner, err := OwnerName(cmd.Process.Pid)
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Duration(r.IntN(40_000)) * time.Microsecond)
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				s2 := newSupervisor(t, mode, nil)
				if reason := s2.Report().Reason; reason != "" {
					t.Errorf("round %d: successor's report: %s", i, reason)
				}
				for _, root := range hierarchyRoots() {
					if _, err := os.Stat(filepath.Join(root, testParent, owner)); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("round %d: %s left after the successor's sweep (%v)", i, filepath.Join(root, testParent, owner), err)
					}
				}
				// The dead sidecar's launcher and workers re-parented to us: reap them as a
				// host would its orphans.
				waitFor(t, func() bool {
					for _, z := range zombieChildren() {
						if fd, err := pidfdOpen(z); err == nil {
							_, _, _ = pidfdReap(fd)
							unix.Close(fd)
						}
					}
					return len(markedChildren()) == 0
				})
				if t.Failed() {
					return
				}
			}
		})
	}
}

// markedChildren lists this process's children that carry this run's marker or are a
// launcher (whose environment is the supervisor's, without it).
func markedChildren() []int {
	var out []int
	marked := markedProcesses()
	for _, c := range childrenOf(os.Getpid()) {
		if slices.Contains(marked, c) || commOf(c) == launcherComm {
			out = append(out, c)
		}
	}
	return out
}

// deadOwner names an owner directory for a process that has exited.
func deadOwner(t *testing.T) string {
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{helperEnv + "=block", runEnv + "=" + strconv.Itoa(os.Getpid())}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	owner, err := OwnerName(cmd.Process.Pid)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if OwnerAlive(owner) {
		t.Fatalf("owner %s alive after its reap", owner)
	}
	return owner
}

// startHelper starts helper h, not a worker, with a report pipe on fd 3 and waits for its first line.
func startHelper(t *testing.T, h string, env []string) *exec.Cmd {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append([]string{helperEnv + "=" + h, runEnv + "=" + strconv.Itoa(os.Getpid()), "STEWARD_TEST_KIND=" + h}, env...)
	cmd.ExtraFiles = []*os.File{w}
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	if _, err := bufio.NewReader(r).ReadString('\n'); err != nil {
		t.Fatalf("helper %s did not report: %v", h, err)
	}
	return cmd
}

// waitKilled reaps cmd (started at start), failing the test if it is still running after 5 s, and says how it
// ended: its wait status, or "reaped by the sweep" (in v1 mode the sweep's tracker reaps a
// process it killed that is its own child, as this test's helpers are).
func waitKilled(t *testing.T, cmd *exec.Cmd, start uint64) string {
	t.Helper()
	done := make(chan struct{})
	timer := time.AfterFunc(5*time.Second, func() {
		select {
		case <-done:
		default:
			t.Errorf("pid %d still running 5 s after the sweep", cmd.Process.Pid)
			_ = cmd.Process.Kill()
		}
	})
	defer timer.Stop()
	err := cmd.Wait()
	close(done)
	if cmd.ProcessState != nil {
		return cmd.ProcessState.String()
	}
	if errors.Is(err, syscall.ECHILD) && gone(cmd.Process.Pid, start) {
		return "reaped by the sweep"
	}
	return "wait: " + err.Error()
}

// TestLeftoverSweepWaitsForAGroupToEmpty: a dead sidecar's launcher, dying but not yet dead,
// may place a child it just forked into a v1 group after the sweep's kill found the domain
// empty, so that group's rmdir fails busy once (CI: the memory directory left, the others
// removed). Planted here as a process in a v1 memory directory the sweep cannot kill through
// (no freezer or unified group beside it) that exits by itself 300 ms later: the sweep must try
// again until the directory can go, not report it busy.
func TestLeftoverSweepWaitsForAGroupToEmpty(t *testing.T) {
	needCgroups(t)
	tr := fixedTree(testParent)
	owner := deadOwner(t)
	dir := tr.abs(hMemory, owner, "w3")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeOwnerDirs(tr, owner) })
	child := exec.Command("sleep", "0.3")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(child.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	sweepOwner(t, tr, owner, []string{hMemory})
}

// sweepOwner runs the leftover sweep over tr and checks that it cleaned owner and left none of
// its directories in hierarchies hs.
func sweepOwner(t *testing.T, tr tree, owner string, hs []string) {
	t.Helper()
	cleaned, err := removeLeftovers(context.Background(), tr)
	if err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if !slices.Contains(cleaned, tr.rel(hPids, owner)) {
		t.Errorf("sweep cleaned %v, want %s", cleaned, tr.rel(hPids, owner))
	}
	for _, h := range hs {
		if _, err := os.Stat(tr.abs(h, owner)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", tr.abs(h, owner), err)
		}
	}
}
