package sidecar

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cba1309c/steward/internal/testenv"
)

// TestMakeWorkerImage: the image is the source's bytes, read-only for everyone (0555 whatever the
// umask), with no partial file beside it; a source that cannot be read leaves nothing behind;
// making it again replaces it whole (the directory still holds one file).
func TestMakeWorkerImage(t *testing.T) {
	dir := t.TempDir()
	if why := imageUnhelpful(dir); why != "" {
		t.Fatalf("t.TempDir() %s: %s (this test needs a temp dir on a disk file system)", dir, why)
	}
	src := filepath.Join(t.TempDir(), "exe")
	data := bytes.Repeat([]byte("steward\x00"), 3*imageCopyBuffer/8+123) // more than one buffer, not a multiple
	if err := os.WriteFile(src, data, 0o700); err != nil {
		t.Fatal(err)
	}
	path, err := makeWorkerImage(dir, src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("image %s: %d bytes (%v), want the source's %d", path, len(got), err, len(data))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o555 {
		t.Fatalf("image mode %v (%v), want 0555", fi.Mode(), err)
	}
	if again, err := makeWorkerImage(dir, src); err != nil || again != path {
		t.Fatalf("making the image again: %q %v", again, err)
	}
	names, _ := os.ReadDir(dir)
	if len(names) != 1 || names[0].Name() != workerImageName {
		t.Fatalf("dir holds %v, want only %s", names, workerImageName)
	}

	empty := t.TempDir()
	if _, err := makeWorkerImage(empty, filepath.Join(empty, "missing")); err == nil {
		t.Fatal("an image was made from a missing source")
	}
	if names, _ := os.ReadDir(empty); len(names) != 0 {
		t.Fatalf("a failed copy left %v", names)
	}
}

// TestWorkerImageNotOnTmpfs: a temp dir on tmpfs gets no image, and says why.
func TestWorkerImageNotOnTmpfs(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "steward-test-")
	if err != nil {
		t.Fatalf("/dev/shm: %v", err)
	}
	defer os.RemoveAll(dir)
	if why := imageUnhelpful(dir); !strings.Contains(why, "tmpfs") {
		t.Fatalf("/dev/shm: imageUnhelpful says %q, want tmpfs named", why)
	}
	if path, err := makeWorkerImage(dir, "/proc/self/exe"); err == nil || path != "" {
		t.Fatalf("an image was made on tmpfs: %q", path)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Fatalf("tmpfs dir holds %v", names)
	}
}

// TestWorkerImageVerified: an image its probe rejects is removed and never handed out, and the
// verdict is kept for the temp dir (the probe runs once per sidecar process).
func TestWorkerImageVerified(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() {
		ownerTemps.Lock()
		delete(ownerTemps.images, dir)
		ownerTemps.Unlock()
	})
	src := filepath.Join(t.TempDir(), "exe")
	if err := os.WriteFile(src, []byte("not a worker"), 0o700); err != nil {
		t.Fatal(err)
	}
	probes := 0
	refuse := func(path string) error {
		probes++
		if _, err := os.Stat(path); err != nil {
			t.Errorf("the probe was given %s, which does not exist: %v", path, err)
		}
		return errors.New("does not run")
	}
	for range 2 {
		if path, err := workerImageIn(dir, src, refuse); path != "" || err == nil || !strings.Contains(err.Error(), "does not run") {
			t.Fatalf("a rejected image: %q %v", path, err)
		}
	}
	if probes != 1 {
		t.Fatalf("probed %d times, want once", probes)
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Fatalf("a rejected image left %v", names)
	}
}

// TestWorkerImageNotOnNoexec: a temp dir on a noexec mount gets no image, and says why.
func TestWorkerImageNotOnNoexec(t *testing.T) {
	if why := imageUnhelpful(testenv.NoexecDir(t)); !strings.Contains(why, "noexec") {
		t.Fatalf("a noexec dir: imageUnhelpful says %q", why)
	}
}
