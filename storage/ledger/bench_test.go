package ledger_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
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
func BenchmarkUploadPath(b *testing.B) {
	for _, size := range []int{1 << 20, 128 << 20} {
		b.Run(fmt.Sprintf("size=%dMiB", size>>20), func(b *testing.B) {
			ctx := context.Background()
			s := minioStore(b)
			l := openLedger(b, ledger.Config{Path: b.TempDir() + "/l.db"}, false)
			data := bytes.Repeat([]byte("steward!"), size/8)
			owner := ledger.Owner{Kind: ledger.Invocation, ID: "bench"}
			put := func(key string) {
				if err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
					b.Fatal(err)
				}
			}
			plain := func() time.Duration {
				t0 := time.Now()
				put("a/obj")
				return time.Since(t0)
			}
			withLedger := func() time.Duration {
				t0 := time.Now()
				// Custody is admitted at once and made durable while the body streams: the
				// guard holds back the last byte, so the object cannot exist before its ticket.
				p, err := l.ReserveAsync(ctx, owner, "m", []string{"b/obj"})
				if err != nil {
					b.Fatal(err)
				}
				body := ledger.GuardReader(bytes.NewReader(data), int64(len(data)), p)
				if err := s.Put(ctx, "b/obj", body, int64(len(data))); err != nil {
					b.Fatal(err)
				}
				if err := l.Accept(ctx, owner, "m", []string{"b/obj"}); err != nil {
					b.Fatal(err)
				}
				return time.Since(t0)
			}
			plain() // warm both paths
			withLedger()
			rounds := b.N
			if size > 1<<20 {
				rounds = 4 // 16 puts of 128 MiB: under ten seconds
			}
			var ta, tb time.Duration
			b.ResetTimer()
			for range rounds {
				ta += plain()
				tb += withLedger()
				tb += withLedger()
				ta += plain()
			}
			b.StopTimer()
			b.ReportMetric(float64(ta.Microseconds())/float64(2*rounds), "put-µs")
			b.ReportMetric(float64(tb.Microseconds())/float64(2*rounds), "ledger-µs")
			b.ReportMetric(float64((tb-ta).Microseconds())/float64(2*rounds), "added-µs")
			b.ReportMetric(100*float64(tb-ta)/float64(ta), "added%")
		})
	}
}

// BenchmarkCleanupThroughput: abandoned objects deleted per second through the ledger vs raw
// DeleteBatch (RemoveObjects) on the same MinIO bucket, alternating which goes first.
func BenchmarkCleanupThroughput(b *testing.B) {
	ctx := context.Background()
	s := minioStore(b)
	const n = 3000
	var rawDur, ledDur time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rawKeys := keys(fmt.Sprintf("raw%d", i), n)
		ledKeys := keys(fmt.Sprintf("led%d", i), n)
		upload(b, s, append(append([]string(nil), rawKeys...), ledKeys...))
		l := openLedger(b, ledger.Config{Path: b.TempDir() + "/l.db", Stores: stores(map[string]storage.Store{"m": s})}, false)
		for o := 0; o < n; o += 100 {
			if err := l.Reserve(ctx, inv(fmt.Sprintf("o%d", o)), "m", ledKeys[o:o+100]); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		raw := func() {
			t0 := time.Now()
			for j := 0; j < n; j += storage.MaxDeleteBatch {
				for _, r := range s.DeleteBatch(ctx, rawKeys[j:min(j+storage.MaxDeleteBatch, n)]) {
					if r.Err != nil {
						b.Fatal(r.Err)
					}
				}
			}
			rawDur += time.Since(t0)
		}
		led := func() {
			t0 := time.Now()
			for o := 0; o < n; o += 100 {
				if err := l.Abandon(ctx, inv(fmt.Sprintf("o%d", o)), "m", nil); err != nil {
					b.Fatal(err)
				}
			}
			if err := l.WaitIdle(ctx); err != nil {
				b.Fatal(err)
			}
			ledDur += time.Since(t0)
		}
		if i%2 == 0 {
			raw()
			led()
		} else {
			led()
			raw()
		}
	}
	rawRate := float64(b.N*n) / rawDur.Seconds()
	ledRate := float64(b.N*n) / ledDur.Seconds()
	b.ReportMetric(rawRate, "raw-obj/s")
	b.ReportMetric(ledRate, "ledger-obj/s")
	b.ReportMetric(ledRate/rawRate, "ratio")
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
