package build

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkBucketSort sorts every bucket of 20 partitioned runs of 512K random 64-bit keys
// (a 10M-key string build of hex digests, coded: the runs keep a word and a byte an entry, see
// partition) and unpacks its pairs, as a coded Finish does before the pages are written, on one
// goroutine.
func BenchmarkBucketSort(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	const runs, n = 20, 1 << 19
	var sc sortScratch
	var f bucketFunc
	var rs []*memRun
	for i := range runs {
		run := &memRun{n: n, idsAscending: true, base: uint64(i * n), keys: make([]uint64, n)}
		for j := range run.keys {
			run.keys[j] = r.Uint64() | 1<<63
		}
		if i == 0 {
			f = newBucketFunc(run.keys)
		}
		run.partition(f, &sc)
		rs = append(rs, run)
	}
	s := bucketSorter{runs: rs, f: f, ascending: true}
	var blk numBlock
	var sk, ids []uint64
	b.ResetTimer()
	for range b.N {
		for j := range bucketCount {
			s.sort(j, &blk)
			sk, ids = blk.appendPairs(sk[:0], ids[:0], 0, blk.len())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(runs*n), "ns/key")
}
