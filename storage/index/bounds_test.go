package index_test

import (
	"bytes"
	"context"
	"math/rand/v2"
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
	// Keys 2^42 apart and random row ids pack at 43 + 64 bits: about 27 MB of pages.
	const entries = 2_000_000
	r := rand.New(rand.NewPCG(3, 4))
	var buf bytes.Buffer
	w, err := index.NewBTreeWriter[int64](&buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range int64(entries) {
		if err := w.Add(i<<42-1<<62, r.Uint64()); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() < 24<<20 {
		t.Fatalf("segment of %d bytes: the test needs more than one run", buf.Len())
	}
	rec := &recorder{BytesReader: buf.Bytes()}
	n, err := index.VerifyBTree[int64](context.Background(), rec)
	if err != nil || n != entries {
		t.Fatalf("verify: %d entries, %v", n, err)
	}
	if rec.longest > 16<<20 {
		t.Fatalf("one read of %d bytes from a %d-byte segment; want runs of at most 16 MiB", rec.longest, buf.Len())
	}
	if rec.reads < 5 { // magic, trailer, lookup, and at least two runs
		t.Fatalf("%d reads", rec.reads)
	}
}
