// Package testbin builds the steward binary (and the worker binary it embeds) once per test
// process, for tests that need a real sidecar subprocess (go-plugin loading, stdio spawn,
// SIGKILL behaviour).
package testbin

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testenv"
)

var (
	once   sync.Once
	dir    string
	path   string
	worker string
	err    error
)

// Steward returns the path of a freshly built cmd/steward, failing t if it cannot be built. It
// embeds Worker's binary, as `make build` builds steward.
func Steward(t testing.TB) string {
	t.Helper()
	built(t)
	return path
}

// Worker returns the path of the cmd/steward-worker that Steward's binary embeds (and its
// sidecar's workers run), failing t if it cannot be built.
func Worker(t testing.TB) string {
	t.Helper()
	built(t)
	return worker
}

// built builds both binaries the first time it is called, failing t if they cannot be built.
func built(t testing.TB) {
	t.Helper()
	once.Do(build)
	if err != nil {
		t.Fatalf("build steward: %v", err)
	}
}

func build() {
	root, rerr := RepoRoot()
	if rerr != nil {
		err = rerr
		return
	}
	dir, err = os.MkdirTemp("", "steward-bin-")
	if err != nil {
		return
	}
	path, worker = filepath.Join(dir, "steward"), filepath.Join(dir, "steward-worker")
	// Built as `make build` builds what ships (static, CGO_ENABLED=0; -trimpath; the worker with
	// its segments on 2 MiB boundaries, embedded into steward through -overlay, so the source
	// tree is not written), symbols kept for profiles: a cgo build is another program in the
	// ways containment depends on (psx broadcasts each per-thread call by signals there, by the
	// runtime's AllThreadsSyscall here; libc and ld.so are mapped into every worker).
	overlay := filepath.Join(dir, "overlay.json")
	o, merr := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, "cmd", "steward", "steward-worker"): worker}})
	if merr != nil {
		err = merr
		return
	}
	if err = os.WriteFile(overlay, o, 0o600); err != nil {
		return
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	for _, args := range [][]string{
		{"build", "-trimpath", "-ldflags=-R=0x200000", "-o", worker, "./cmd/steward-worker"},
		{"build", "-trimpath", "-tags=leanworker", "-overlay=" + overlay, "-o", path, "./cmd/steward"},
	} {
		cmd := exec.Command(goBin, args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Dir = root
		if out, berr := cmd.CombinedOutput(); berr != nil {
			err = fmt.Errorf("go %s: %w: %s", args[len(args)-1], berr, out)
			return
		}
	}
}

// Cleanup removes the built binary; call it from TestMain after m.Run.
func Cleanup() {
	if dir != "" {
		os.RemoveAll(dir)
	}
}

// Tool returns the path of a test server binary the project's scripts cache in the tools dir
// ($STEWARD_TOOLS, default <repo>/.tools), or an error naming the install command.
func Tool(name, install string) (string, error) {
	tools := os.Getenv("STEWARD_TOOLS")
	if tools == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		tools = filepath.Join(root, ".tools")
	}
	bin := filepath.Join(tools, name)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s binary not found at %s: run %s: %w", name, bin, install, err)
	}
	return bin, nil
}

// RepoRoot returns the directory of the module's go.mod, found upward from the working directory.
func RepoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("go.mod not found")
		}
		d = parent
	}
}

// PrivateState points every sidecar the test process starts (they inherit its environment) at a
// fresh state directory instead of /var/lib/steward, and returns the function that removes it.
// Call it at the top of TestMain.
func PrivateState() func() {
	dir, err := os.MkdirTemp("", "steward-test-state-")
	if err != nil {
		panic(err)
	}
	os.Setenv("STEWARD_STATE_DIR", dir)
	return func() { os.RemoveAll(dir) }
}

// RandID returns prefix followed by 12 random hex digits: names of buckets, datasets, cgroup
// parents and invocations that no other test (or earlier run) uses.
func RandID(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// LanceWheels returns the folder of the Lance engine's locked wheels (scripts/lance.sh wheels,
// which scripts/lance.sh install runs first): a venv installed from it needs no index.
func LanceWheels() (string, error) {
	return Tool("lance-wheels", "scripts/lance.sh wheels")
}

// LanceTools returns the Lance engine's venv python (installed by scripts/lance.sh into the tools
// dir) and the repository's engines/lance folder, or an error naming the install command.
func LanceTools() (python, dir string, err error) {
	root, err := RepoRoot()
	if err != nil {
		return "", "", err
	}
	py, err := Tool(filepath.Join("lance", "bin", "python"), "scripts/lance.sh install")
	if err != nil {
		return "", "", err
	}
	return py, filepath.Join(root, "engines", "lance"), nil
}

// InstalledLance installs the Lance engine as a user does — `steward lance install` from the
// locked wheels (LanceWheels, no index) into a fresh venv the guest can read — and returns the
// console script a sidecar registers, <venv>/bin/steward-lance-engine (ENGINE.md §7). Its
// modules are compiled at install; a checkout's engine.py run as a script (LanceTools) is
// compiled at every start, CPU an installed engine never spends (docs/PERFORMANCE.md §6.6).
func InstalledLance(t testing.TB) (string, error) {
	t.Helper()
	wheels, err := LanceWheels()
	if err != nil {
		return "", err
	}
	venv := filepath.Join(testenv.GuestDir(t), "lance")
	cmd := exec.Command(Steward(t), "lance", "install", "--venv", venv)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PIP_NO_INDEX=1", "PIP_FIND_LINKS="+wheels)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("steward lance install: %w\n%s", err, out)
	}
	return filepath.Join(venv, "bin", "steward-lance-engine"), nil
}
