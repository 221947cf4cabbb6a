// Package testenv decides what a test does when the real thing it needs (root, cgroups, MinIO,
// python3) is missing: skip on a developer laptop, fail under STEWARD_REQUIRE_REAL=1 (CI).
package testenv

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// RequireRealEnv is the variable CI sets so that missing prerequisites fail instead of skipping.
const RequireRealEnv = "STEWARD_REQUIRE_REAL"

// CallSpacing is the untimed pause before each call of the benchmarks that time a call arriving
// at an idle machine: the sidecar's no-op with a prestarted worker (the spare is up by then) and
// the static fork+exec floor it is compared with. A call after a pause is slower than one back
// to back (idle vCPUs woken by IPI, cold caches; docs/PERFORMANCE.md §3): a spaced call measured
// against a hot floor would count that as the sidecar's.
const CallSpacing = 50 * time.Millisecond

// RequireReal reports whether STEWARD_REQUIRE_REAL=1 is set.
func RequireReal() bool { return os.Getenv(RequireRealEnv) == "1" }

// Unavailable skips t with reason, or fails it when STEWARD_REQUIRE_REAL=1.
func Unavailable(t testing.TB, reason string) {
	t.Helper()
	if RequireReal() {
		t.Fatalf("%s (required: %s=1)", reason, RequireRealEnv)
	}
	t.Skipf("%s (set %s=1 to make this a failure)", reason, RequireRealEnv)
}

// NeedRoot skips or fails t unless the test runs as root.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "test needs root")
	}
}

// GuestDir is a fresh temp dir that a contained worker's guest can use as a file:// store root:
// reachable (t.TempDir and its parent are 0700) and, as root, owned by the default guest
// (isolation.DefaultGuestID); the local store gives everything created below it the same owner.
// Not root, the guest is the test's own uid and the dir is only made reachable.
func GuestDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{d, filepath.Dir(d)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(d, guestID, guestID); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// GuestOwn hands an existing tree (written by another tool as root, e.g. pylance) to the default
// guest, as GuestDir's store roots are.
func GuestOwn(t testing.TB, root string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, guestID, guestID)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// guestID is isolation.DefaultGuestID (testenv imports nothing of steward's).
const guestID = 65534
