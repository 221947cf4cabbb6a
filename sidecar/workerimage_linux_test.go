package sidecar

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cba1309c/steward/internal/testing/testenv"
)

// TestMakeWorkerImage: the image is the source's bytes (a file's, or an embedded executable's),
// read-only for everyone (0555 whatever the umask), with no partial file beside it; a source
// that cannot be read leaves nothing behind; making it again replaces it whole (the directory
// still holds one file).
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
	path, err := makeWorkerImage(dir, workerSource{path: src})
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
	exe := bytes.Repeat([]byte("worker\x00\x01"), imageCopyBuffer/8+77)
	if again, err := makeWorkerImage(dir, workerSource{exe: exe, path: src}); err != nil || again != path {
		t.Fatalf("making the image again, from an embedded executable: %q %v", again, err)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, exe) {
		t.Fatalf("image %s: %d bytes (%v), want the embedded executable's %d, not the file's", path, len(got), err, len(exe))
	}
	names, _ := os.ReadDir(dir)
	if len(names) != 1 || names[0].Name() != workerImageName {
		t.Fatalf("dir holds %v, want only %s", names, workerImageName)
	}

	empty := t.TempDir()
	if _, err := makeWorkerImage(empty, workerSource{path: filepath.Join(empty, "missing")}); err == nil {
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
	if path, err := makeWorkerImage(dir, workerSource{path: "/proc/self/exe"}); err == nil || path != "" {
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
		if path, err := workerImageIn(dir, workerSource{path: src}, refuse); path != "" || err == nil || !strings.Contains(err.Error(), "does not run") {
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

// TestWorkerImagePMDMapped: the image's page cache lets a mapping of it take 2 MiB entries
// wherever the file system gives the same to a file written in aligned 2 MiB writes (the
// control, written beside it here); a copy in smaller or unaligned writes would map in 4 KiB
// entries only, and every worker's start and exit would set up and tear down ~7,000 of them.
func TestWorkerImagePMDMapped(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "exe")
	data := make([]byte, 6<<20+4096) // three PMDs' worth and a tail
	for i := range data {
		data[i] = byte(i / 4096)
	}
	if err := os.WriteFile(src, data, 0o700); err != nil {
		t.Fatal(err)
	}
	// The source's own page cache must not decide: drop it, so the image is read back cold.
	if f, err := os.Open(src); err == nil {
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
	}
	image, err := makeWorkerImage(dir, workerSource{path: src})
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := makeWorkerImage(t.TempDir(), workerSource{exe: data})
	if err != nil {
		t.Fatal(err)
	}
	control := filepath.Join(dir, "control")
	f, err := os.OpenFile(control, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 2 << 20 {
		if _, err := f.Write(data[off:min(off+2<<20, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	// A file written 4 KiB at a time, the case the image must not be in (logged: 0 kB on this
	// project's VM, where the control maps all its whole 2 MiB, so the measure tells them apart).
	small := filepath.Join(dir, "small")
	if f, err = os.OpenFile(small, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(data); off += 4096 {
		if _, err := f.Write(data[off:min(off+4096, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	ctl, img, emb, sm := pmdMapped(t, control), pmdMapped(t, image), pmdMapped(t, embedded), pmdMapped(t, small)
	t.Logf("FilePmdMapped: control %d kB, image %d kB, image of an embedded executable %d kB, 4 KiB writes %d kB", ctl, img, emb, sm)
	if img < ctl || emb < ctl {
		t.Fatalf("the images map %d and %d kB in 2 MiB entries, a file written in aligned 2 MiB writes %d kB", img, emb, ctl)
	}
	if testenv.RequireReal() && ctl == 0 {
		t.Fatalf("this machine's %s maps no 2 MiB entries of a file written in 2 MiB writes: the check compares nothing (run it where the file system has large folios and THP is not disabled)", dir)
	}
}

var pmdSink byte // the touched bytes' sum, in a package variable so the reads are not dropped

// pmdMapped maps path read-only at a 2 MiB-aligned address, touches every page, and returns the
// kB of it mapped in 2 MiB entries (the mapping's FilePmdMapped in /proc/self/smaps).
func pmdMapped(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	size := int(fi.Size())
	// Reserve 2 MiB more than the file and place it at the first 2 MiB boundary inside that.
	reserve, err := unix.Mmap(-1, 0, size+2<<20, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(reserve)
	off := (2<<20 - uintptr(unsafe.Pointer(&reserve[0]))%(2<<20)) % (2 << 20)
	at := unsafe.Pointer(&reserve[off])
	p, err := unix.MmapPtr(int(f.Fd()), 0, at, uintptr(size), unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_FIXED)
	if err != nil || p != at {
		t.Fatalf("mmap %s at %p: %v", path, at, err)
	}
	m := unsafe.Slice((*byte)(p), size)
	addr := uintptr(p)
	for i := 0; i < size; i += 4096 {
		pmdSink += m[i]
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	start := strconv.FormatUint(uint64(addr), 16) + "-"
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if fields := strings.Fields(line); len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = strings.HasPrefix(fields[0], start)
			continue
		}
		if v, ok := strings.CutPrefix(line, "FilePmdMapped:"); ok && in {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatalf("smaps: %q", line)
			}
			return kb
		}
	}
	t.Fatalf("no smaps entry for the mapping of %s at %#x", path, addr)
	return 0
}
