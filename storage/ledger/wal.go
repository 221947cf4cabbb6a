package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/cba1309c/steward/internal/boltfile"
)

// The write-ahead log makes a group commit durable with one data write and one flush. A bbolt
// commit needs two flushes (its pages, then the meta page that points at them), and on a disk
// with a volatile write cache each flush also waits for every write other processes have in
// flight: on the upload path that is MinIO storing the very object whose reservation is being
// made durable. So commits go to the log, and the bbolt file catches up in checkpoints that
// apply everything logged since the last one in one transaction, off the upload path (when the
// log is half full, or when a commit does not fit, and at Close).
//
// The log is one preallocated file of walSize bytes next to the journal (<journal>.wal): page 0
// is the header, naming the generation being written; records follow at page boundaries, each
// carrying its generation, a sequence number and a CRC-32C. A checkpoint records the generation
// it absorbed in the bbolt file (metaWALDone) in the same transaction as the changes, then the
// log starts the next generation: a header write, so stale records of earlier generations are
// never replayed. Writes overwrite blocks that were written when the file was made, so a flush
// commits no file system metadata. A page holds one commit's record (or a record spans several
// pages): a torn write can only damage the record being written, which was never acknowledged.
//
// Open replays the records of a generation newer than the journal's, in order, up to the first
// that is absent or torn; a sound record of that generation after a damaged one means records
// that were acknowledged are unreadable, and the log is refused as corrupt.

const (
	walPage   = 4096
	walSize   = 4 << 20 // room for 1023 one-page commits; a checkpoint comes at half
	walHeader = 20      // magic, generation, CRC
	recHeader = 24      // magic, sequence, generation, length, CRC

	walMagic = "STWDWAL1"
	recMagic = 0x52574453 // "SDWR"
)

var (
	bucketMeta  = []byte("meta")
	metaWALDone = []byte("wal-done") // the newest generation whose records the bbolt file holds
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// walPath is the log of the journal at path.
func walPath(path string) string { return path + ".wal" }

// bucket codes in a record, in the order of the journal's buckets.
var walBuckets = [][]byte{bucketTickets, bucketTransfers, bucketNotes}

type wal struct {
	f    *os.File
	path string
	gen  uint64 // the generation being written
	seq  uint32 // the last record's sequence number
	off  int64  // where the next record goes
}

// openWAL opens the log at path and returns it with the changes of its sound records, in
// order. A log that is present but damaged is a *CorruptError naming it; an absent one is
// fs.ErrNotExist. It writes nothing.
func openWAL(path string) (*wal, []jop, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	gen, ops, err := readWAL(f)
	if err != nil {
		f.Close()
		var ce *CorruptError
		if errors.As(err, &ce) {
			ce.Path = path
		}
		return nil, nil, err
	}
	return &wal{f: f, path: path, gen: gen, off: walPage}, ops, nil
}

// createWAL writes a new log of walSize bytes under a temporary name, flushes it and links it
// into place, so that a log at path always has its header and all of its blocks.
func createWAL(path string, gen uint64) (*wal, error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".new-*")
	if err != nil {
		return nil, err
	}
	name := tmp.Name()
	defer os.Remove(name)
	defer tmp.Close()
	if err := tmp.Chmod(0o600); err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<20)
	putHeader(buf, gen)
	for off := 0; off < walSize; off += len(buf) {
		if _, err := tmp.Write(buf); err != nil {
			return nil, err
		}
		clear(buf[:walHeader])
	}
	if err := tmp.Sync(); err != nil {
		return nil, err
	}
	if err := os.Link(name, path); err != nil {
		return nil, err // a log appeared meanwhile: never replaced
	}
	if err := boltfile.SyncDir(dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return &wal{f: f, path: path, gen: gen, off: walPage}, nil
}

func putHeader(b []byte, gen uint64) {
	copy(b, walMagic)
	binary.BigEndian.PutUint64(b[8:], gen)
	binary.BigEndian.PutUint32(b[16:], crc32.Checksum(b[:16], castagnoli))
}

// readWAL checks the log's header and returns its generation and the changes of its sound
// records, in order.
func readWAL(f *os.File) (uint64, []jop, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, nil, err
	}
	if st.Size() != walSize {
		return 0, nil, &CorruptError{Err: fmt.Errorf("write-ahead log of %d bytes, want %d", st.Size(), walSize)}
	}
	buf := make([]byte, walSize)
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, walSize), buf); err != nil {
		return 0, nil, err
	}
	h := buf[:walHeader]
	if string(h[:8]) != walMagic || binary.BigEndian.Uint32(h[16:]) != crc32.Checksum(h[:16], castagnoli) {
		return 0, nil, &CorruptError{Err: errors.New("write-ahead log header damaged")}
	}
	gen := binary.BigEndian.Uint64(h[8:])
	var ops []jop
	off, seq := walPage, uint32(0)
	for {
		payload, ok := recordAt(buf, off, gen, seq+1)
		if !ok {
			break
		}
		rec, err := decodeOps(payload)
		if err != nil {
			return 0, nil, &CorruptError{Err: fmt.Errorf("write-ahead log record %d: %w", seq+1, err)}
		}
		ops = append(ops, rec...)
		seq++
		off += pages(recHeader + len(payload))
	}
	// Records are written one after another, each after the one before was flushed: a sound
	// later record behind a damaged one was acknowledged while its predecessor was lost.
	for p := off + walPage; p < walSize; p += walPage {
		if s, ok := laterRecord(buf, p, gen, seq); ok {
			return 0, nil, &CorruptError{Err: fmt.Errorf("write-ahead log record %d unreadable, record %d after it is sound", seq+1, s)}
		}
	}
	return gen, ops, nil
}

// recordAt returns the payload of the record at off if it is a sound record of gen numbered seq.
func recordAt(buf []byte, off int, gen uint64, seq uint32) ([]byte, bool) {
	if off+recHeader > len(buf) {
		return nil, false
	}
	h := buf[off : off+recHeader]
	n := int(binary.BigEndian.Uint32(h[16:]))
	if binary.BigEndian.Uint32(h) != recMagic || binary.BigEndian.Uint32(h[4:]) != seq ||
		binary.BigEndian.Uint64(h[8:]) != gen || n > len(buf)-off-recHeader {
		return nil, false
	}
	crc := crc32.Update(crc32.Checksum(h[:20], castagnoli), castagnoli, buf[off+recHeader:off+recHeader+n])
	if crc != binary.BigEndian.Uint32(h[20:]) {
		return nil, false
	}
	return buf[off+recHeader : off+recHeader+n], true
}

// laterRecord reports a sound record of gen numbered after seq at off.
func laterRecord(buf []byte, off int, gen uint64, seq uint32) (uint32, bool) {
	if off+recHeader > len(buf) {
		return 0, false
	}
	s := binary.BigEndian.Uint32(buf[off+4:])
	if s <= seq {
		return 0, false
	}
	_, ok := recordAt(buf, off, gen, s)
	return s, ok
}

func pages(n int) int { return (n + walPage - 1) / walPage * walPage }

// fits reports whether a record of payload bytes fits in what is left of the log.
func (w *wal) fits(payload int) bool { return w.off+int64(pages(recHeader+payload)) <= walSize }

// used is how much of the log holds records of this generation.
func (w *wal) used() int64 { return w.off - walPage }

// append writes ops as the next record and flushes it. After an error the record may or may
// not be on disk; the caller checkpoints (which starts a new generation) before appending again.
func (w *wal) append(payload []byte) error {
	rec := make([]byte, pages(recHeader+len(payload)))
	binary.BigEndian.PutUint32(rec, recMagic)
	binary.BigEndian.PutUint32(rec[4:], w.seq+1)
	binary.BigEndian.PutUint64(rec[8:], w.gen)
	binary.BigEndian.PutUint32(rec[16:], uint32(len(payload)))
	copy(rec[recHeader:], payload)
	crc := crc32.Update(crc32.Checksum(rec[:20], castagnoli), castagnoli, payload)
	binary.BigEndian.PutUint32(rec[20:], crc)
	if _, err := w.f.WriteAt(rec, w.off); err != nil {
		return err
	}
	if err := datasync(w.f); err != nil {
		return err
	}
	w.seq++
	w.off += int64(len(rec))
	return nil
}

// reset starts generation gen: from its header's flush on, the records of earlier generations
// are stale.
func (w *wal) reset(gen uint64) error {
	h := make([]byte, walHeader)
	putHeader(h, gen)
	if _, err := w.f.WriteAt(h, 0); err != nil {
		return err
	}
	if err := datasync(w.f); err != nil {
		return err
	}
	w.gen, w.seq, w.off = gen, 0, walPage
	return nil
}

func (w *wal) close() error { return w.f.Close() }

// encodeOps is a record's payload: per change, its bucket's code, the key and the value
// (length+1; 0 is a delete).
func encodeOps(ops []jop) ([]byte, error) {
	var b []byte
	for _, op := range ops {
		code := -1
		for i, name := range walBuckets {
			if string(name) == string(op.bucket) {
				code = i
			}
		}
		if code < 0 {
			return nil, fmt.Errorf("journal change in unknown bucket %q", op.bucket)
		}
		b = append(b, byte(code))
		b = binary.AppendUvarint(b, uint64(len(op.key)))
		b = append(b, op.key...)
		if op.val == nil {
			b = append(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(op.val))+1)
		b = append(b, op.val...)
	}
	return b, nil
}

func decodeOps(b []byte) ([]jop, error) {
	var ops []jop
	for len(b) > 0 {
		code := int(b[0])
		if code >= len(walBuckets) {
			return nil, fmt.Errorf("unknown bucket code %d", code)
		}
		b = b[1:]
		key, rest, err := lengthPrefixed(b, 0)
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		val, rest, err := lengthPrefixed(rest, 1)
		if err != nil {
			return nil, fmt.Errorf("value: %w", err)
		}
		ops = append(ops, jop{bucket: walBuckets[code], key: key, val: val})
		b = rest
	}
	return ops, nil
}

// lengthPrefixed splits a uvarint length (less bias) and that many bytes off b. With bias 1, a
// length of 0 is nil (a delete) and 1 an empty value.
func lengthPrefixed(b []byte, bias uint64) ([]byte, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, nil, errors.New("bad length")
	}
	b = b[k:]
	if bias == 1 && n == 0 {
		return nil, b, nil
	}
	n -= bias
	if n > uint64(len(b)) {
		return nil, nil, errors.New("length past the record")
	}
	return append([]byte{}, b[:n]...), b[n:], nil
}
