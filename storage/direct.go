package storage

import (
	"errors"
	"os"
	"sync"
	"unsafe"
)

// directStage writes a staged file: its first writebackWindow bytes through the page cache
// (writeBehind), the rest with direct I/O (O_DIRECT) in whole windows copied into an aligned
// buffer, and the last bytes that do not fill an aligned block through the page cache again.
// An object smaller than a window never leaves writeBehind, nor does one on a filesystem
// that refuses direct I/O.
//
// Why: a large object (a 90 MB index segment) written through the page cache is copied into
// pages the kernel must first take from its free memory, and kept there dirty until written
// back, displacing what readers had cached. On a VM whose host lends memory back lazily (this
// project's test machines: a page the guest has not touched lately costs the host a fault,
// 2.3 ms a MiB measured against 0.35 for a reused one) that copy was 0.18 s of CPU per 90 MB
// segment. Direct I/O writes from one reused buffer: no new pages, nothing left dirty, and
// what the page cache held stays. The periodic flushes of writeBehind go on unchanged: the
// disk's own cache still needs them (direct I/O is not a flush).
type directStage struct {
	wb    *writeBehind
	align int     // direct I/O's alignment on wb.f; 0 while not direct
	buf   *[]byte // the aligned window being filled, while direct
	n     int     // bytes of *buf filled
	// refused: direct I/O was tried and not available; writeBehind takes everything.
	refused bool
}

func newDirectStage(f *os.File) *directStage { return &directStage{wb: &writeBehind{f: f}} }

// maxDirectAlign bounds the alignment direct I/O may ask for (a page: what the window's
// buffer is aligned to).
const maxDirectAlign = 4096

// directBufs holds windows (writebackWindow bytes, maxDirectAlign aligned) between stages.
var directBufs sync.Pool

func getDirectBuf() *[]byte {
	if b, ok := directBufs.Get().(*[]byte); ok {
		return b
	}
	raw := make([]byte, writebackWindow+maxDirectAlign)
	skip := (maxDirectAlign - int(uintptr(unsafe.Pointer(&raw[0]))%maxDirectAlign)) % maxDirectAlign
	b := raw[skip : skip+writebackWindow : skip+writebackWindow]
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
	n := 0
	for len(p) > 0 {
		c := copy((*d.buf)[d.n:], p)
		d.n, n, p = d.n+c, n+c, p[c:]
		if d.n == len(*d.buf) {
			if err := d.writeDirect(d.n); err != nil {
				return n, err
			}
			d.n = 0
		}
	}
	return n, nil
}

// startDirect turns direct I/O on once the first window is written (an aligned offset), or
// records that it is refused.
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
}

// writeDirect writes the first n bytes of the window (a multiple of the alignment) and lets
// writeBehind count them and start its flush when one is due.
func (d *directStage) writeDirect(n int) error {
	if n == 0 {
		return nil
	}
	m, err := d.wb.f.Write((*d.buf)[:n])
	d.wb.written += int64(m)
	d.wb.started, d.wb.waited = d.wb.written, d.wb.written // nothing of it is in the page cache
	if err != nil {
		return err
	}
	d.wb.flushBehind()
	return nil
}

// finish writes what is left of the window, its aligned part direct and the rest through the
// page cache, returns the window to the pool, then waits for writeBehind's flush (finish).
func (d *directStage) finish() error {
	var err error
	if d.buf != nil {
		whole := d.n &^ (d.align - 1)
		err = d.writeDirect(whole)
		if err == nil {
			err = setDirect(d.wb.f, false)
		}
		if err == nil && whole < d.n {
			var m int
			m, err = d.wb.f.Write((*d.buf)[whole:d.n])
			d.wb.written += int64(m)
		}
		directBufs.Put(d.buf)
		d.buf, d.n = nil, 0
	}
	return errors.Join(err, d.wb.finish())
}
