package storage

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testenv"
)

// machineCPU is the CPU time every core has spent outside idle and iowait so far: a write's
// cost includes the kernel's writeback threads, which the writing process's own rusage does not
// show.
func machineCPU(b *testing.B) time.Duration {
	busy, _, err := testenv.MachineCPU()
	if err != nil {
		b.Fatal(err)
	}
	return busy
}

// BenchmarkStage90MB: staging a 90 MB object (an index segment's size) in 1 MiB writes and
// fsyncing it, through the page cache (writeBehind) and with direct I/O past the first window
// (directStage), alternated; machine-wide CPU per object (the writeback threads included) and
// wall time, each variant against the other in the same run.
func BenchmarkStage90MB(b *testing.B) {
	body := make([]byte, 90<<20)
	for i := range body {
		body[i] = byte(i * 131)
	}
	dir := b.TempDir()
	type writer interface {
		Write([]byte) (int, error)
		finish() error
	}
	variants := []struct {
		name string
		new  func(*os.File) writer
	}{
		{"buffered", func(f *os.File) writer { return &writeBehind{f: f} }},
		{"direct", func(f *os.File) writer { return newDirectStage(f) }},
	}
	var wall, cpu [2]time.Duration
	for i := 0; i < b.N; i++ {
		for k := range variants {
			v := variants[(k+i)%2]
			f, err := os.Create(filepath.Join(dir, v.name+strconv.Itoa(i)))
			if err != nil {
				b.Fatal(err)
			}
			t0, c0 := time.Now(), machineCPU(b)
			w := v.new(f)
			for off := 0; off < len(body); off += 1 << 20 {
				if _, err := w.Write(body[off : off+1<<20]); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.finish(); err != nil {
				b.Fatal(err)
			}
			if ds, ok := w.(*directStage); ok && ds.refused {
				b.Fatalf("the bench's temp dir %s refuses direct I/O: the two variants would be the same", dir)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			wall[(k+i)%2] += time.Since(t0)
			cpu[(k+i)%2] += machineCPU(b) - c0
			f.Close()
		}
	}
	n := float64(b.N)
	for k, v := range variants {
		b.ReportMetric(wall[k].Seconds()*1e3/n, v.name+"-ms")
		b.ReportMetric(cpu[k].Seconds()*1e3/n, v.name+"-cpu-ms")
	}
}
