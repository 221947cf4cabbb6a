package isolation

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testenv"
)

// TestProbeExecutable: a worker binary passes (this test binary: its TestMain is a worker in
// probe mode); another program that runs (exit 0, not the probe's code), a missing file and a
// worker binary on a noexec mount fail with ErrNotExecutable.
func TestProbeExecutable(t *testing.T) {
	ctx := context.Background()
	if err := ProbeExecutable(ctx, "/proc/self/exe", nil); err != nil {
		t.Fatalf("the test binary as a worker probe: %v", err)
	}
	for _, path := range []string{"/bin/true", filepath.Join(t.TempDir(), "missing")} {
		if err := ProbeExecutable(ctx, path, nil); !errors.Is(err, ErrNotExecutable) {
			t.Fatalf("%s: %v, want ErrNotExecutable", path, err)
		}
	}

	copied := filepath.Join(testenv.NoexecDir(t), "worker")
	copyFile(t, "/proc/self/exe", copied)
	err := ProbeExecutable(ctx, copied, nil)
	if !errors.Is(err, ErrNotExecutable) || !errors.Is(err, os.ErrPermission) {
		t.Fatalf("a worker binary on a noexec mount: %v, want ErrNotExecutable and EACCES", err)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
