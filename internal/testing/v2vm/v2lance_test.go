package v2vm

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
)

// What TestLanceOnPureCgroupV2's plan sets for TestLanceOnPureV2 in the guest.
const (
	lancePythonEnv = "STEWARD_V2VM_LANCE_PYTHON" // the Lance venv's python, at its host path
	lanceDirEnv    = "STEWARD_V2VM_LANCE_DIR"    // engines/lance of this repository
	lanceSeedEnv   = "STEWARD_V2VM_LANCE_SEED"   // the datasets lancectl.py made on the host
	lanceOOM       = "oom"                       // 20,000 rows of 128-dimensional vectors
	lanceCommit    = "commit"                    // 2,000 rows of 32-dimensional vectors
)

// TestLanceOnPureCgroupV2 boots the pinned 6.12 generic kernel with cgroup_no_v1=all under QEMU,
// the host's root shared read-only over virtio-9p as the guest's (a tmpfs overlay takes the
// writes), and runs there, as root: TestLanceOnPureV2 (a real sidecar with the Lance engine of
// this repository and the host's Lance venv: an IVF_PQ build OOM-killed and classified, one
// committed and read back by Lance) and `steward doctor` as root and as uid 65534 in a
// delegated cgroup. The datasets are made on the host (TCG makes CPU work many times slower),
// small enough for the guest's builds to take seconds.
func TestLanceOnPureCgroupV2(t *testing.T) {
	tools, err := FindTools612()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	py, engines, err := testbin.LanceTools()
	if err != nil {
		testenv.Unavailable(t, "Lance engine not installed: "+err.Error())
	}
	// The venv at its real path (the repository's .tools may be a symlink): the guest sees the
	// host's files, not this process's view of them. Its bin/python stays the venv's.
	venv, err := filepath.EvalSymlinks(filepath.Dir(filepath.Dir(py)))
	if err != nil {
		t.Fatal(err)
	}
	if engines, err = filepath.EvalSymlinks(engines); err != nil {
		t.Fatal(err)
	}
	py = filepath.Join(venv, "bin", "python")
	dir := t.TempDir()
	t0 := time.Now()
	build(t, "build", "-o", filepath.Join(dir, "init"), "./internal/testing/v2vm/guestinit")
	build(t, "test", "-c", "-tags=v2guest", "-o", filepath.Join(dir, "v2vm.test"), "./internal/testing/v2vm")
	seed := filepath.Join(dir, "seed")
	lancectl(t, py, engines, "create", filepath.Join(seed, lanceOOM), "--rows", "20000")
	lancectl(t, py, engines, "create", filepath.Join(seed, lanceCommit), "--rows", "2000", "--dim", "32")
	files := []File{{Path: "/v2/steward", Mode: 0o755, Src: testbin.Steward(t)}, {Path: "/v2/v2vm.test", Mode: 0o755, Src: filepath.Join(dir, "v2vm.test")}}
	built := time.Since(t0) // the datasets too
	env := []string{"PATH=/v2:/usr/bin:/bin", "HOME=/tmp", "TMPDIR=/tmp", "LANG=C.UTF-8", testenv.RequireRealEnv + "=1", stewardEnv + "=/v2/steward"}
	plan := append([]Step{
		{Name: "lance", Args: []string{"/v2/v2vm.test", "-test.v", "-test.count=1", "-test.timeout=400s", "-test.run", "^TestLanceOnPureV2$"},
			Env: append(env, lancePythonEnv+"="+py, lanceDirEnv+"="+engines, lanceSeedEnv+"="+seed), Timeout: 420},
	}, doctorSteps(env)...)
	// Two Lance workers (the spare and the build) map pylance's library and its Python.
	r := boot(t, tools, dir, files, plan, Options{MemoryMiB: 2048, HostRoot: true, Timeout: 10 * time.Minute}, built)
	s := step(t, r, "lance")
	t.Logf("lance:\n%s", strings.Join(s.Lines, "\n"))
	if v := verdicts(s.Lines)["TestLanceOnPureV2"]; s.Exit != 0 || !strings.HasPrefix(v, "PASS") {
		t.Errorf("lance: exit %d, TestLanceOnPureV2 %q", s.Exit, v)
	}
	checkDoctors(t, r)
}

// lancectl runs engines/lance/lancectl.py on the host.
func lancectl(t *testing.T, py, engines string, args ...string) {
	t.Helper()
	cmd := exec.Command(py, append([]string{"-B", filepath.Join(engines, "lancectl.py")}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + t.TempDir()}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("lancectl %v: %v\n%s", args, err, out)
	}
}
