package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkJobLifecycle drives b.N no-op jobs (a fake sidecar that commits at once) from submit
// to COMMITTED with the slot free, on bbolt and on a real 3-member etcd cluster, in the same run.
// It reports jobs/s and the store's write transactions per job (etcd: one transaction is one
// write round trip).
func BenchmarkJobLifecycle(b *testing.B) {
	for _, name := range []string{"bolt", "etcd"} {
		b.Run(name, func(b *testing.B) {
			s, _ := openBenchStore(b, name)
			commits := s.(interface{ Commits() int64 }).Commits
			d, err := New(Config{Store: s, MaxPerRound: 64, MaxInFlightPerSidecar: 64, MaxUnresolved: 1 << 20,
				MaxUnresolvedPerDataset: 1 << 20, Logger: quietLog()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { d.Close() })
			if err := d.AddSidecar("n1", newFake()); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			before := commits()
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				if _, err := d.Submit(ctx, fakeRequest(fmt.Sprintf("ix%d", i))); err != nil {
					b.Fatal(err)
				}
			}
			for {
				if _, err := d.Round(ctx); err != nil {
					b.Fatal(err)
				}
				left, err := d.List(ListOptions{Active: true})
				if err != nil {
					b.Fatal(err)
				}
				if len(left) == 0 && len(d.InFlight()) == 0 {
					break
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
			b.ReportMetric(float64(commits()-before)/float64(b.N), "writes/job")
		})
	}
}
