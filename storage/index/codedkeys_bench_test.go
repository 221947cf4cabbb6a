package index

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// BenchmarkEncodeRun codes a run of 512K keys of 16 hex digits (the dataset bench's name
// column) as a string build's background sort does.
func BenchmarkEncodeRun(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	run := newRun(true, 1<<19, 16<<19, fillArena{})
	for range 1 << 19 {
		k := strconv.FormatUint(r.Uint64()|1<<63, 16)
		run.data = append(run.data, k...)
		run.offs = append(run.offs, uint32(len(run.data)))
	}
	run.n = 1 << 19
	c := newKeyCode(run)
	keys := make([]uint64, run.n)
	b.ResetTimer()
	for range b.N {
		if _, ok := c.encodeRun(run, keys); !ok {
			b.Fatal("misfit")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(run.n), "ns/key")
}
