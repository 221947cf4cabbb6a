// Package index owns the on-disk formats of steward's scalar index segments, everything readers
// and writers must agree on: the layout, the serial writers, the readers and verification.
//
//   - BTREE: (key, row id) pairs sorted by key, cut into checksummed pages, followed by a lookup
//     table holding each page's offset, count, and min/max key. Equality and range lookups read
//     the lookup table once and then only the pages that can hold matches.
//   - BITMAP: one roaring bitmap of row ids per distinct key, followed by a lookup table of keys
//     and bitmap offsets. Equality, IN and range lookups union the bitmaps they need.
//
// Keys are int64, float64 or string, ordered by cmp.Compare (NaN sorts first and equals NaN).
// Decoders validate every length, offset and checksum and return errors wrapping
// storage.ErrCorrupt (through ErrCorruptSegment); they never panic on bad input. The package
// knows nothing about datasets or object keys: it reads through a RangeReader and writes to an
// io.Writer.
//
// It does not sort: a writer takes pairs in order. Turning an unsorted column into a segment
// in bounded memory on every core is storage/index/build's job, which reaches the writer only
// through its exported calls (sorted.go) and whose segments are byte for byte those of the
// serial writer.
//
// It reads exactly the formats it writes: BTREE format 2 (numbers) and 4 (strings), BITMAP format
// 1. Formats 1 and 3, and format 2 with string keys, were written only by development builds and
// are refused with ErrRetiredFormat (docs/FORMATS.md).
package index
