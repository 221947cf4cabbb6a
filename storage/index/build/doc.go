// Package build turns unsorted columns into storage/index segments in bounded memory: the BTREE
// builder (runs sorted on a background core while the next one fills, numbers bucketed and
// radix-sorted, strings cut into key ranges or coded as numbers by a key code, spills past a
// memory budget, a chunked Finish on every core) and the BITMAP builder.
//
// It owns no format. Every byte it writes goes through storage/index's writer, and its
// contract is that a segment it builds is byte for byte the one index.BTreeWriter.Add makes of
// the same pairs in (key, row id) order (TestStringFinishMatchesSerialWriter,
// TestBucketFinishMatchesSerialWriter, FuzzStringBuild). It is the embedded engine's builder:
// correct and bounded first; its speed is measured by make bench, not tuned here.
package build
