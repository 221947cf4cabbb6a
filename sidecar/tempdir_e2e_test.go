package sidecar_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
)

// ownerTempDir is the directory sidecar pid keeps its domains' temp dirs in, below TMPDIR tmp.
func ownerTempDir(t *testing.T, tmp string, pid int) string {
	t.Helper()
	owner, err := isolation.OwnerName(pid)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(tmp, "steward-"+owner)
}

// entries lists dir's names (nil if it does not exist).
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// domainDirs lists dir's names but the worker image's (workerimage.go): the domains' temp dirs.
func domainDirs(t *testing.T, dir string) []string {
	return slices.DeleteFunc(entries(t, dir), func(n string) bool { return n == "worker-image" })
}

// deadPid returns the pid of a process that has exited and been reaped.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestTempDirsOfKilledSidecarSwept: a sidecar SIGKILLed mid-job leaves its domains' temp dirs in
// its own steward-<pid>-<start> directory; the next sidecar on the same TMPDIR removes that
// directory at its start, leaves a live sidecar's and everything not named like an owner dir (a
// symlink so named is not followed) alone, and sidecars that exit cleanly leave nothing.
func TestTempDirsOfKilledSidecarSwept(t *testing.T) {
	tmp := testenv.GuestDir(t)
	env := append(os.Environ(), "TMPDIR="+tmp)
	live := newSidecarWithEnv(t, env, "--executors", "1")
	victim := newSidecarWithEnv(t, env, "--executors", "1")
	liveDir, victimDir := ownerTempDir(t, tmp, live.c.Pid()), ownerTempDir(t, tmp, victim.c.Pid())
	waitFor(t, func() bool { return len(domainDirs(t, liveDir)) == 1 }) // its spare's

	// Decoys the sweep must not touch: a symlink named like a dead owner's dir, pointing at a
	// directory with a file; a dead owner's name with a suffix; a ledger-like steward-<uid>.
	dead := deadPid(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(tmp, fmt.Sprintf("steward-%d-1", dead))); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{fmt.Sprintf("steward-%d-0-x", dead), fmt.Sprintf("steward-%d", dead)} {
		if err := os.Mkdir(filepath.Join(tmp, name), 0o700); err != nil {
			t.Fatal(err)
		}
	}

	victim.makeDataset("tmp", 1000)
	p := victim.params(randID("inv-"), "tmp", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
	p.Fault = "hang"
	go func() { _, _ = victim.c.Mutate(context.Background(), p) }()
	waitFor(t, func() bool { return metricOf(t, victim.c, "steward_mutate_workers_in_flight") == 1 })
	// The job's domain dir (the spare's, which serves any call) and the next spare's.
	waitFor(t, func() bool { return len(domainDirs(t, victimDir)) >= 1 })
	sigkill(t, victim.c)
	victim.c.Close()
	if len(entries(t, victimDir)) == 0 {
		t.Fatalf("the SIGKILLed sidecar's %s is empty: nothing for its successor to sweep", victimDir)
	}
	liveBefore := entries(t, liveDir)

	victim.sc.Restart()
	victim.c = victim.sc.Client
	if _, err := os.Lstat(victimDir); !os.IsNotExist(err) {
		t.Fatalf("the SIGKILLed sidecar's temp dir is still there after its successor started (%v): %v", err, entries(t, victimDir))
	}
	if got := entries(t, liveDir); fmt.Sprint(got) != fmt.Sprint(liveBefore) {
		t.Fatalf("the live sidecar's temp dir changed when another one started: %v, was %v", got, liveBefore)
	}
	if _, err := os.Stat(filepath.Join(tmp, fmt.Sprintf("steward-%d-1", dead), "keep")); err != nil {
		t.Fatalf("the sweep followed a symlink named like an owner dir: %v", err)
	}
	for _, name := range []string{fmt.Sprintf("steward-%d-0-x", dead), fmt.Sprintf("steward-%d", dead)} {
		if _, err := os.Stat(filepath.Join(tmp, name)); err != nil {
			t.Fatalf("the sweep removed %s, not named like an owner dir: %v", name, err)
		}
	}
	successorDir := ownerTempDir(t, tmp, victim.c.Pid())
	waitFor(t, func() bool { return len(domainDirs(t, successorDir)) == 1 }) // its spare's
	// The successor killed what was left of the victim's domains (isolation's leftovers); their
	// zombies still show in their deleted cgroups, where the cleanup's leftover check would count
	// them, until their new parent reaps them: init, or this test process when an earlier test of
	// the package made it a subreaper (then it reaps them here).
	successor, _ := isolation.OwnerName(victim.c.Pid())
	waitFor(t, func() bool {
		for _, pid := range testsidecar.ProcessesIn(victim.parent) {
			if b, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup")); err == nil && !strings.Contains(string(b), "/"+successor+"/") {
				reapOrphan(pid)
				return false
			}
		}
		return true
	})
	if fi, err := os.Lstat(successorDir); err != nil || fi.Mode().Perm() != 0o711 || !fi.IsDir() {
		t.Fatalf("successor's temp dir %s: %v %v, want a directory of mode 0711", successorDir, fi, err)
	}

	// Clean exits: both remove their own directory.
	live.c.Close()
	victim.c.Close()
	owner := regexp.MustCompile(`^steward-[0-9]+-[0-9]+$`)
	for _, name := range entries(t, tmp) {
		if fi, err := os.Lstat(filepath.Join(tmp, name)); err == nil && fi.IsDir() && owner.MatchString(name) {
			t.Errorf("sidecar temp dir %s left after a clean exit: %v", name, entries(t, filepath.Join(tmp, name)))
		}
	}
}

// reapOrphan reaps pid if it is a zombie re-parented to this process.
func reapOrphan(pid string) {
	st, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil || !strings.Contains(string(st), "\nPPid:\t"+strconv.Itoa(os.Getpid())+"\n") {
		return
	}
	if n, err := strconv.Atoi(pid); err == nil {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(n, &ws, syscall.WNOHANG, nil)
	}
}

// TestDomainTempDirRemovedAfterEachCall: the private temp dir of the domain that served a call
// is removed once the call is answered (after the answer, behind the domain's held namespaces),
// whether the call committed or was a no-op, and the sidecar keeps no more than its next
// spare's.
func TestDomainTempDirRemovedAfterEachCall(t *testing.T) {
	tmp := testenv.GuestDir(t)
	e := newSidecarWithEnv(t, append(os.Environ(), "TMPDIR="+tmp), "--executors", "1")
	dir := ownerTempDir(t, tmp, e.c.Pid())
	e.makeDataset("tmp", 2000)
	for i := range 2 { // a build that commits version 2, then its IF NOT EXISTS no-op
		waitFor(t, func() bool { return len(domainDirs(t, dir)) == 1 }) // the spare's
		before := domainDirs(t, dir)
		p := e.params(randID("inv-"), "tmp", int64(1+i), rpc.OpCreate, "ix", "category", rpc.IndexBitmap)
		p.IfNotExists = i > 0
		res := e.mutate(p)
		if i == 0 && res.CommittedVersion != 2 || i > 0 && res.CompletionReason != rpc.CompletionIfNotExistsNoop {
			t.Fatalf("call %d: %+v", i, res)
		}
		waitFor(t, func() bool {
			now := domainDirs(t, dir)
			return len(now) == 1 && now[0] != before[0]
		})
	}
}
