package isolation

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testenv"
	"golang.org/x/sys/unix"
)

// TestLauncherForksSupervisorsChildren: a contained worker forked by the launcher is the
// supervisor's own child (CLONE_PARENT), born in its v1 groups, renamed by its exec, and reaped
// by the supervisor like one it forked itself; nothing is left after it.
func TestLauncherForksSupervisorsChildren(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t)
	for _, mode := range realModes(t) {
		t.Run(string(mode), func(t *testing.T) {
			s := newContained(t, mode, false)
			before := s.fork.forked.Load() // the probe New ran through it
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			d, err := s.Start(context.Background(), Spec{Env: workerEnv("ignoreterm-no"), ExtraFiles: []*os.File{w}})
			w.Close()
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if line, _ := bufio.NewReader(r).ReadString('\n'); !strings.HasPrefix(line, "ready") {
				t.Fatalf("worker said %q", line)
			}
			st, err := readProcStat(d.Pid())
			if err != nil || st.ppid != os.Getpid() {
				t.Fatalf("worker %d: parent %d (%v), want the supervisor %d", d.Pid(), st.ppid, err, os.Getpid())
			}
			if comm, _ := os.ReadFile(filepathProc(d.Pid(), "comm")); strings.TrimSpace(string(comm)) == launcherComm {
				t.Fatalf("worker still named %q after its exec", comm)
			}
			// The launcher's socket is close-on-exec: a guest cannot ask it for anything.
			fds, err := os.ReadDir(filepathProc(d.Pid(), "fd"))
			if err != nil {
				t.Fatal(err)
			}
			for _, fd := range fds {
				if target, _ := os.Readlink(filepathProc(d.Pid(), "fd/"+fd.Name())); strings.HasPrefix(target, "socket:") {
					t.Fatalf("worker holds fd %s -> %s", fd.Name(), target)
				}
			}
			if got := s.fork.forked.Load() - before; got != 1 {
				t.Fatalf("launcher forked %d workers, want 1", got)
			}
			o, err := d.Kill(context.Background())
			if err != nil || o.SignalName != "SIGKILL" {
				t.Fatalf("kill: %+v %v", o, err)
			}
			if z := zombieChildren(); len(z) > 0 {
				t.Fatalf("zombies after the kill: %v", z)
			}
		})
	}
}

// TestLauncherExecFailure: a worker whose exec fails in the launcher's child leaves no zombie
// (the supervisor finds it by the launcher's name and reaps it) and no cgroup; the error keeps
// its errno, and the launcher serves the next launch. The same holds when the supervisor forks.
func TestLauncherExecFailure(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t)
	notExec := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range realModes(t) {
		bothWays(t, string(mode), func(t *testing.T, here bool) {
			s := newContained(t, mode, here)
			_, err := s.Start(context.Background(), Spec{Path: notExec, Env: workerEnv("noop-contained")})
			if !errors.Is(err, syscall.EACCES) {
				t.Fatalf("Start of a file without exec permission: %v, want EACCES", err)
			}
			if z := zombieChildren(); len(z) > 0 {
				t.Fatalf("zombies after the failed exec: %v", z)
			}
			if s.fork != nil && !s.fork.usable() {
				t.Fatal("the launcher is unusable after a failed exec of its child")
			}
			runContainedNoop(t, s)
		})
	}
}

// TestLauncherDeath: a launcher killed between launches, or dying right after a fork before it
// answers, costs no launch: the supervisor kills and reaps what it forked, forks the worker
// itself from then on, and nothing is left.
func TestLauncherDeath(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t)
	run := func(t *testing.T, s *Supervisor) {
		t.Helper()
		runContainedNoop(t, s)
		if s.fork.usable() {
			t.Fatal("the launcher is still used after its death")
		}
		if z := zombieChildren(); len(z) > 0 {
			t.Fatalf("zombies: %v", z)
		}
	}
	for _, mode := range realModes(t) {
		t.Run(string(mode)+"/killed", func(t *testing.T) {
			s := newSupervisor(t, mode, func(c *Config) { c.Containment = ContainRequire })
			if s.fork == nil {
				t.Fatalf("no launcher: %s", launcherCheck(s))
			}
			if err := syscall.Kill(s.fork.pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case <-s.fork.exited:
			case <-time.After(10 * time.Second):
				t.Fatal("killed launcher not reaped")
			}
			run(t, s)
		})
		t.Run(string(mode)+"/after-fork", func(t *testing.T) {
			launcherEnv = []string{launcherDieAfterFork + "=1"}
			s := newSupervisor(t, mode, func(c *Config) { c.Containment = ContainRequire })
			launcherEnv = nil
			// The probe through it already killed it: New forks here.
			if s.fork != nil {
				t.Fatalf("a launcher that dies at its first fork was kept: %s", launcherCheck(s))
			}
			if !strings.Contains(launcherCheck(s), "unavailable") {
				t.Fatalf("launcher check %q", launcherCheck(s))
			}
			if z := zombieChildren(); len(z) > 0 {
				t.Fatalf("zombies after New: %v", z)
			}
			runContainedNoop(t, s)
		})
	}
}

// runContainedNoop starts a contained no-op worker on s and checks it exits 0 and closes.
func runContainedNoop(t *testing.T, s *Supervisor) {
	t.Helper()
	d, err := s.Start(context.Background(), Spec{Env: workerEnv("noop-contained")})
	if err != nil {
		t.Fatal(err)
	}
	if o, err := d.Wait(context.Background()); err != nil || o.ExitCode != 0 {
		t.Fatalf("contained no-op worker: %+v %v", o, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
}

func filepathProc(pid int, name string) string {
	return filepath.Join("/proc", strconv.Itoa(pid), name)
}

// FuzzLaunchRequest: whatever bytes arrive as a request without descriptors, the launcher
// answers with a refusal and forks nothing (a fork needs the domain's tasks files), and
// never panics.
func FuzzLaunchRequest(f *testing.F) {
	f.Add([]byte(`{"path":"/bin/true","argv":["true"],"env":[],"files":0,"v1":["memory"],"cloneflags":0,"uid":0,"gid":0}`))
	f.Add([]byte(`{"path":"/bin/true","argv":["true"],"files":0,"v1":[],"uid":-1,"gid":-1}`))
	f.Add([]byte(`{"files":-1}`))
	f.Add([]byte(`not json`))
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rep := launchOne(b, nil, &all)
		if rep.Err == "" || rep.Pid != 0 || rep.Forked {
			t.Fatalf("request %q without descriptors: %+v", b, rep)
		}
	})
}
