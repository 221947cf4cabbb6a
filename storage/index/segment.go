package index

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// Both segment kinds end with the same fixed trailer:
//
//	keyType u8 | reserved [3]u8 | count u32 | entries u64 | lookupOff u64 | lookupLen u32 |
//	lookupCRC u32 | magic [8]u8
//
// count is pages (BTREE) or distinct keys (BITMAP); entries is the number of row ids.
const trailerLen = 1 + 3 + 4 + 8 + 8 + 4 + 4 + 8

// Every read of a segment has a length known, and checked, before it is issued.
const (
	// maxLookupLen bounds how much a reader will allocate for a lookup table (256 MiB).
	maxLookupLen = 256 << 20
	// maxSpanLen bounds one BTREE page or one bitmap (256 MiB): a longer one in a lookup table
	// is corruption, and a writer refuses to write one.
	maxSpanLen = 256 << 20
	// maxRunLen bounds the contiguous pages a BTREE scan fetches in one read (16 MiB, or one
	// page if that is larger).
	maxRunLen = 16 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

type trailer struct {
	keyType   KeyType
	count     uint32
	entries   uint64
	lookupOff uint64
	lookupLen uint32
	lookupCRC uint32
}

func (t trailer) append(b []byte, magic string) []byte {
	b = append(b, byte(t.keyType), 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, t.count)
	b = binary.LittleEndian.AppendUint64(b, t.entries)
	b = binary.LittleEndian.AppendUint64(b, t.lookupOff)
	b = binary.LittleEndian.AppendUint32(b, t.lookupLen)
	b = binary.LittleEndian.AppendUint32(b, t.lookupCRC)
	return append(b, magic...)
}

// writeTail writes a segment's lookup table and trailer after its body.
func writeTail(w *countingWriter, kt KeyType, count uint32, entries uint64, lookup []byte, magic string) error {
	if len(lookup) > maxLookupLen {
		return fmt.Errorf("%w: a lookup table of %d bytes exceeds %d", ErrTooLarge, len(lookup), maxLookupLen)
	}
	t := trailer{
		keyType: kt, count: count, entries: entries,
		lookupOff: uint64(w.off), lookupLen: uint32(len(lookup)), lookupCRC: checksum(lookup),
	}
	if _, err := w.Write(lookup); err != nil {
		return err
	}
	_, err := w.Write(t.append(nil, magic))
	return err
}

// readFrame reads and checks a segment's header magic (one of magics, all of one length),
// trailer and lookup table, and returns the magic found.
func readFrame(ctx context.Context, r RangeReader, seg string, magics []string, want KeyType) (trailer, []byte, string, error) {
	size := r.Size()
	if size < int64(len(magics[0])+trailerLen) {
		return trailer{}, nil, "", corrupt(seg, 0, "segment of %d bytes is too short", size)
	}
	head, err := r.ReadRange(ctx, 0, int64(len(magics[0])))
	if err != nil {
		return trailer{}, nil, "", err
	}
	magic := string(head)
	if !slices.Contains(magics, magic) {
		return trailer{}, nil, "", corrupt(seg, 0, "bad header magic")
	}
	tb, err := r.ReadRange(ctx, size-trailerLen, trailerLen)
	if err != nil {
		return trailer{}, nil, "", err
	}
	if string(tb[trailerLen-8:]) != magic {
		return trailer{}, nil, "", corrupt(seg, size-8, "bad trailer magic (truncated segment?)")
	}
	t := trailer{
		keyType:   KeyType(tb[0]),
		count:     binary.LittleEndian.Uint32(tb[4:]),
		entries:   binary.LittleEndian.Uint64(tb[8:]),
		lookupOff: binary.LittleEndian.Uint64(tb[16:]),
		lookupLen: binary.LittleEndian.Uint32(tb[24:]),
		lookupCRC: binary.LittleEndian.Uint32(tb[28:]),
	}
	if t.keyType != want {
		return trailer{}, nil, "", &keyTypeError{seg: seg, got: t.keyType, want: want}
	}
	end := uint64(size - trailerLen)
	if t.lookupLen > maxLookupLen || t.lookupOff < uint64(len(magic)) || t.lookupOff > end || uint64(t.lookupLen) != end-t.lookupOff {
		return trailer{}, nil, "", corrupt(seg, size-trailerLen, "lookup table [%d,+%d) does not end at the trailer", t.lookupOff, t.lookupLen)
	}
	lookup, err := r.ReadRange(ctx, int64(t.lookupOff), int64(t.lookupLen))
	if err != nil {
		return trailer{}, nil, "", err
	}
	if checksum(lookup) != t.lookupCRC {
		return trailer{}, nil, "", corrupt(seg, int64(t.lookupOff), "lookup table checksum mismatch")
	}
	return t, lookup, magic, nil
}

type keyTypeError struct {
	seg       string
	got, want KeyType
}

func (e *keyTypeError) Error() string {
	return "index: " + e.seg + " segment holds " + e.got.String() + " keys, caller asked for " + e.want.String()
}

func (e *keyTypeError) Unwrap() []error { return []error{ErrKeyType, ErrCorruptSegment} }

// countingWriter tracks the offset of everything written.
type countingWriter struct {
	w   io.Writer
	off int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.off += int64(n)
	c.err = err
	return n, err
}

// lookupDecoder walks a lookup table, remembering the first failure.
type lookupDecoder struct {
	b   []byte
	bad bool
}

func (d *lookupDecoder) u32() uint32 {
	if len(d.b) < 4 {
		d.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *lookupDecoder) u64() uint64 {
	if len(d.b) < 8 {
		d.bad = true
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func lookupKey[K Key](d *lookupDecoder) K {
	k, n := decodeKey[K](d.b)
	if n <= 0 {
		d.bad = true
		var zero K
		return zero
	}
	d.b = d.b[n:]
	return k
}
