package storage

import (
	"bytes"
	"cmp"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testenv"
	"golang.org/x/sys/unix"
)

// directFile creates a file in a temp dir whose filesystem does direct I/O (statx says so).
func directFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "staged"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if directAlign(f) == 0 {
		testenv.Unavailable(t, "the temp dir's filesystem does not do direct I/O (statx STATX_DIOALIGN)")
	}
	return f
}

// A large staged file goes past its first window with direct I/O: the bytes read back are the
// ones written, whatever the sizes of the writes (one of them spanning windows), the page
// cache holds none of it past the first window but the unaligned tail's block, O_DIRECT is off
// again once it is finished, and the flushes came as in writeBehind.
func TestDirectStageLargeObject(t *testing.T) {
	f := directFile(t)
	body := make([]byte, 5*writebackWindow+3*writebackWindow/2+777)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range body {
		body[i] = byte(rng.Uint32())
	}
	d := newDirectStage(f)
	for off := 0; off < len(body); {
		n := 1 + rng.IntN(3<<20)
		if off > 2*writebackWindow && off < 3*writebackWindow {
			n = 2*writebackWindow + 5 // one write of two windows and a bit
		}
		n = min(n, len(body)-off)
		if m, err := d.Write(body[off : off+n]); err != nil || m != n {
			t.Fatalf("write at %d: %d of %d, %v", off, m, n, err)
		}
		off += n
	}
	if d.buf == nil || d.refused {
		t.Fatalf("direct I/O was not used (refused %v)", d.refused)
	}
	if err := d.finish(); err != nil {
		t.Fatal(err)
	}
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_DIRECT != 0 {
		t.Fatalf("after finish: flags %#x, %v: O_DIRECT still set", fl, err)
	}
	if d.wb.written != int64(len(body)) {
		t.Fatalf("counted %d bytes written, wrote %d", d.wb.written, len(body))
	}
	page := int64(os.Getpagesize())
	tail := int64(len(body)) &^ (page - 1)
	if c := cachestat(t, f, writebackWindow, tail-writebackWindow); c.Cache != 0 {
		t.Fatalf("%d pages of the direct part are in the page cache", c.Cache)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes (equal %v), %v", len(got), bytes.Equal(got, body), err)
	}
}

// An object of one window or less never turns direct I/O on: it is written through the page
// cache as writeBehind writes it.
func TestDirectStageSmallObject(t *testing.T) {
	f := directFile(t)
	body := bytes.Repeat([]byte("steward!"), writebackWindow/8)
	d := newDirectStage(f)
	for off := 0; off < len(body); off += 1 << 20 {
		if _, err := d.Write(body[off:min(off+1<<20, len(body))]); err != nil {
			t.Fatal(err)
		}
	}
	if d.buf != nil || d.refused {
		t.Fatalf("a one-window object went to direct I/O (buf %v, refused %v)", d.buf != nil, d.refused)
	}
	if err := d.finish(); err != nil {
		t.Fatal(err)
	}
	if c, all := cachestat(t, f, 0, int64(len(body))).Cache, uint64(len(body)/os.Getpagesize()); c != all {
		t.Fatalf("%d of %d pages cached: the small object did not go through the page cache", c, all)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes (equal %v), %v", len(got), bytes.Equal(got, body), err)
	}
}

// Where direct I/O is not available (a pipe: no alignment to read), the stage stays with
// writeBehind and every byte still arrives.
func TestDirectStageRefused(t *testing.T) {
	w, got := pipeSink(t)
	body := bytes.Repeat([]byte("window"), 3*writebackWindow/6+11)
	d := newDirectStage(w)
	for off := 0; off < len(body); off += 3 << 20 {
		if _, err := d.Write(body[off:min(off+3<<20, len(body))]); err != nil {
			t.Fatal(err)
		}
	}
	if !d.refused || d.buf != nil {
		t.Fatalf("a pipe was taken for direct I/O (refused %v)", d.refused)
	}
	if err := d.finish(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if b := <-got; !bytes.Equal(b, body) {
		t.Fatalf("the pipe got %d bytes of %d (equal %v)", len(b), len(body), bytes.Equal(b, body))
	}
}

// A direct write that fails (here past RLIMIT_FSIZE: EFBIG, SIGXFSZ being ignored by Go) is
// reported by the Write after it or by finish, the writes after it fail too, and finish
// still ends the writer: nothing hangs and O_DIRECT is not left half way.
func TestDirectStageWriteError(t *testing.T) {
	f := directFile(t)
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = 3*writebackWindow + 4096
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_FSIZE, &old)
	d := newDirectStage(f)
	chunk := bytes.Repeat([]byte{7}, 1<<20)
	var werr error
	for i := 0; i < 8*writebackWindow>>20 && werr == nil; i++ {
		_, werr = d.Write(chunk)
	}
	if werr != nil {
		if _, err := d.Write(chunk); err == nil {
			t.Fatal("a Write after a failed one succeeded")
		}
	}
	ferr := d.finish()
	if err := cmp.Or(werr, ferr); !errors.Is(err, unix.EFBIG) {
		t.Fatalf("write error %v, finish %v: want EFBIG from one of them", werr, ferr)
	}
	select {
	case <-d.done:
	default:
		t.Fatal("finish left the writer running")
	}
	if d.buf != nil {
		t.Fatal("finish left the window behind")
	}
}
