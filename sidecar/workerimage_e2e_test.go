package sidecar_test

import (
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
)

// workerExes returns the executables (readlink of /proc/<pid>/exe) of the processes in the
// sidecar's worker domains: its idle spares between calls.
func workerExes(e *sidecarEnv) []string {
	var exes []string
	for _, pid := range testsidecar.ProcessesIn(e.parent) {
		if exe, err := os.Readlink(filepath.Join("/proc", pid, "exe")); err == nil {
			exes = append(exes, exe)
		}
	}
	return exes
}

// waitForWorkerExe waits up to 10 s for a process of the sidecar's domains to run exe: a spare's
// domain exists, and its process runs the sidecar's own binary, until it has exec'd.
func waitForWorkerExe(t *testing.T, e *sidecarEnv, exe string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(workerExes(e), exe) {
		if time.Now().After(deadline) {
			t.Fatalf("no worker of the sidecar runs %s within 10 s: %v", exe, workerExes(e))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// TestWorkersStartFromWorkerImage: a sidecar whose temp dir is on a disk file system writes the
// worker executable its build embedded (cmd/steward-worker) into it (worker-image: the same
// bytes, mode 0555, owned by the sidecar) and its workers run that image, builds included; the
// image goes with the temp dir at a clean exit. On a temp dir on tmpfs no image is made (it would
// be memory, in small pages), nor on a noexec mount (nothing could start from it), and the
// workers run the sidecar's own executable (its worker mode), as before.
func TestWorkersStartFromWorkerImage(t *testing.T) {
	testenv.NeedRoot(t)
	bin := testbin.Worker(t)

	tmp := testenv.GuestDir(t)
	e := newSidecarWithEnv(t, append(os.Environ(), "TMPDIR="+tmp), "--executors", "1")
	dir := ownerTempDir(t, tmp, e.c.Pid())
	image := filepath.Join(dir, "worker-image")
	waitForWorkerExe(t, e, image) // the spare
	fi, err := os.Stat(image)
	if err != nil {
		t.Fatalf("no worker image in the sidecar's temp dir: %v (%v)", err, entries(t, dir))
	}
	if st := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o555 || int(st.Uid) != os.Geteuid() {
		t.Fatalf("worker image %s: mode %v uid %d, want a regular file of mode 0555 owned by uid %d", image, fi.Mode(), st.Uid, os.Geteuid())
	}
	if fileSum(t, image) != fileSum(t, bin) {
		t.Fatalf("worker image %s differs from the embedded worker executable %s", image, bin)
	}
	if exes := workerExes(e); len(exes) != 1 {
		t.Fatalf("the sidecar's workers run %v, want its one spare on %s", exes, image)
	}
	if names := entries(t, dir); len(names) != 2 || !slices.Contains(names, "worker-image") {
		t.Fatalf("the temp dir holds %v, want the spare's dir and worker-image (no .part left)", names)
	}
	e.makeDataset("img", 1000)
	if res := e.mutate(e.params(randID("inv-"), "img", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)); res.CommittedVersion != 2 {
		t.Fatalf("build from the worker image: %+v", res)
	}
	if !strings.Contains(e.logs.String(), `"worker_executable":"the embedded steward-worker"`) {
		t.Fatalf("the sidecar did not log its worker image:\n%s", e.logs.String())
	}
	e.c.Close()
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("the temp dir (worker image included) is still there after a clean exit: %v %v", err, entries(t, dir))
	}

	// tmpfs: no image, the workers run the sidecar's executable (its own worker mode).
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != 0x01021994 { // TMPFS_MAGIC
		testenv.Unavailable(t, "/dev/shm is not a tmpfs here")
	}
	shm, err := os.MkdirTemp("/dev/shm", "steward-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(shm) })
	if err := os.Chmod(shm, 0o755); err != nil {
		t.Fatal(err)
	}
	f := newSidecarWithEnv(t, append(os.Environ(), "TMPDIR="+shm), "--executors", "1")
	waitFor(t, func() bool { return len(workerExes(f)) == 1 })
	shmDir := ownerTempDir(t, shm, f.c.Pid())
	if _, err := os.Lstat(filepath.Join(shmDir, "worker-image")); !os.IsNotExist(err) {
		t.Fatalf("a worker image was made on tmpfs: %v", err)
	}
	if exes := workerExes(f); len(exes) != 1 || exes[0] != testbin.Steward(t) {
		t.Fatalf("on tmpfs the spare runs %v, want the sidecar's executable %s", exes, testbin.Steward(t))
	}
	if !strings.Contains(f.logs.String(), "the temp dir is on tmpfs") {
		t.Fatalf("the sidecar did not say why it made no worker image:\n%s", f.logs.String())
	}

	// noexec: no image either, and builds still run (their temp dirs need no exec).
	nx := testenv.NoexecDir(t)
	g := newSidecarWithEnv(t, append(os.Environ(), "TMPDIR="+nx), "--executors", "1")
	waitFor(t, func() bool { return len(workerExes(g)) == 1 })
	if exes := workerExes(g); len(exes) != 1 || exes[0] != testbin.Steward(t) {
		t.Fatalf("with a noexec temp dir the spare runs %v, want the sidecar's executable %s", exes, testbin.Steward(t))
	}
	if !strings.Contains(g.logs.String(), "the temp dir is on a noexec mount") {
		t.Fatalf("the sidecar did not say why it made no worker image:\n%s", g.logs.String())
	}
	g.makeDataset("nx", 1000)
	if res := g.mutate(g.params(randID("inv-"), "nx", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)); res.CommittedVersion != 2 {
		t.Fatalf("build with a noexec temp dir: %+v", res)
	}
}
