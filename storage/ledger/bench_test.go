package ledger_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/ledger"
)

// BenchmarkTicketMemory reports the bytes the ledger retains per ticket at full default
// capacity (65,536), measured after GC with every name still alive in the benchmark (so only
// the ledger's own copies count). The best-known design publishes 505, 159, 713 and 367
// B/ticket for the four shapes.
func BenchmarkTicketMemory(b *testing.B) {
	for _, shape := range []struct{ nameLen, perOwner int }{{42, 1}, {42, 64}, {256, 1}, {256, 64}} {
		b.Run(fmt.Sprintf("name=%d/perOwner=%d", shape.nameLen, shape.perOwner), func(b *testing.B) {
			const n = ledger.DefaultCapacity
			names := make([]string, n)
			for i := range names {
				p := fmt.Sprintf("ds/_indices/%08x/seg-%08d", i/shape.perOwner, i)
				names[i] = p + strings.Repeat("x", shape.nameLen-len(p))
			}
			owners := make([]ledger.Owner, n/shape.perOwner)
			for i := range owners {
				owners[i] = ledger.Owner{Kind: ledger.Invocation, ID: fmt.Sprintf("0b6e4f3a-1c2d-4e5f-8a9b-%012x", i)}
			}
			var perTicket float64
			for i := 0; i < b.N; i++ {
				before := heapAfterGC()
				l, err := ledger.Open(context.Background(), ledger.Config{})
				if err != nil {
					b.Fatal(err)
				}
				for o := range owners {
					if err := l.Reserve(context.Background(), owners[o], "main", names[o*shape.perOwner:(o+1)*shape.perOwner]); err != nil {
						b.Fatal(err)
					}
				}
				after := heapAfterGC()
				perTicket = float64(after-before) / n
				if l.Stats().Used != n {
					b.Fatal("not full")
				}
				runtime.KeepAlive(names)
				runtime.KeepAlive(owners)
				l.Close()
			}
			b.ReportMetric(perTicket, "B/ticket")
		})
	}
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkUploadPath: paired, alternating (ABBA) runs of a plain put (A) and
// reserve + put + accept through a journaled ledger (B) to MinIO. added% is B over A.
// Three figures of B explain added%: send-µs is when the S3 client asked for the body's end
// (it reads the whole body into the socket early: the rest of a put is MinIO storing it, which
// cannot begin before the object may exist); commit-µs is when the reservation was durable;
// guard-wait-µs is the time the body's end was held back waiting for it. At 1 MiB a third
// arm C (A B C C B A) puts plainly while the same journal work runs beside it: disk-µs, C over
// A, is what the journal's writes and fdatasyncs cost MinIO on the same disk, guard or not.
func BenchmarkUploadPath(b *testing.B) {
	for _, size := range []int{1 << 20, 128 << 20} {
		b.Run(fmt.Sprintf("size=%dMiB", size>>20), func(b *testing.B) {
			ctx := context.Background()
			s := minioStore(b)
			l := openLedger(b, ledger.Config{Path: b.TempDir() + "/l.db"}, false)
			data := bytes.Repeat([]byte("steward!"), size/8)
			owner := ledger.Owner{Kind: ledger.Invocation, ID: "bench"}
			put := func(key string, r io.Reader) {
				if err := s.Put(ctx, key, r, int64(len(data))); err != nil {
					b.Fatal(err)
				}
			}
			plain := func() time.Duration {
				t0 := time.Now()
				put("a/obj", bytes.NewReader(data))
				return time.Since(t0)
			}
			var guardWait, commit, send time.Duration
			withLedger := func() time.Duration {
				t0 := time.Now()
				// Custody is admitted at once and made durable while the body streams: the
				// guard holds back the last byte, so the object cannot exist before its ticket.
				p, err := l.ReserveAsync(ctx, owner, "m", []string{"b/obj"})
				if err != nil {
					b.Fatal(err)
				}
				durable := make(chan time.Duration, 1)
				go func() { p.Wait(); durable <- time.Since(t0) }()
				body := &timedTail{r: ledger.GuardReader(bytes.NewReader(data), int64(len(data)), p), size: int64(len(data))}
				put("b/obj", body)
				if err := l.Accept(ctx, owner, "m", []string{"b/obj"}); err != nil {
					b.Fatal(err)
				}
				d := time.Since(t0)
				guardWait += body.wait
				send += body.at.Sub(t0)
				commit += <-durable
				return d
			}
			// C: a plain put while the same journal work runs beside it, unguarded (a reservation
			// of another name made durable during the put, released after it): the disk's share
			// of added%, what the journal's writes and flushes cost MinIO's own on one disk.
			side := ledger.Owner{Kind: ledger.Invocation, ID: "bench-side"}
			beside := func() time.Duration {
				t0 := time.Now()
				p, err := l.ReserveAsync(ctx, side, "m", []string{"c/obj"})
				if err != nil {
					b.Fatal(err)
				}
				put("a/obj", bytes.NewReader(data))
				if err := p.Wait(); err != nil {
					b.Fatal(err)
				}
				if err := l.Accept(ctx, side, "m", []string{"c/obj"}); err != nil {
					b.Fatal(err)
				}
				return time.Since(t0)
			}
			plain() // warm every path
			withLedger()
			beside()
			guardWait, commit, send = 0, 0, 0
			rounds := b.N
			if size > 1<<20 {
				rounds = 4 // 16 puts of 128 MiB: under ten seconds
			}
			var ta, tb, tc time.Duration
			b.ResetTimer()
			for range rounds {
				ta += plain()
				tb += withLedger()
				if size == 1<<20 {
					tc += beside()
					tc += beside()
				}
				tb += withLedger()
				ta += plain()
			}
			b.StopTimer()
			if size == 1<<20 {
				b.ReportMetric(float64((tc-ta).Microseconds())/float64(2*rounds), "disk-µs")
			}
			b.ReportMetric(float64(ta.Microseconds())/float64(2*rounds), "put-µs")
			b.ReportMetric(float64(tb.Microseconds())/float64(2*rounds), "ledger-µs")
			b.ReportMetric(float64((tb-ta).Microseconds())/float64(2*rounds), "added-µs")
			b.ReportMetric(100*float64(tb-ta)/float64(ta), "added%")
			b.ReportMetric(float64(guardWait.Microseconds())/float64(2*rounds), "guard-wait-µs")
			b.ReportMetric(float64(commit.Microseconds())/float64(2*rounds), "commit-µs")
			b.ReportMetric(float64(send.Microseconds())/float64(2*rounds), "send-µs")
		})
	}
}

// timedTail passes reads through to a guarded body, notes when a read first reached its end
// and adds up the time spent in such reads (the only ones the guard can hold back). It keeps ReadAt and Seek, which
// the S3 client needs to stream the body without buffering it.
type timedTail struct {
	r    io.Reader
	size int64
	pos  int64
	at   time.Time // the first read that could deliver the end
	wait time.Duration
}

func (t *timedTail) tail(t0 time.Time) {
	if t.at.IsZero() {
		t.at = t0
	}
	t.wait += time.Since(t0)
}

func (t *timedTail) Read(p []byte) (int, error) {
	t0 := time.Now()
	n, err := t.r.Read(p)
	if t.pos+int64(len(p)) >= t.size {
		t.tail(t0)
	}
	t.pos += int64(n)
	return n, err
}

func (t *timedTail) ReadAt(p []byte, off int64) (int, error) {
	t0 := time.Now()
	n, err := t.r.(io.ReaderAt).ReadAt(p, off)
	if off+int64(len(p)) >= t.size {
		t.tail(t0)
	}
	return n, err
}

func (t *timedTail) Seek(off int64, whence int) (int64, error) {
	n, err := t.r.(io.Seeker).Seek(off, whence)
	if err == nil {
		t.pos = n
	}
	return n, err
}

// BenchmarkJournalCommit measures the physical cost the upload path cannot hide: one durable
// reservation (a write-ahead log record: one page write and one fdatasync) on this machine's disk, alone
// (idle) and while MinIO, on the same disk, stores 1 MiB objects back to back (busy), as the
// upload path's commits run. commit-µs is the median.
func BenchmarkJournalCommit(b *testing.B) {
	for _, busy := range []bool{false, true} {
		b.Run(map[bool]string{false: "disk=idle", true: "disk=minio-writing"}[busy], func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			l := openLedger(b, ledger.Config{Path: b.TempDir() + "/l.db"}, false)
			var wg sync.WaitGroup
			if busy {
				s := minioStore(b)
				data := bytes.Repeat([]byte("steward!"), 1<<17)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for ctx.Err() == nil {
						if err := s.Put(ctx, "busy/obj", bytes.NewReader(data), int64(len(data))); err != nil && ctx.Err() == nil {
							b.Error(err)
							return
						}
					}
				}()
				time.Sleep(100 * time.Millisecond)
			}
			owner := inv("commit")
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := l.Reserve(ctx, owner, "m", []string{"c/obj"}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				if err := l.Accept(ctx, owner, "m", []string{"c/obj"}); err != nil {
					b.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond) // the next reservation comes after the release's linger, as on the upload path
			}
			b.StopTimer()
			cancel()
			wg.Wait()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "commit-µs")
			b.ReportMetric(float64(lat[len(lat)*9/10].Microseconds()), "p90-µs")
		})
	}
}

// BenchmarkCleanupThroughput: abandoned objects deleted per second through the ledger vs raw
// DeleteBatch (RemoveObjects) on the same MinIO bucket, the same number of objects of the same
// size on each side. Each iteration uploads four sets of n objects together, flushes the disk
// (sync(2): otherwise whichever side goes first deletes against the writeback of 4n fresh
// objects) and deletes them in the order raw, ledger, ledger, raw (ABBA; BAAB on odd
// iterations), so that neither side always goes first.
func BenchmarkCleanupThroughput(b *testing.B) {
	ctx := context.Background()
	s := minioStore(b)
	counted := &batchCounter{Store: s}
	const n = 3000
	var rawDur, ledDur time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		sets := make([][]string, 4)
		var all []string
		for k := range sets {
			sets[k] = keys(fmt.Sprintf("i%d-s%d", i, k), n)
			all = append(all, sets[k]...)
		}
		upload(b, s, all)
		l := openLedger(b, ledger.Config{Path: b.TempDir() + "/l.db", Stores: stores(map[string]storage.Store{"m": counted})}, false)
		for _, k := range []int{1, 2} {
			for o := 0; o < n; o += 100 {
				if err := l.Reserve(ctx, inv(fmt.Sprintf("s%d-o%d", k, o)), "m", sets[k][o:o+100]); err != nil {
					b.Fatal(err)
				}
			}
		}
		syscall.Sync()
		b.StartTimer()
		raw := func(ks []string) {
			t0 := time.Now()
			for j := 0; j < n; j += storage.MaxDeleteBatch {
				for _, r := range s.DeleteBatch(ctx, ks[j:min(j+storage.MaxDeleteBatch, n)]) {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			}
			rawDur += time.Since(t0)
		}
		led := func(k int) {
			t0 := time.Now()
			for o := 0; o < n; o += 100 {
				if err := l.Abandon(ctx, inv(fmt.Sprintf("s%d-o%d", k, o)), "m", nil); err != nil {
					b.Fatal(err)
				}
			}
			if err := l.WaitIdle(ctx); err != nil {
				b.Fatal(err)
			}
			ledDur += time.Since(t0)
		}
		if i%2 == 0 {
			raw(sets[0])
			led(1)
			led(2)
			raw(sets[3])
		} else {
			led(1)
			raw(sets[0])
			raw(sets[3])
			led(2)
		}
	}
	rawRate := float64(2*b.N*n) / rawDur.Seconds()
	ledRate := float64(2*b.N*n) / ledDur.Seconds()
	b.ReportMetric(rawRate, "raw-obj/s")
	b.ReportMetric(ledRate, "ledger-obj/s")
	b.ReportMetric(ledRate/rawRate, "ratio")
	// Requests per set of n: raw sends n/MaxDeleteBatch; the ledger's worker takes what has
	// been abandoned when it is free (its first batch is the first owner's 100 names).
	b.ReportMetric(float64(counted.calls.Load())/float64(2*b.N), "ledger-batches/set")
}

// batchCounter counts the delete requests sent through it.
type batchCounter struct {
	storage.Store
	calls atomic.Int64
}

func (c *batchCounter) DeleteBatch(ctx context.Context, keys []string) []storage.DeleteResult {
	c.calls.Add(1)
	return c.Store.DeleteBatch(ctx, keys)
}

// BenchmarkReserve measures the journaled reservation alone, one and eight at a time (group
// commit shares one fsync among concurrent callers).
func BenchmarkReserve(b *testing.B) {
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("parallel=%d", par), func(b *testing.B) {
			ctx := context.Background()
			l := openLedger(b, ledger.Config{Path: b.TempDir() + "/l.db"}, true)
			b.SetParallelism(par)
			var next atomicCounter
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.add()
					o := inv(fmt.Sprintf("r%d", i))
					k := fmt.Sprintf("k/%d", i)
					if err := l.Reserve(ctx, o, "m", []string{k}); err != nil {
						b.Fatal(err)
					}
					if err := l.Accept(ctx, o, "m", []string{k}); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
