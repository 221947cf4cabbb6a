package build

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/cba1309c/steward/storage/index"
)

// BenchmarkEncodeRun codes a run of 512K keys of 16 hex digits (the dataset bench's name
// column) as a string build's background sort does.
func BenchmarkEncodeRun(b *testing.B) {
	run := hexRun(rand.New(rand.NewPCG(1, 2)), 1<<19)
	c := newKeyCode(run)
	keys := make([]uint64, run.n)
	b.ResetTimer()
	for range b.N {
		if _, ok := encodeRun(c, run, keys); !ok {
			b.Fatal("misfit")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(run.n), "ns/key")
}

// BenchmarkCodedPages writes pages of 1024 sorted keys of 16 hex digits from their codes, as a
// coded Finish does (the page's key and row id encoding, its checksum and lookup entry).
func BenchmarkCodedPages(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	const n = 1 << 18
	run := hexRun(r, n)
	c := newKeyCode(run)
	keys, _ := encodeRun(c, run, nil)
	slices.Sort(keys)
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = r.Uint64N(10_000_000)
	}
	w := index.NewChunkWriter[string](index.DefaultPageEntries, c)
	chunk := index.NewChunk(0)
	b.ResetTimer()
	for range b.N {
		w.StartChunk(chunk)
		if err := w.AddEncoded(keys, ids); err != nil {
			b.Fatal(err)
		}
		if err := w.EndChunk(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/key")
}

// hexRun is a filled string run of n random keys of 16 hex digits.
func hexRun(r *rand.Rand, n int) *memRun {
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = strconv.AppendUint(nil, r.Uint64()|1<<63, 16)
	}
	return runOf(keys)
}
