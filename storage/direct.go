package storage

import (
	"cmp"
	"errors"
	"os"
	"unsafe"
)

// directStage writes a staged file: its first writebackWindow bytes through the page cache
// (writeBehind), the rest with direct I/O (O_DIRECT) in whole windows copied into aligned
// buffers, and the last bytes that do not fill an aligned block through the page cache again.
// An object smaller than a window never leaves writeBehind, nor does one on a filesystem
// that refuses direct I/O.
//
// Why: a large object written through the page cache is copied into pages the kernel must first
// take from its free memory, and kept there dirty until written back, displacing what readers
// had cached; on a VM whose host lends memory back lazily that copy costs real CPU
// (docs/PERFORMANCE.md §1.1). Direct I/O writes from one reused buffer: no new pages, nothing
// left dirty, and what the page cache held stays. The periodic flushes of writeBehind go on
// unchanged: the disk's own cache still needs them (direct I/O is not a flush).
type directStage struct {
	wb    *writeBehind
	align int     // direct I/O's alignment on wb.f; 0 while not direct
	buf   *[]byte // the aligned window being filled, while direct
	n     int     // bytes of *buf filled
	// refused: direct I/O was tried and not available; writeBehind takes everything.
	refused bool
	// While direct, a writer goroutine (started by startDirect, ended by finish) writes the full
	// windows handed to it on full, one after the other, and hands each back on free with the
	// write's error: the producer fills one window while the others are on their way to the disk.
	// It owns wb until finish has waited for it (done).
	full chan window
	free chan window
	done chan struct{}
	err  error // the first write error the producer has seen
}

// window is a buffer of directStage and how many of its bytes to write (or, back on free, the
// error writing them).
type window struct {
	buf *[]byte
	n   int
	err error
}

func newDirectStage(f *os.File) *directStage { return &directStage{wb: &writeBehind{f: f}} }

// maxDirectAlign bounds the alignment direct I/O may ask for (a page: what the windows'
// buffers are aligned to).
const maxDirectAlign = 4096

// directWindow is the size of a direct write, and directWindows how many windows a stage
// has: one being filled, the others on their way to the disk. Small windows, because they are
// new memory in a fresh process (a worker builds once) that costs its faulting in and zeroing
// (docs/PERFORMANCE.md §1.2), and a 1 MiB write is still a large request for a disk.
const (
	directWindow  = 1 << 20
	directWindows = 4
)

// directBufs keeps the windows (directWindow bytes, maxDirectAlign aligned) of the last stage
// for the next: 4 MiB held for good once a process has staged a large object. Not a sync.Pool,
// which a collection empties: a build collects between its puts, and fresh windows must be
// allocated, zeroed and faulted in again (docs/PERFORMANCE.md §1.2).
var directBufs = make(chan *[]byte, directWindows)

// putDirectBuf keeps b for the next stage, unless a stage's worth is kept already.
func putDirectBuf(b *[]byte) {
	select {
	case directBufs <- b:
	default:
	}
}

// getDirectBuf returns a kept window or a new one.
func getDirectBuf() *[]byte {
	select {
	case b := <-directBufs:
		return b
	default:
	}
	raw := make([]byte, directWindow+maxDirectAlign)
	skip := (maxDirectAlign - int(uintptr(unsafe.Pointer(&raw[0]))%maxDirectAlign)) % maxDirectAlign
	b := raw[skip : skip+directWindow : skip+directWindow]
	return &b
}

func (d *directStage) Write(p []byte) (int, error) {
	if d.buf == nil {
		k := len(p)
		if !d.refused {
			k = min(k, int(max(writebackWindow-d.wb.written, 0)))
		}
		if n, err := d.wb.Write(p[:k]); err != nil || k == len(p) {
			return n, err
		}
		d.startDirect()
		if d.buf == nil {
			n, err := d.wb.Write(p[k:])
			return k + n, err
		}
		n, err := d.Write(p[k:])
		return k + n, err
	}
	if d.err != nil {
		return 0, d.err
	}
	n := 0
	for len(p) > 0 {
		c := copy((*d.buf)[d.n:], p)
		d.n, n, p = d.n+c, n+c, p[c:]
		if d.n < len(*d.buf) {
			continue
		}
		d.full <- window{buf: d.buf, n: d.n}
		w := <-d.free
		d.buf, d.n = w.buf, 0
		if w.err != nil {
			d.err = w.err
			return n, w.err
		}
	}
	return n, nil
}

// startDirect turns direct I/O on once the first window is written (an aligned offset) and
// starts the writer, or records that direct I/O is refused.
func (d *directStage) startDirect() {
	d.refused = true
	a := directAlign(d.wb.f)
	if a <= 0 || a > maxDirectAlign || a&(a-1) != 0 || d.wb.written%int64(a) != 0 || d.wb.failed {
		return
	}
	if setDirect(d.wb.f, true) != nil {
		return
	}
	d.align, d.buf, d.refused = a, getDirectBuf(), false
	d.full, d.free, d.done = make(chan window, directWindows-1), make(chan window, directWindows), make(chan struct{})
	for range directWindows - 1 {
		d.free <- window{buf: getDirectBuf()}
	}
	go d.writer()
}

// writer writes the windows handed to it until full is closed; after a failed write it only
// hands the rest back (with the error).
func (d *directStage) writer() {
	defer close(d.done)
	var err error
	for w := range d.full {
		if err == nil {
			err = d.writeDirect((*w.buf)[:w.n])
		}
		d.free <- window{buf: w.buf, err: err}
	}
}

// writeDirect writes b (a multiple of the alignment) and lets writeBehind count it and start
// its flush when one is due.
func (d *directStage) writeDirect(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	m, err := d.wb.f.Write(b)
	d.wb.written += int64(m)
	d.wb.started, d.wb.waited = d.wb.written, d.wb.written // nothing of it is in the page cache
	if err != nil {
		return err
	}
	d.wb.flushBehind()
	return nil
}

// finish hands the writer what is left of the window's aligned part and waits for it, writes
// the rest through the page cache, keeps the windows for the next stage, then waits for
// writeBehind's flush (finish).
func (d *directStage) finish() error {
	if d.buf == nil {
		return d.wb.finish()
	}
	tail, whole := d.buf, d.n&^(d.align-1)
	back := directWindows - 1 // windows the writer holds or handed back: all but the one being filled
	if d.err == nil && whole > 0 {
		d.full <- window{buf: tail, n: whole}
		back++
	}
	close(d.full)
	<-d.done
	err := d.err
	for range back {
		w := <-d.free
		err = cmp.Or(err, w.err)
		if w.buf != tail {
			putDirectBuf(w.buf)
		}
	}
	if err == nil {
		err = setDirect(d.wb.f, false)
	}
	if err == nil && whole < d.n {
		var m int
		m, err = d.wb.f.Write((*tail)[whole:d.n])
		d.wb.written += int64(m)
	}
	putDirectBuf(tail)
	d.buf, d.n = nil, 0
	return errors.Join(err, d.wb.finish())
}
