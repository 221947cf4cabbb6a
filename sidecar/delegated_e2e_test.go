package sidecar_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
)

// TestDelegatedUnprivileged runs the real `steward serve --cgroup-parent auto` as uid 65534,
// started inside cgroups delegated to that uid the way systemd's Delegate=yes hands over a unit's
// cgroup (directory, cgroup.procs, cgroup.threads, cgroup.subtree_control / tasks chowned) in the
// v1 memory, pids and freezer hierarchies and the unified one. The sidecar must find those cgroups
// as its own, move itself into their leaf, verify isolation beside it, contain and classify an
// OOM kill and a fork bomb, build a real index, and leave nothing behind but the leaf.
func TestDelegatedUnprivileged(t *testing.T) {
	parent := randID("steward-deleg-")
	dirs := testsidecar.Delegate(t, parent, nobody)
	home, err := os.MkdirTemp("", "steward-deleg-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	e := &sidecarEnv{t: t, root: filepath.Join(home, "lake")}
	if e.store, err = storage.OpenStore(context.Background(), storage.StoreConfig{Kind: storage.KindLocal, Root: e.root}); err != nil {
		t.Fatal(err)
	}
	for _, ds := range []string{"ok", "f-oom", "f-fork_bomb"} {
		e.makeDataset(ds, 20000)
	}
	if err := chownTree(home, nobody); err != nil {
		t.Fatal(err)
	}
	toy := buildTestEngine(t)
	sc := testsidecar.Start(t, testsidecar.Options{Parent: parent, User: nobody, Enter: dirs,
		Args: []string{"--cgroup-parent", "auto", "--executors", "1", "--engine", "toy=" + toy + " --settle fence"},
		Env:  []string{"HOME=" + home, "PATH=/usr/bin:/bin", "STEWARD_STATE_DIR=" + filepath.Join(home, "state")}})
	e.c, e.parent, e.logs = sc.Client, parent, sc.Logs

	// The sidecar runs as 65534 and moved itself into the leaf of every delegated cgroup.
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.c.Pid()))
	if !strings.Contains(string(status), fmt.Sprintf("\nUid:\t%d\t%d\t%d\t%d\n", nobody, nobody, nobody, nobody)) {
		t.Fatalf("sidecar does not run as uid %d:\n%s", nobody, status)
	}
	iso := e.c.Info().Isolation
	b, _ := json.MarshalIndent(iso, "", "  ")
	t.Logf("hello isolation as uid %d:\n%s", nobody, b)
	if !iso.Verified || iso.Parent == nil || iso.Parent.Source != "delegated" {
		t.Fatalf("isolation %+v: want verified on a delegated parent", iso)
	}
	for _, h := range []string{"memory", "pids"} {
		leaf := filepath.Join("/sys/fs/cgroup", h, parent, "supervisor")
		if !slices.Contains(iso.Parent.Leaf, leaf) {
			t.Errorf("hello's leaves %v lack %s", iso.Parent.Leaf, leaf)
		}
		procs, _ := os.ReadFile(filepath.Join(leaf, "cgroup.procs"))
		if !slices.Contains(strings.Fields(string(procs)), fmt.Sprint(e.c.Pid())) {
			t.Errorf("sidecar %d not in %s (%q)", e.c.Pid(), leaf, procs)
		}
	}
	for _, dir := range iso.Cgroups {
		if !strings.Contains(dir, "/"+parent+"/") {
			t.Errorf("own cgroup %s is not in the delegated %s", dir, parent)
		}
	}
	// Its contained workers are forked by its launcher, a child of its own, as uid 65534 too.
	launcher := 0
	for _, c := range iso.Checks {
		if c.Name == "containment launcher" {
			_, _ = fmt.Sscanf(c.Detail, "contained workers are forked by launcher pid %d", &launcher)
		}
	}
	ls, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", launcher))
	if launcher <= 0 || !strings.Contains(string(ls), fmt.Sprintf("\nUid:\t%d\t%d\t%d\t%d\n", nobody, nobody, nobody, nobody)) ||
		!strings.Contains(string(ls), fmt.Sprintf("\nPPid:\t%d\n", e.c.Pid())) {
		t.Fatalf("no launcher of the uid-%d sidecar %d (hello checks %+v):\n%s", nobody, e.c.Pid(), iso.Checks, ls)
	}

	ok := e.mutate(e.params(randID("inv-"), "ok", 1, rpc.OpCreate, "ix", "name", rpc.IndexBTree))
	expect(t, ok, rpc.PhaseNativeReturn, 0)
	// The build's segments were taken into custody, as its gateway saw them written, in the
	// ledger of a slot the uid-65534 sidecar made in its own state dir: the journal and its write-ahead log, both its own, 0600.
	for _, f := range []string{"ledger-0.db", "ledger-0.db.wal"} {
		fi, err := os.Stat(filepath.Join(home, "state", f))
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(nobody) || fi.Mode().Perm() != 0o600 {
			t.Fatalf("ledger file %s of the uid-%d sidecar: %v %v", f, nobody, fi, err)
		}
	}
	// The spare started after that call is born on one CPU, by a sidecar without privileges;
	// the build it serves widens itself to every CPU.
	all := sidecarCPUs(t)
	waitFor(t, func() bool { return e.domains() == 1 })
	// Its workers start from the worker image it wrote as uid 65534 in its temp dir (the
	// service user's path of workerimage.go, probe start included).
	image := filepath.Join(ownerTempDir(t, os.TempDir(), e.c.Pid()), "worker-image")
	if fi, err := os.Stat(image); err != nil || fi.Sys().(*syscall.Stat_t).Uid != uint32(nobody) {
		t.Fatalf("worker image %s of the uid-%d sidecar: %v %v", image, nobody, fi, err)
	}
	waitForWorkerExe(t, e, image)
	onSpare := e.params(randID("inv-"), "ok", 2, rpc.OpCreate, "ix2", "id", rpc.IndexBTree)
	expect(t, e.mutate(onSpare), rpc.PhaseNativeReturn, 0)
	assertSpareWidened(t, e, onSpare.InvocationID, all)
	// Without privileges the sidecar holds its domains' empty namespaces past the answer too
	// (the guest is its own uid, in a user namespace it owns): once that answer is written, it
	// holds those of its one live spare only.
	waitFor(t, func() bool { ipc, net := foreignNamespaces(t, e.c.Pid()); return ipc == 1 && net == 1 })
	oom := e.params(randID("inv-oom-"), "f-oom", 1, rpc.OpCreate, "ix", "name", rpc.IndexBTree)
	oom.Fault, oom.Limits = "oom", &rpc.WorkerLimits{MemoryBytes: 64 << 20}
	res := e.mutate(oom)
	expect(t, res, rpc.PhaseIndeterminate, rpc.ReasonWorkerLost)
	if !res.OOMKilled {
		t.Fatalf("oom fault: oom_killed false (%s)", res.Message)
	}
	logAnswer(t, "oom", res)
	fb := e.params(randID("inv-fork-"), "f-fork_bomb", 1, rpc.OpCreate, "ix", "name", rpc.IndexBTree)
	fb.Fault, fb.DeadlineUnixMs = "fork_bomb", time.Now().Add(5*time.Second).UnixMilli()
	res = e.mutate(fb)
	// The pids limit holds the bomb until the deadline kills the domain (-22), unless the bomb's
	// own Go runtime dies first for want of a thread under that same limit (-21): contained
	// and indeterminate either way.
	if res.Phase != rpc.PhaseIndeterminate || (res.Code != rpc.ReasonDeadline && res.Code != rpc.ReasonWorkerLost) {
		t.Fatalf("fork bomb: %s/%d (%s), want INDETERMINATE -22 or -21", res.Phase, res.Code, res.Message)
	}
	logAnswer(t, "fork_bomb", res)

	// Another engine's spare is frozen while it waits and thawed to serve, here for an s3://
	// dataset:
	// the cgroup freezer of a domain the uid-65534 sidecar made itself.
	srv := testminio.Shared(t)
	ref := rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://" + strings.ToLower(randID("deleg-")), Endpoint: srv.Endpoint}, Path: "ds"}
	creds := &rpc.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	report := map[string]string{"report": "credentials"}
	first, err := toyMutate(t, e.c, ref, creds, report)
	if err != nil || first.Code != rpc.NativeNotSupported {
		t.Fatalf("toy call on MinIO: %+v %v", first, err)
	}
	time.Sleep(3 * time.Second) // the spare that follows it: launched, then frozen 2 s later
	if idle := idleSpares(parent); len(idle) != 1 || slices.Contains(slices.Collect(maps.Values(idle)), false) {
		t.Fatalf("idle spares of the uid-%d sidecar after a toy call on MinIO: %v, want one, frozen", nobody, idle)
	}
	second, err := toyMutate(t, e.c, ref, creds, report)
	if err != nil || second.Code != rpc.NativeNotSupported {
		t.Fatalf("toy call on the thawed spare: %+v %v", second, err)
	}
	if !servedBySpare(t, e.logs, second.InvocationID) {
		t.Fatalf("the second toy call was not served by the spare")
	}

	// The sidecar removes its own directories; only the leaf it lives in stays (it cannot move
	// back out), and whoever delegated the subtree removes it, as systemd does with the unit.
	if err := e.c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		var left []string
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != dir && p != filepath.Join(dir, "supervisor") {
				left = append(left, p)
			}
			return nil
		})
		if len(left) > 0 {
			t.Errorf("left after the sidecar exited: %v", left)
		}
	}
}

func logAnswer(t *testing.T, what string, res rpc.MutateResult) {
	b, _ := json.Marshal(res)
	t.Logf("%s answer: %s", what, b)
}

func chownTree(root string, uid int) error {
	return filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
}
