package storage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testenv"
	"golang.org/x/sys/unix"
)

// pageStat is cachestat(2) over [off, off+n) of f: pages dirty and pages under writeback.
func pageStat(t *testing.T, f *os.File, off, n int64) (dirty, writeback uint64) {
	t.Helper()
	if n == 0 {
		return 0, 0 // cachestat's length 0 is "to the end of the file"
	}
	cs := cachestat(t, f, off, n)
	return cs.Dirty, cs.Writeback
}

// cachestat is cachestat(2) over [off, off+n) of f (n > 0).
func cachestat(t *testing.T, f *os.File, off, n int64) unix.Cachestat_t {
	t.Helper()
	var cs unix.Cachestat_t
	err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{Off: uint64(off), Len: uint64(n)}, &cs, 0)
	switch {
	case errors.Is(err, unix.ENOSYS):
		testenv.Unavailable(t, "cachestat(2) (Linux 6.5) is not available: the page cache state cannot be read")
	case err != nil:
		t.Fatalf("cachestat: %v", err)
	}
	return cs
}

// A staged file written through writeBehind holds at most two windows dirty: every window
// but the last two is on the disk (clean, no writeback pending) as the next bytes are
// written, and the content is what was written. Without writeBehind the same bytes stay
// dirty in the page cache until the fsync (the kernel's background writeback starts at 10%
// of memory or after 30 s).
func TestWriteBehindBoundsDirtyPages(t *testing.T) {
	const windows = 6
	page := int64(os.Getpagesize())
	body := make([]byte, windows*writebackWindow+12345)
	for i := range body {
		body[i] = byte(i*131 + i>>12)
	}
	for _, behind := range []bool{true, false} {
		f, err := os.Create(filepath.Join(t.TempDir(), "staged"))
		if err != nil {
			t.Fatal(err)
		}
		wb := &writeBehind{f: f}
		for off := 0; off < len(body); off += 1 << 20 {
			chunk := body[off:min(off+1<<20, len(body))]
			var err error
			if behind {
				_, err = wb.Write(chunk)
			} else {
				_, err = f.Write(chunk)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !behind {
				continue
			}
			if wb.failed {
				t.Fatal("writeback failed on a regular file")
			}
			if want := int64(off+len(chunk)) / writebackWindow * writebackWindow; wb.started != want || wb.waited != max(0, want-writebackWindow) {
				t.Fatalf("after %d bytes: writeback started to %d, waited to %d; want %d and %d", off+len(chunk), wb.started, wb.waited, want, max(0, want-writebackWindow))
			}
			if dirty, writing := pageStat(t, f, 0, wb.waited); dirty != 0 || writing != 0 {
				t.Fatalf("after %d bytes: %d pages dirty and %d under writeback in the %d bytes waited for", off+len(chunk), dirty, writing, wb.waited)
			}
			if dirty, _ := pageStat(t, f, 0, int64(len(body))); int64(dirty)*page > 2*writebackWindow+1<<20 {
				t.Fatalf("after %d bytes: %d pages dirty, more than two windows and a write", off+len(chunk), dirty)
			}
		}
		dirty, _ := pageStat(t, f, 0, int64(len(body)))
		switch {
		case behind && int64(dirty)*page > 2*writebackWindow:
			t.Fatalf("write-behind: %d pages dirty at the end", dirty)
		case !behind && int64(dirty)*page < int64(len(body))/2:
			// The check above would pass without writeBehind if the kernel wrote back on
			// its own: then this test proves nothing on this machine.
			t.Fatalf("plain writes: only %d pages dirty of %d bytes: the kernel writes back by itself here", dirty, len(body))
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f.Name())
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("read back %d bytes (equal %v), %v", len(got), bytes.Equal(got, body), err)
		}
		f.Close()
	}
}

// One Write of many windows (a bytes.Reader's WriteTo hands over everything at once) is cut
// into windows, so the bound holds for it too.
func TestWriteBehindCutsLargeWrites(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "staged"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	body := bytes.Repeat([]byte("window!!"), 5*writebackWindow/8+100)
	wb := &writeBehind{f: f}
	if n, err := wb.Write(body); err != nil || n != len(body) {
		t.Fatalf("wrote %d of %d, %v", n, len(body), err)
	}
	if wb.started != 5*writebackWindow || wb.waited != 4*writebackWindow {
		t.Fatalf("writeback started to %d, waited to %d; want %d and %d", wb.started, wb.waited, 5*writebackWindow, 4*writebackWindow)
	}
	if dirty, writing := pageStat(t, f, 0, wb.waited); dirty != 0 || writing != 0 {
		t.Fatalf("%d pages dirty and %d under writeback in the %d bytes waited for", dirty, writing, wb.waited)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes (equal %v), %v", len(got), bytes.Equal(got, body), err)
	}
}

// pipeSink is a pipe whose reader collects everything written until w is closed, then sends
// it on got.
func pipeSink(t *testing.T) (w *os.File, got <-chan []byte) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	c := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		b.ReadFrom(r)
		c <- b.Bytes()
	}()
	return w, c
}

// Writeback is advice: where it fails (here a pipe, which has no pages to write back) the
// writes go on and the rest is left to the fsync.
func TestWriteBehindFailureIsAdvice(t *testing.T) {
	w, got := pipeSink(t)
	wb := &writeBehind{f: w}
	body := bytes.Repeat([]byte("steward"), 3*writebackWindow/7)
	for off := 0; off < len(body); off += 1 << 20 {
		if _, err := wb.Write(body[off:min(off+1<<20, len(body))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := startWriteback(w, 0, 1); !errors.Is(err, unix.ESPIPE) {
		t.Fatalf("sync_file_range on a pipe: %v, want ESPIPE", err)
	}
	if err := wb.finish(); err != nil {
		t.Fatalf("finish: %v; advice that failed is no error", err)
	}
	w.Close()
	if b := <-got; !wb.failed || !bytes.Equal(b, body) {
		t.Fatalf("failed %v, %d of %d bytes through (equal %v)", wb.failed, len(b), len(body), bytes.Equal(b, body))
	}
}

// A flush that fails (here an fsync of a pipe: EINVAL) is the staged file's error: finish
// returns it, since the fsync after it on the same file would not report it again.
func TestWriteBehindFlushErrorIsReported(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	wb := &writeBehind{f: w, written: flushWindow} // as if a flush window went through
	wb.flushBehind()
	if wb.flushing == nil {
		t.Fatal("no flush started after a flush window")
	}
	if err := wb.finish(); !errors.Is(err, unix.EINVAL) || !wb.failed {
		t.Fatalf("finish: %v (failed %v); want the flush's EINVAL", err, wb.failed)
	}
}

// Every flushWindow bytes a flush of the staged file is started on a goroutine of its own, one
// at a time; finish waits for the one in flight, after which everything it flushed is on the
// disk (clean, no writeback pending), and the content is what was written.
func TestWriteBehindFlushes(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "staged"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	body := make([]byte, 3*flushWindow/2+12345)
	for i := range body {
		body[i] = byte(i*7 + i>>16)
	}
	wb := &writeBehind{f: f}
	for off := 0; off < len(body); off += 1 << 20 {
		if _, err := wb.Write(body[off:min(off+1<<20, len(body))]); err != nil {
			t.Fatal(err)
		}
		if wb.written < flushWindow && wb.flushing != nil {
			t.Fatalf("a flush started after %d bytes, before %d", wb.written, flushWindow)
		}
	}
	if wb.flushed != flushWindow {
		t.Fatalf("the last flush began at %d bytes; want %d (one flush a window)", wb.flushed, flushWindow)
	}
	if err := wb.finish(); err != nil || wb.flushing != nil {
		t.Fatalf("finish: %v (flush in flight: %v)", err, wb.flushing != nil)
	}
	if dirty, writing := pageStat(t, f, 0, wb.flushed); dirty != 0 || writing != 0 {
		t.Fatalf("%d pages dirty and %d under writeback in the %d bytes flushed", dirty, writing, wb.flushed)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read back %d bytes (equal %v), %v", len(got), bytes.Equal(got, body), err)
	}
}
