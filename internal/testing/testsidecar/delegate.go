package testsidecar

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Delegate creates parent in every mounted hierarchy and hands it to uid the way systemd's
// Delegate=yes does on v2 (and an administrator does on v1): the directory and its
// cgroup.procs, cgroup.threads and cgroup.subtree_control (v2) or tasks (v1) are chowned to uid;
// every other file stays root's. It returns the directories, for Options.Enter; CheckLeftovers
// (the Start cleanup) removes them.
func Delegate(t testing.TB, parent string, uid int) []string {
	t.Helper()
	var dirs []string
	for _, r := range Roots() {
		dir := filepath.Join(r, parent)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("delegate %s: %v", dir, err)
		}
		dirs = append(dirs, dir)
		for _, f := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control", "tasks"} {
			p := filepath.Join(dir, f)
			if _, err := os.Stat(p); err != nil {
				continue // v1 has no cgroup.threads / subtree_control, v2 no tasks
			}
			if err := os.Chown(p, uid, uid); err != nil {
				t.Fatalf("delegate %s: %v", p, err)
			}
		}
	}
	t.Cleanup(func() { _ = RemoveParent(parent) })
	return dirs
}

// Launcher writes a start script for a steward process that enters the cgroup directories enter and
// then runs as uid (when not 0), next to a world-readable copy of bin. The script keeps its pid
// through every exec, so the host's pidfd, pipes and PDEATHSIG (re-armed by setpriv after the
// uid change, which clears it) all follow the sidecar.
func Launcher(t testing.TB, bin string, uid int, enter []string) string {
	t.Helper()
	self := PublicCopy(t, bin)
	var sh strings.Builder
	sh.WriteString("#!/bin/sh\nset -e\n")
	for _, d := range enter {
		fmt.Fprintf(&sh, "echo $$ > '%s/cgroup.procs'\n", d)
	}
	if uid != 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Fatalf("running a sidecar as uid %d needs setpriv (util-linux): %v", uid, err)
		}
		fmt.Fprintf(&sh, "exec %s --reuid=%d --regid=%d --clear-groups --pdeathsig TERM -- '%s' \"$@\"\n", setpriv, uid, uid, self)
	} else {
		fmt.Fprintf(&sh, "exec '%s' \"$@\"\n", self)
	}
	script := filepath.Join(filepath.Dir(self), "start.sh")
	if err := os.WriteFile(script, []byte(sh.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

// PublicCopy copies bin into a fresh world-readable directory (removed at cleanup), so that an
// unprivileged uid can run it, and returns the copy's path.
func PublicCopy(t testing.TB, bin string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "steward-public-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := os.ReadFile(bin)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "steward"), b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "steward")
}
