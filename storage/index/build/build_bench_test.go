package build_test

import (
	"io"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/storage/index"
	"github.com/cba1309c/steward/storage/index/build"
)

// BenchmarkBTreeBuildNumeric measures the numeric BTREE builder alone (Add in page-sized
// batches, Finish into io.Discard) on the bench dataset's two numeric columns: sorted ids and
// prices in cents.
func BenchmarkBTreeBuildNumeric(b *testing.B) {
	const rows, page = 10_000_000, 1 << 15
	r := rand.New(rand.NewPCG(1, 2))
	ids, prices := make([]int64, rows), make([]float64, rows)
	for i := range rows {
		ids[i] = int64(i)
		prices[i] = float64(r.IntN(1_000_000)) / 100
	}
	b.Run("id", func(b *testing.B) { benchBuild(b, ids, page) })
	b.Run("price", func(b *testing.B) { benchBuild(b, prices, page) })
}

// processCPU is the user+sys time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchBuild[K index.Key](b *testing.B, keys []K, page int) {
	cpu := processCPU()
	defer func() { b.ReportMetric((processCPU()-cpu).Seconds()/float64(b.N), "cpu-s/op") }()
	for range b.N {
		bt := build.NewBTreeBuilder[K](build.BuildOptions{TempDir: b.TempDir()})
		for i := 0; i < len(keys); i += page {
			if err := bt.Add(keys[i:min(i+page, len(keys))], uint64(i)); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := bt.Finish(io.Discard); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(bt.Stats().PeakBytes)/(1<<20), "peak-MB")
		bt.Close()
	}
}

// BenchmarkBTreeBuildStrings measures the string BTREE builder alone on keys like the bench
// dataset's name column (16 random hex digits), fed as a Parquet page's bytes and offsets
// (AddStrings) in page-sized batches, Finish into io.Discard.
func BenchmarkBTreeBuildStrings(b *testing.B) {
	const rows, page = 10_000_000, 1 << 15
	r := rand.New(rand.NewPCG(3, 4))
	const hex = "0123456789abcdef"
	data := make([]byte, 0, rows*16)
	offs := make([]uint32, 0, rows+1)
	offs = append(offs, 0)
	for range rows {
		v := r.Uint64()
		for k := range 16 {
			data = append(data, hex[v>>(4*k)&15])
		}
		offs = append(offs, uint32(len(data)))
	}
	cpu := processCPU()
	defer func() { b.ReportMetric((processCPU()-cpu).Seconds()/float64(b.N), "cpu-s/op") }()
	for range b.N {
		bt := build.NewBTreeBuilder[string](build.BuildOptions{TempDir: b.TempDir()})
		for i := 0; i < rows; i += page {
			if err := bt.AddStrings(data, offs[i:min(i+page, rows)+1], uint64(i)); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := bt.Finish(io.Discard); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(bt.Stats().PeakBytes)/(1<<20), "peak-MB")
		bt.Close()
	}
}
