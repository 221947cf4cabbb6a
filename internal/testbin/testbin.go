// Package testbin builds the steward binary once per test process, for tests that need a real
// sidecar subprocess (go-plugin loading, stdio spawn, SIGKILL behaviour).
package testbin

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	path string
	err  error
)

// Steward returns the path of a freshly built cmd/steward, failing t if it cannot be built.
func Steward(t testing.TB) string {
	t.Helper()
	once.Do(build)
	if err != nil {
		t.Fatalf("build steward: %v", err)
	}
	return path
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
	path = filepath.Join(dir, "steward")
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	// Built as `make release` builds what ships (static, CGO_ENABLED=0; -trimpath), symbols
	// kept for profiles: a cgo build is another program in the ways containment depends on
	// (psx broadcasts each per-thread call by signals there, by the runtime's
	// AllThreadsSyscall here; libc and ld.so are mapped into every worker).
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", path, "./cmd/steward")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = root
	if out, berr := cmd.CombinedOutput(); berr != nil {
		err = fmt.Errorf("%w: %s", berr, out)
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
