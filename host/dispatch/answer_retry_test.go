package dispatch

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
)

// flakyStore fails the next fail Updates with a transient error, as an etcd journal does for a
// moment when its leader or the member its client talks to is killed.
type flakyStore struct {
	Store
	fail   atomic.Int32
	failed atomic.Int32
}

var errTransient = errors.New("etcdserver: leader changed (test)")

func (s *flakyStore) Update(fn func(Tx) error) error {
	if s.fail.Add(-1) >= 0 {
		s.failed.Add(1)
		return errTransient
	}
	return s.Store.Update(fn)
}

// TestAnswerJournaledAfterStoreFailure: an answer whose first journaling attempts fail is
// journaled by a retry, so the job settles from its answer and frees its slot (found by the
// failover campaign: an answer lost to an etcd member kill left a NOT_COMMITTED job holding its
// slot for as long as its sidecar lived).
func TestAnswerJournaledAfterStoreFailure(t *testing.T) {
	noLeaks(t)
	bolt, err := OpenBolt(filepath.Join(t.TempDir(), "jobs.db"), BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	s := &flakyStore{Store: bolt}
	d, err := New(Config{Store: s, Interval: 10 * time.Millisecond, ExecuteDeadline: time.Minute,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "dispatch", Level: hclog.Error})})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f := newFake()
	release := make(chan struct{})
	f.setAnswer(func(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
		<-release
		return okAnswer(f, p), nil
	})
	d.AddSidecar("n1", f)
	j, err := d.Submit(context.Background(), fakeRequest("idx"))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := d.Round(context.Background()); err != nil || st.Dispatched != 1 {
		t.Fatalf("round: %+v %v", st, err)
	}
	s.fail.Store(3)
	close(release)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if j, err = d.Get(j.ID); err != nil {
			t.Fatal(err)
		}
		if j.State.Settled() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("answer never journaled after %d store failures: %s held %t", s.failed.Load(), j.State, j.SlotHeld)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if j.State != StateCommitted || j.SlotHeld || s.failed.Load() != 3 || f.sent() != 1 {
		t.Fatalf("%s held %t after %d failures, %d sends", j.State, j.SlotHeld, s.failed.Load(), f.sent())
	}
	answers := 0
	for _, h := range j.History {
		if h.Event == EventAnswer {
			answers++
		}
	}
	if answers != 1 {
		t.Fatalf("%d answer events: %+v", answers, j.History)
	}
}
