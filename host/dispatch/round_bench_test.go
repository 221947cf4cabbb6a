package dispatch

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testetcd"
	"github.com/cba1309c/steward/rpc"
)

// BenchmarkRoundIdle measures what a dispatcher's own process spends on one Round while n jobs
// are in flight and none of them has anything to do (each RUNNING on a live sidecar, its deadline
// far away): the reads of the active jobs by every phase of the round, the cost a host pays at
// every submit, answer and Interval. On bbolt and on a real 3-member etcd cluster; the figure is
// ns/op (one Round) and allocs/op.
func BenchmarkRoundIdle(b *testing.B) {
	for _, store := range []string{"bolt", "etcd"} {
		for _, n := range []int{100, 1000} {
			b.Run(fmt.Sprintf("%s/n=%d", store, n), func(b *testing.B) {
				s, node := openBenchStore(b, store)
				d, err := New(Config{Store: s, Logger: quietLog(), MaxUnresolved: 1 << 20, MaxUnresolvedPerDataset: 1 << 20})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { d.Close() })
				f := newFake()
				if err := d.AddSidecar("n1", f); err != nil {
					b.Fatal(err)
				}
				seedInFlight(b, s, n, f.Epoch(), node)
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					st, err := d.Round(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if st != (RoundStats{}) {
						b.Fatalf("an idle round acted: %+v", st)
					}
				}
			})
		}
	}
}

// openBenchStore opens a fresh store of kind store ("bolt" or "etcd") and returns it with its
// node name ("" on bbolt).
func openBenchStore(b *testing.B, store string) (Store, string) {
	if store == "bolt" {
		s, err := OpenBolt(filepath.Join(b.TempDir(), "jobs.db"), BoltOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s, ""
	}
	c := testetcd.Shared(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := OpenEtcd(ctx, EtcdOptions{Endpoints: c.Endpoints, Prefix: testetcd.Prefix(b), Node: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, "bench"
}

// seedInFlight stores n jobs as a dispatcher journals them at a send (a Lance CREATE, RUNNING on
// epoch, its submit and dispatch in the history), 50 to a transaction (etcd's default cap on a
// transaction's operations is 128).
func seedInFlight(b *testing.B, s Store, n int, epoch, node string) {
	var claim int64
	if c, ok := s.(Cluster); ok {
		_, claim = c.Node()
	}
	now := time.Now().UTC()
	for lo := 0; lo < n; lo += 50 {
		err := s.Update(func(tx Tx) error {
			for i := lo; i < min(n, lo+50); i++ {
				j := Job{ID: fmt.Sprintf("job-%05d", i), Op: rpc.OpCreate, AdmittedVersion: 3, Engine: "lance",
					Dataset:     rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file:///var/lib/data"}, Path: fmt.Sprintf("ds%d", i%10)},
					Index:       rpc.IndexSpec{Name: fmt.Sprintf("ix%d", i), Columns: []string{"id"}, Type: rpc.IndexBTree},
					TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
					State:       StatePending, SlotHeld: true, Refresh: RefreshNotRequired, Created: now}
				j.record(now, EventSubmit, "", "")
				j.State, j.InvocationID, j.Sidecar, j.Epoch = StateRunning, fmt.Sprintf("inv-%05d", i), "n1", epoch
				j.Deadline, j.Node, j.Claim = now.Add(time.Hour), node, claim
				j.record(now, EventDispatch, StatePending, "")
				if err := tx.Put(&j); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
