package index_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/cba1309c/steward/storage/index"
)

// recorder is a RangeReader that remembers the longest read it served.
type recorder struct {
	index.BytesReader
	longest int64
	reads   int
}

func (r *recorder) ReadRange(ctx context.Context, off, n int64) ([]byte, error) {
	r.longest, r.reads = max(r.longest, n), r.reads+1
	return r.BytesReader.ReadRange(ctx, off, n)
}

// A full scan of a segment larger than one run reads it in bounded runs, not in one piece.
func TestScanReadsAreBounded(t *testing.T) {
	const entries = 1_300_000 // 16 bytes each: about 21 MB of pages
	var buf bytes.Buffer
	w, err := index.NewBTreeWriter[int64](&buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(entries) {
		if err := w.Add(i, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r := &recorder{BytesReader: buf.Bytes()}
	n, err := index.VerifyBTree[int64](context.Background(), r)
	if err != nil || n != entries {
		t.Fatalf("verify: %d entries, %v", n, err)
	}
	if r.longest > 16<<20 {
		t.Fatalf("one read of %d bytes from a %d-byte segment; want runs of at most 16 MiB", r.longest, buf.Len())
	}
	if r.reads < 5 { // magic, trailer, lookup, and at least two runs
		t.Fatalf("%d reads", r.reads)
	}
}
