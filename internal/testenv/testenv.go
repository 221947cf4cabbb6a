// Package testenv decides what a test does when the real thing it needs (root, cgroups, MinIO,
// python3) is missing: skip on a developer laptop, fail under STEWARD_REQUIRE_REAL=1 (CI).
package testenv

import (
	"os"
	"testing"
)

// RequireRealEnv is the variable CI sets so that missing prerequisites fail instead of skipping.
const RequireRealEnv = "STEWARD_REQUIRE_REAL"

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
