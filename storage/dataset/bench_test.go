package dataset_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/storagetest"
)

// Benchmarks run on a generated dataset of STEWARD_BENCH_ROWS rows (default 10,000,000) in
// fragments of 1M rows, generated once into STEWARD_BENCH_CACHE (default
// $TMPDIR/steward-bench) and reused across runs. Each process works on a scratch copy: hard
// links on the local store, an upload into a fresh bucket on MinIO. Run with -benchtime 1x:
//
//	STEWARD_REQUIRE_REAL=1 go test -run '^$' -bench . -benchtime 1x -timeout 60m ./storage/dataset/

const benchSeed = 2024

func benchRows() int64 {
	if v, err := strconv.ParseInt(os.Getenv("STEWARD_BENCH_ROWS"), 10, 64); err == nil && v > 0 {
		return v
	}
	return 10_000_000
}

// benchBase returns the local store holding the cached base dataset ("bench", version 1).
func benchBase(b *testing.B) *storage.LocalStore {
	b.Helper()
	dir := os.Getenv("STEWARD_BENCH_CACHE")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "steward-bench")
	}
	dir = filepath.Join(dir, fmt.Sprintf("rows%d-seed%d", benchRows(), benchSeed))
	s, err := storage.NewLocalStore(dir)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := dataset.Open(ctx, s, "bench", 1); err == nil {
		return s
	}
	start := time.Now()
	_, _, err = dataset.Create(ctx, s, "bench", dataset.NewGenerator(benchRows(), benchSeed), dataset.WriteOptions{RowsPerFragment: 1 << 20})
	if err != nil {
		b.Fatalf("generate bench dataset: %v", err)
	}
	b.Logf("generated %d rows into %s in %v", benchRows(), dir, time.Since(start))
	return s
}

var (
	envMu    sync.Mutex
	benchEnv = map[string]storage.Store{}
)

// benchStore returns this process's scratch store of the given kind holding "bench" v1.
func benchStore(b *testing.B, kind string) storage.Store {
	b.Helper()
	envMu.Lock()
	defer envMu.Unlock()
	if s, ok := benchEnv[kind]; ok {
		return s
	}
	base := benchBase(b)
	ctx := context.Background()
	keys := []string{"bench/" + dataset.VersionKey(1)}
	d, err := dataset.Open(ctx, base, "bench", 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range d.Manifest().Fragments {
		keys = append(keys, "bench/"+f.Path)
	}
	var s storage.Store
	switch kind {
	case "local":
		scratch, err := os.MkdirTemp(filepath.Dir(base.Root()), "scratch-")
		if err != nil {
			b.Fatal(err)
		}
		scratchDirs = append(scratchDirs, scratch)
		for _, k := range keys {
			dst := filepath.Join(scratch, k)
			os.MkdirAll(filepath.Dir(dst), 0o755)
			if err := os.Link(filepath.Join(base.Root(), k), dst); err != nil {
				b.Fatal(err)
			}
		}
		s, err = storage.NewLocalStore(scratch)
		if err != nil {
			b.Fatal(err)
		}
	case "minio":
		srv := testminio.Shared(b)
		// Not storagetest.NewS3: its cleanup would drop the bucket after the first
		// sub-benchmark. The shared server and its data go away in TestMain.
		s3, err := storage.NewS3Store(ctx, storage.StoreConfig{
			Kind: storage.KindS3, Endpoint: srv.Endpoint, Bucket: storagetest.RandomName("bench-"),
			AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
		})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for _, k := range keys {
			f, err := os.Open(filepath.Join(base.Root(), k))
			if err != nil {
				b.Fatal(err)
			}
			fi, _ := f.Stat()
			err = s3.Put(ctx, k, f, fi.Size())
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("uploaded base dataset to MinIO in %v", time.Since(start))
		s = s3
	}
	benchEnv[kind] = s
	return s
}

var scratchDirs []string

func removeScratch() {
	for _, d := range scratchDirs {
		os.RemoveAll(d)
	}
}

// peakHeap samples live heap bytes every 2ms until stop is called and returns the peak
// above the level when it started.
func peakHeap() (stop func() uint64) {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	base := read()
	var peak uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			if v := read(); v > peak {
				peak = v
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-finished
		if peak < base {
			return 0
		}
		return peak - base
	}
}

// processCPU is the user+sys time this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// putSegment reads the segment files into memory and times a streamed Put (length unknown,
// as a build's upload) of their bytes to a scratch key of the same store, deleted afterwards.
// It also returns the CPU time this process and the server took during the Puts (see
// serverCPU).
func putSegment(b *testing.B, s storage.Store, files []dataset.IndexFile, server func() time.Duration) (total, clientCPU, serverCPU time.Duration) {
	ctx := context.Background()
	for _, f := range files {
		rc, err := s.Get(ctx, "bench/"+f.Path)
		if err != nil {
			b.Fatal(err)
		}
		// One buffer of the segment's size: io.ReadAll's growing clears tens of megabytes
		// at a time without a preemption point, which a collection waits on, spinning.
		seg := make([]byte, f.Size)
		n, err := io.ReadFull(rc, seg)
		if err == nil {
			if m, _ := rc.Read(make([]byte, 1)); m > 0 {
				err = errors.New("longer than its size")
			}
		}
		rc.Close()
		if err != nil {
			b.Fatalf("read segment %s: %d of %d bytes: %v", f.Path, n, f.Size, err)
		}
		key := "bench/put-" + path.Base(f.Path)
		scpu, cpu, start := server(), processCPU(), time.Now()
		err = s.Put(ctx, key, bytes.NewReader(seg), -1)
		total += time.Since(start)
		clientCPU += processCPU() - cpu
		serverCPU += server() - scpu
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range s.DeleteBatch(ctx, []string{key}) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	return total, clientCPU, serverCPU
}

// serverCPU returns a function that reads the CPU time the store's server has taken so far:
// MinIO's, whose CPUs are the benchmark's too, or none (0) for the local store.
func serverCPU(b *testing.B, kind string) func() time.Duration {
	if kind != "minio" {
		return func() time.Duration { return 0 }
	}
	srv := testminio.Shared(b)
	return func() time.Duration {
		d, err := srv.CPU()
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
}

// indexFiles is the segments of the named index at the latest version.
func indexFiles(b *testing.B, s storage.Store, name string) []dataset.IndexFile {
	d, err := dataset.Open(context.Background(), s, "bench", 0)
	if err != nil {
		b.Fatal(err)
	}
	ix, err := d.FindIndex(name)
	if err != nil {
		b.Fatal(err)
	}
	return ix.Files
}

// BenchmarkIndexBuild measures each index build against a plain full read of the same column
// in the same run and reports build/read (goal <= 2), the build's peak heap and the segment
// size. It also times a plain streamed Put of the segment's bytes to the same store after
// each build ("put-s"): a build cannot store the first byte of a segment in key order before it
// has read every row, so reading the column and storing the segment one after the other
// ("read+put/read", against the same read) is about the least a build can take. About: the
// read also tests every value against the scan's predicate, which a build does not.
func BenchmarkIndexBuild(b *testing.B) {
	cases := []struct {
		name   string
		column string
		typ    dataset.IndexType
		probe  any // a value not in the column, so the full read matches nothing
	}{
		{"btree-id", "id", dataset.BTree, int64(-1)},
		{"btree-price", "price", dataset.BTree, -1.0},
		{"btree-name", "name", dataset.BTree, "~"},
		{"bitmap-category", "category", dataset.Bitmap, "~"},
	}
	for _, kind := range []string{"local", "minio"} {
		for _, tc := range cases {
			b.Run(kind+"/"+tc.name, func(b *testing.B) {
				s := benchStore(b, kind)
				server := serverCPU(b, kind)
				ctx := context.Background()
				open := func() *dataset.Dataset {
					d, err := dataset.Open(ctx, s, "bench", 0)
					if err != nil {
						b.Fatal(err)
					}
					return d
				}
				build := func(d *dataset.Dataset) {
					_, err := d.Mutate(ctx, dataset.MutateSpec{
						Op: dataset.MutateReplace, Name: "bench_" + tc.name, Columns: []string{tc.column}, Type: tc.typ,
					}, dataset.MutateOptions{InvocationID: "bench"})
					if err != nil {
						b.Fatal(err)
					}
				}
				var readDur, buildDur, putDur, readCPU, buildCPU, putCPU time.Duration
				var readServer, buildServer, putServer time.Duration // the server's CPU in each
				var segBytes int64
				b.ResetTimer()
				for range b.N {
					d := open()
					// Each timed part starts on a collected heap, as a worker's build does in
					// a new process (the segment read back below leaves ~100 MB of garbage).
					runtime.GC()
					// The clock is read last before and first after each timed part.
					scpu, cpu, start := server(), processCPU(), time.Now()
					if _, err := d.Scan(ctx, dataset.Eq(tc.column, tc.probe)); err != nil {
						b.Fatal(err)
					}
					readDur += time.Since(start)
					readCPU += processCPU() - cpu
					readServer += server() - scpu
					runtime.GC()
					scpu, cpu, start = server(), processCPU(), time.Now()
					build(d)
					buildDur += time.Since(start)
					buildCPU += processCPU() - cpu
					buildServer += server() - scpu
					files := indexFiles(b, s, "bench_"+tc.name)
					segBytes = 0
					for _, f := range files {
						segBytes += f.Size
					}
					put, client, srv := putSegment(b, s, files, server)
					putDur, putCPU, putServer = putDur+put, putCPU+client, putServer+srv
				}
				// The peak heap comes from one more read and build, untimed: a goroutine woken
				// every 2 ms beside a build (the sampler, or a bare ticker doing nothing) made
				// the 10M-row name build 3-12% slower on a 2-vCPU VM, which a worker's build
				// never has beside it, nor the read it is measured against.
				d := open()
				if _, err := d.Scan(ctx, dataset.Eq(tc.column, tc.probe)); err != nil {
					b.Fatal(err)
				}
				stop := peakHeap()
				build(d)
				peak := stop()
				n := float64(b.N)
				b.ReportMetric(float64(segBytes)/(1<<20), "segment-MB")
				b.ReportMetric(readDur.Seconds()/n, "read-s")
				b.ReportMetric(buildDur.Seconds()/n, "build-s")
				b.ReportMetric(buildDur.Seconds()/readDur.Seconds(), "build/read")
				b.ReportMetric(putDur.Seconds()/n, "put-s")
				b.ReportMetric((readDur+putDur).Seconds()/readDur.Seconds(), "read+put/read")
				b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
				// CPU time (user+sys of the process, GC included) moves far less with
				// machine load than wall time does.
				b.ReportMetric(buildCPU.Seconds()/readCPU.Seconds(), "build/read-cpu")
				if kind == "minio" {
					// MinIO runs on the benchmark's CPUs: the CPU time this process and the server
					// take for the read, the build and the put, and how busy the build kept the
					// machine (both CPU times over the CPUs' time in the build's wall time; near 1,
					// the build is bound by CPU, the server's included).
					b.ReportMetric(readCPU.Seconds()/n, "read-cpu-s")
					b.ReportMetric(buildCPU.Seconds()/n, "build-cpu-s")
					b.ReportMetric(putCPU.Seconds()/n, "put-cpu-s")
					b.ReportMetric(readServer.Seconds()/n, "read-server-cpu-s")
					b.ReportMetric(buildServer.Seconds()/n, "build-server-cpu-s")
					b.ReportMetric(putServer.Seconds()/n, "put-server-cpu-s")
					b.ReportMetric((buildCPU+buildServer).Seconds()/(float64(runtime.NumCPU())*buildDur.Seconds()), "build-busy")
				}
			})
		}
	}
}

// BenchmarkPointLookup compares an equality lookup through a BTREE index with a full scan of
// the same column and reports scan/index (goal >= 100).
func BenchmarkPointLookup(b *testing.B) {
	for _, kind := range []string{"local", "minio"} {
		b.Run(kind, func(b *testing.B) {
			s := benchStore(b, kind)
			ctx := context.Background()
			d, err := dataset.Open(ctx, s, "bench", 0)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := d.FindIndex("bench_btree-id"); err != nil {
				if _, err := d.Mutate(ctx, dataset.MutateSpec{Op: dataset.MutateReplace, Name: "bench_btree-id", Columns: []string{"id"}, Type: dataset.BTree}, dataset.MutateOptions{}); err != nil {
					b.Fatal(err)
				}
				if d, err = dataset.Open(ctx, s, "bench", 0); err != nil {
					b.Fatal(err)
				}
			}
			rows := d.Rows()
			r := rand.New(rand.NewPCG(1, 2))
			start := time.Now()
			first, err := d.Query(ctx, dataset.Eq("id", r.Int64N(rows)))
			if err != nil || len(first.RowIDs) != 1 || first.Index == "" {
				b.Fatalf("first lookup: %+v, %v", first, err)
			}
			cold := time.Since(start)
			var scanDur, idxDur time.Duration
			var scans, lookups int
			b.ResetTimer()
			for range b.N {
				want := r.Int64N(rows)
				start := time.Now()
				sc, err := d.Scan(ctx, dataset.Eq("id", want))
				scanDur += time.Since(start)
				scans++
				if err != nil || len(sc.RowIDs) != 1 {
					b.Fatalf("scan: %v", err)
				}
				for range 200 {
					want := r.Int64N(rows)
					start := time.Now()
					q, err := d.Query(ctx, dataset.Eq("id", want))
					idxDur += time.Since(start)
					lookups++
					if err != nil || len(q.RowIDs) != 1 || q.RowIDs[0] != uint64(want) {
						b.Fatalf("lookup %d: %+v, %v", want, q, err)
					}
				}
			}
			scanAvg := scanDur.Seconds() / float64(scans)
			idxAvg := idxDur.Seconds() / float64(lookups)
			b.ReportMetric(scanAvg*1e3, "scan-ms")
			b.ReportMetric(idxAvg*1e6, "lookup-us")
			b.ReportMetric(cold.Seconds()*1e3, "first-lookup-ms")
			b.ReportMetric(scanAvg/idxAvg, "scan/index")
		})
	}
}
