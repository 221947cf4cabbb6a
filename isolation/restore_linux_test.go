package isolation

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testenv"
)

// Probe is `steward doctor`'s path: these tests start a helper alone in cgroups of its own (as
// systemd starts an ExecStartPre in the unit's cgroup), let it snapshot them, run Probe with
// --cgroup-parent auto and snapshot again, and compare byte for byte.

const restoreDirsEnv = "STEWARD_TEST_RESTORE_DIRS" // hierarchy=dir,... the helper's cgroups

func init() {
	helpers["restore"] = helperRestore
	helpers["nothing"] = func() {}
}

// cgroupSnapshot maps, for every cgroup at or below the given directories, the files that say
// where processes are and what is enabled for children (cgroup.procs, cgroup.subtree_control)
// to their bytes; a directory is listed as "<dir>/" so that children show.
func cgroupSnapshot(dirs []string) (map[string]string, error) {
	snap := map[string]string{}
	for _, top := range dirs {
		err := filepath.WalkDir(top, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return err
			}
			snap[p+"/"] = ""
			for _, f := range []string{"cgroup.procs", "cgroup.subtree_control"} {
				b, err := os.ReadFile(filepath.Join(p, f))
				if err == nil {
					snap[filepath.Join(p, f)] = string(b)
				} else if !os.IsNotExist(err) {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return snap, nil
}

// snapshotDiff lists what differs between two snapshots, sorted.
func snapshotDiff(before, after map[string]string) []string {
	var out []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			out = append(out, fmt.Sprintf("%s gone (was %q)", k, v))
		} else if w != v {
			out = append(out, fmt.Sprintf("%s = %q, was %q", k, w, v))
		}
	}
	for k, w := range after {
		if _, ok := before[k]; !ok {
			out = append(out, fmt.Sprintf("%s new (%q)", k, w))
		}
	}
	slices.Sort(out)
	return out
}

type restoreReport struct {
	UID           int
	Before, After map[string]string
	Report        Report
}

// helperRestore moves itself into the v1 directories of restoreDirsEnv (it was born in the
// unified one), snapshots them, runs Probe with --cgroup-parent auto, snapshots again and prints
// a restoreReport, or "ERR ..." and exits 1.
func helperRestore() {
	fail := func(format string, a ...any) {
		fmt.Printf("ERR "+format+"\n", a...)
		os.Exit(1)
	}
	var dirs []string
	for _, kv := range strings.Split(os.Getenv(restoreDirsEnv), ",") {
		h, dir, _ := strings.Cut(kv, "=")
		dirs = append(dirs, dir)
		if h != hUnified {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
				fail("enter %s: %v", dir, err)
			}
		}
	}
	r := restoreReport{UID: os.Geteuid()}
	var err error
	if r.Before, err = cgroupSnapshot(dirs); err != nil {
		fail("snapshot: %v", err)
	}
	r.Report = Probe(Config{Parent: ParentAuto})
	if r.After, err = cgroupSnapshot(dirs); err != nil {
		fail("snapshot: %v", err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fail("encode: %v", err)
	}
}

// probeLeavesTheTreeAsFound makes a cgroup named name in every mounted hierarchy, owned by uid
// (a delegation, as systemd's Delegate=yes hands a unit its cgroup), runs helperRestore alone in
// them, checks that the snapshots match and that a process can then start in the unified one
// (what systemd does with ExecStart after ExecStartPre), and removes them.
func probeLeavesTheTreeAsFound(t *testing.T, name string, uid int) restoreReport {
	t.Helper()
	var dirs []string
	var unified string
	for _, h := range mountedHierarchies() {
		dir := filepath.Join(hierarchyRoot(h), name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := os.Remove(dir); err != nil {
				t.Errorf("remove %s (Probe must leave it as found: empty, no children): %v", dir, err)
			}
		})
		for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads", "tasks"} {
			if err := os.Chown(filepath.Join(dir, f), uid, uid); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
		dirs = append(dirs, h+"="+dir)
		if h == hUnified {
			unified = dir
		}
	}
	if unified == "" {
		testenv.Unavailable(t, "no cgroup2 hierarchy to be born in")
	}
	cg, err := os.Open(unified)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{helperEnv + "=restore", runEnv + "=" + strconv.Itoa(os.Getpid()), restoreDirsEnv + "=" + strings.Join(dirs, ",")}
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	if uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("restore helper: %v\n%s%s", err, out, stderr.String())
	}
	var r restoreReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("decode the helper's report: %v\n%s", err, out)
	}
	for _, c := range r.Report.Checks {
		t.Logf("%-5v %-28s %s", c.OK, c.Name, c.Detail)
	}
	if len(r.Before) == 0 {
		t.Fatalf("empty snapshot of %v", dirs)
	}
	if d := snapshotDiff(r.Before, r.After); len(d) > 0 {
		t.Errorf("Probe left the cgroup tree changed:\n%s", strings.Join(d, "\n"))
	}
	last := r.Report.Checks[len(r.Report.Checks)-1]
	switch {
	case r.UID != uid:
		t.Errorf("helper ran as uid %d, want %d", r.UID, uid)
	case !r.Report.Verified || r.Report.Parent.Source != "delegated":
		t.Errorf("report %+v: want verified under the delegated parent", r.Report)
	case len(r.Report.Parent.Leaf) == 0:
		t.Errorf("report %+v: the helper, alone in its cgroups, should have moved itself into a leaf", r.Report.Parent)
	case last.Name != "cgroups restored" || !last.OK || !strings.Contains(last.Detail, "moved back into "+hUnified):
		t.Errorf("last check %+v: want the move undone", last)
	}
	// ExecStart: a process can still be born in the cgroup the check ran in.
	born := exec.Command("/proc/self/exe")
	born.Env = []string{helperEnv + "=nothing", runEnv + "=" + strconv.Itoa(os.Getpid())}
	born.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	if err := born.Run(); err != nil {
		t.Errorf("a process born in %s after the check: %v", unified, err)
	}
	return r
}

// TestProbeLeavesTheTreeAsFound: as root, alone in cgroups of its own in every hierarchy, Probe
// moves itself into the supervisor leaf of each, probes, and leaves every cgroup.procs,
// cgroup.subtree_control and child as it found them. On this hybrid host that is the v1
// hierarchies and the controller-less unified one (the hybrid mode verifies); in the pure v2 VM
// it is cgroup2 with memory and pids, which the probe enables in the helper's own cgroup.
func TestProbeLeavesTheTreeAsFound(t *testing.T) {
	needCgroups(t)
	probeLeavesTheTreeAsFound(t, testParent+"-restore", 0)
}
