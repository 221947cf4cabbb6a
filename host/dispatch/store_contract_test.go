package dispatch

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testetcd"
	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
)

// backend is one Store implementation under the contract suite (litestream's
// RunWithReplicaClient is the model): open returns a store on a fresh journal and a function
// that opens one more handle on the same journal, as another host process would (bbolt: the same
// handle, since one process owns the file).
type backend struct {
	name string
	open func(t *testing.T) (Store, func() Store)
}

func backends() []backend {
	return []backend{
		{"bolt", func(t *testing.T) (Store, func() Store) {
			s, err := OpenBolt(filepath.Join(t.TempDir(), "jobs.db"), BoltOptions{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s, func() Store { return s }
		}},
		{"etcd", func(t *testing.T) (Store, func() Store) {
			c := testetcd.Shared(t)
			prefix := testetcd.Prefix(t)
			n := 0
			open := func() Store {
				n++
				return openEtcdStore(t, c, prefix, fmt.Sprintf("node-%d", n))
			}
			return open(), open
		}},
	}
}

// openEtcdStore opens a node's store on prefix, closed (and the prefix checked) at cleanup.
func openEtcdStore(t *testing.T, c *testetcd.Cluster, prefix, node string) *EtcdStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := OpenEtcd(ctx, EtcdOptions{Endpoints: c.Endpoints, Prefix: prefix, Node: node, LeaseTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestStoreContract runs the one contract over bbolt and a real 3-member etcd cluster.
func TestStoreContract(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range slices.Concat(storeContract, cacheContract) {
				t.Run(c.name, func(t *testing.T) {
					s, another := b.open(t)
					c.run(t, s, another)
				})
			}
		})
	}
}

var storeContract = []struct {
	name string
	run  func(t *testing.T, s Store, another func() Store)
}{
	{"get missing is ErrNotFound", func(t *testing.T, s Store, _ func() Store) {
		if _, err := Get(s, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get = %v", err)
		}
	}},
	{"put and get keep every field", func(t *testing.T, s Store, another func() Store) {
		j := contractJob("a", StateRunning)
		j.InvocationID, j.Epoch, j.Sidecar, j.Deadline = "", "e1", "n1", time.Unix(1700000000, 0).UTC()
		j.Result = &Result{Code: 3, Error: "x"}
		mustUpdate(t, s, func(tx Tx) error { return tx.Put(&j) })
		got, err := Get(another(), "a")
		if err != nil || got.Epoch != "e1" || !got.Deadline.Equal(j.Deadline) || got.Result == nil || got.Result.Code != 3 || len(got.History) != 1 {
			t.Fatalf("Get = %+v, %v", got, err)
		}
	}},
	{"a segmented job and its steps keep their plan and segment work", func(t *testing.T, s Store, another func() Store) {
		p := contractJob("seg", StateRunning)
		p.Segmented = &SegmentedPlan{BuildID: "seg", Fragments: []uint64{0, 1, 2}, Runs: [][]uint64{{0, 1}, {2}},
			Sidecars: []string{"n1", "n2"}, Committer: "n1", Attempts: []int{1, 2}, Adopted: []string{"n2"}}
		st := contractJob(StepID("seg", rpc.OpSegment, 1, 2), StateCommitted)
		st.Op, st.Parent, st.Target = rpc.OpSegment, "seg", "n2"
		st.Segment = &rpc.SegmentSpec{BuildID: "seg", FragmentIDs: []uint64{2}}
		st.Result = &Result{Phase: rpc.PhaseNativeReturn, CompletionReason: rpc.CompletionSegmentWritten,
			IndexUUID: "0b5e6d3a-3c1b-4a55-9f3e-2f1f1f1f1f1f", PeakMemoryBytes: 7 << 20}
		mustUpdate(t, s, func(tx Tx) error {
			if err := tx.Put(&p); err != nil {
				return err
			}
			return tx.Put(&st)
		})
		o := another()
		got, err := Get(o, "seg")
		if err != nil || got.Segmented == nil || !reflect.DeepEqual(*got.Segmented, *p.Segmented) {
			t.Fatalf("parent = %+v, %v", got.Segmented, err)
		}
		steps, err := Steps(o, "seg")
		if err != nil || len(steps) != 1 || steps[0].ID != "seg.seg1.a2" || steps[0].Target != "n2" || steps[0].Segment == nil ||
			!reflect.DeepEqual(steps[0].Segment.FragmentIDs, []uint64{2}) || *steps[0].Result != *st.Result {
			t.Fatalf("steps = %+v, %v", steps, err)
		}
	}},
	{"active index follows each put; all is in id order", func(t *testing.T, s Store, another func() Store) {
		for _, id := range []string{"c", "a", "b"} {
			j := contractJob(id, StatePending)
			mustUpdate(t, s, func(tx Tx) error { return tx.Put(&j) })
		}
		b := contractJob("b", StateCommitted)
		b.SlotHeld = false
		mustUpdate(t, s, func(tx Tx) error { return tx.Put(&b) })
		o := another()
		if got := ids(t, o, true); got != "a c" {
			t.Fatalf("active = %q", got)
		}
		if got := ids(t, o, false); got != "a b c" {
			t.Fatalf("all = %q", got)
		}
		b.SlotHeld = true // active again
		mustUpdate(t, s, func(tx Tx) error { return tx.Put(&b) })
		mustUpdate(t, s, func(tx Tx) error { return tx.Delete("c") })
		if got := ids(t, o, true); got != "a b" {
			t.Fatalf("active after re-activation and delete = %q", got)
		}
		if got := ids(t, o, false); got != "a b" {
			t.Fatalf("all after delete = %q", got)
		}
	}},
	{"a failed update stores nothing; reads see the update's own writes", func(t *testing.T, s Store, _ func() Store) {
		boom := errors.New("boom")
		err := s.Update(func(tx Tx) error {
			j := contractJob("a", StatePending)
			if err := tx.Put(&j); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Update = %v", err)
		}
		if _, err := Get(s, "a"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("after a failed update: %v", err)
		}
		mustUpdate(t, s, func(tx Tx) error {
			j := contractJob("a", StatePending)
			if err := tx.Put(&j); err != nil {
				return err
			}
			if _, err := tx.Get("a"); err != nil {
				return err
			}
			n := 0
			if err := tx.Active(func(Job) error { n++; return nil }); err != nil || n != 1 {
				return fmt.Errorf("active in the same update: %d, %v", n, err)
			}
			if err := tx.Delete("a"); err != nil {
				return err
			}
			if _, err := tx.Get("a"); !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("get after delete: %v", err)
			}
			return tx.Put(&j)
		})
	}},
	{"view refuses writes", func(t *testing.T, s Store, _ func() Store) {
		err := s.View(func(tx Tx) error {
			j := contractJob("a", StatePending)
			return tx.Put(&j)
		})
		if !errors.Is(err, ErrReadOnly) {
			t.Fatalf("Put in View = %v", err)
		}
		if err := s.View(func(tx Tx) error { return tx.Delete("a") }); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("Delete in View = %v", err)
		}
	}},
	{"concurrent read-modify-write loses no update", func(t *testing.T, s Store, another func() Store) {
		j := contractJob("a", StatePending)
		mustUpdate(t, s, func(tx Tx) error { return tx.Put(&j) })
		handles := []Store{s, another()}
		const writers, each = 4, 10
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				h := handles[w%len(handles)]
				for range each {
					mustUpdate(t, h, func(tx Tx) error {
						j, err := tx.Get("a")
						if err != nil {
							return err
						}
						j.RefreshAttempts++
						return tx.Put(&j)
					})
				}
			})
		}
		wg.Wait()
		if got, _ := Get(s, "a"); got.RefreshAttempts != writers*each {
			t.Fatalf("%d increments survived, want %d", got.RefreshAttempts, writers*each)
		}
	}},
	{"admission is serializable: one holder per name, quotas exact", func(t *testing.T, s Store, another func() Store) {
		var ds []*Dispatcher
		for i, h := range []Store{s, another(), another()} {
			d, err := New(Config{Store: h, MaxUnresolved: 3, Logger: quietLog(), Now: time.Now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			_ = i
			ds = append(ds, d)
		}
		race := func(name func(i int) string) (ok int, errs []error) {
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i := range 9 {
				wg.Go(func() {
					_, err := ds[i%len(ds)].Submit(context.Background(), fakeRequest(name(i)))
					mu.Lock()
					defer mu.Unlock()
					if err == nil {
						ok++
					} else {
						errs = append(errs, err)
					}
				})
			}
			wg.Wait()
			return ok, errs
		}
		ok, errs := race(func(int) string { return "same" })
		for _, err := range errs {
			if !errors.Is(err, ErrNameBusy) {
				t.Fatalf("same name: %v", err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d admitted for one name", ok)
		}
		ok, errs = race(func(i int) string { return fmt.Sprintf("n%d", i) })
		for _, err := range errs {
			if !errors.Is(err, ErrDatasetQuota) && !errors.Is(err, ErrTotalQuota) {
				t.Fatalf("distinct names: %v", err)
			}
		}
		if ok != 2 {
			t.Fatalf("%d more admitted under a total quota of 3 with 1 held", ok)
		}
	}},
	{"watch sees a change committed through another handle", func(t *testing.T, s Store, another func() Store) {
		ctx, cancel := context.WithCancel(context.Background())
		ch, err := s.Watch(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		j := contractJob("a", StatePending)
		mustUpdate(t, another(), func(tx Tx) error { return tx.Put(&j) })
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("no notification")
		}
		cancel()
		for range ch { // closed once ctx ends
		}
	}},
	{"a dispatcher drives a job to its outcome and Wait returns it", func(t *testing.T, s Store, _ func() Store) {
		d, err := New(Config{Store: s, Interval: 10 * time.Millisecond, Logger: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		f := newFake()
		if err := d.AddSidecar("n1", f); err != nil {
			t.Fatal(err)
		}
		j, err := d.Submit(context.Background(), fakeRequest("idx"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go d.Run(ctx)
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		defer wcancel()
		got, err := d.Wait(wctx, j.ID)
		if err != nil || got.State != StateCommitted || f.sent() != 1 {
			t.Fatalf("Wait = %s, %v (%d sends)", got.State, err, f.sent())
		}
	}},
}

func contractJob(id string, st State) Job {
	j := Job{ID: id, Op: "CREATE", State: st, SlotHeld: true, Refresh: RefreshNotRequired, Created: time.Now().UTC()}
	j.record(j.Created, EventSubmit, "", "")
	return j
}

func mustUpdate(t *testing.T, s Store, fn func(Tx) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Errorf("Update: %v", err)
	}
}

func ids(t *testing.T, s Store, active bool) string {
	t.Helper()
	var out []string
	err := s.View(func(tx Tx) error {
		each := tx.All
		if active {
			each = tx.Active
		}
		return each(func(j Job) error { out = append(out, j.ID); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(out)[1 : len(fmt.Sprint(out))-1]
}

func quietLog() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "dispatch", Level: hclog.Error})
}
