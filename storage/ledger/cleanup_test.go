package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/ledger"
	"github.com/cba1309c/steward/storage/storagetest"
)

// faultStore wraps a real store and makes chosen DeleteBatch calls fail: a mid-batch failure
// cannot be produced on a real server deterministically. It also records batch sizes.
type faultStore struct {
	storage.Store
	mu      sync.Mutex
	calls   int
	sizes   []int
	failAt  map[int]bool // call number (1-based) -> every key fails, nothing is sent
	oddOnly map[int]bool // call number -> only odd positions are sent and succeed
	spans   []callSpan   // each call's start and end, in call order
}

type callSpan struct {
	start, end time.Time
	failed     bool
}

func (f *faultStore) DeleteBatch(ctx context.Context, keys []string) []storage.DeleteResult {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.sizes = append(f.sizes, len(keys))
	fail, odd := f.failAt[n], f.oddOnly[n]
	f.spans = append(f.spans, callSpan{start: time.Now(), failed: fail || odd})
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.spans[n-1].end = time.Now()
		f.mu.Unlock()
	}()
	switch {
	case fail:
		out := make([]storage.DeleteResult, len(keys))
		for i, k := range keys {
			out[i] = storage.DeleteResult{Key: k, Err: &storage.OpError{Op: "delete", Key: k, Kind: storage.ErrUnavailable, Err: errors.New("injected")}}
		}
		return out
	case odd:
		var send []string
		for i := 1; i < len(keys); i += 2 {
			send = append(send, keys[i])
		}
		res := f.Store.DeleteBatch(ctx, send)
		out := make([]storage.DeleteResult, len(keys))
		for i, k := range keys {
			out[i] = storage.DeleteResult{Key: k, Err: &storage.OpError{Op: "delete", Key: k, Kind: storage.ErrUnavailable, Err: errors.New("no answer (injected)")}}
			if i%2 == 1 {
				out[i] = res[i/2]
			}
		}
		return out
	}
	return f.Store.DeleteBatch(ctx, keys)
}

// checkPause fails t if a call started within wait of a failed call's end (calls already out
// when it failed excepted): after a failure no batch starts before RetryWait.
func (f *faultStore) checkPause(t *testing.T, wait time.Duration) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, failed := range f.spans {
		if !failed.failed {
			continue
		}
		for j, c := range f.spans {
			if j != i && c.start.After(failed.end) && c.start.Before(failed.end.Add(wait-20*time.Millisecond)) {
				t.Fatalf("call %d started %v after call %d failed (RetryWait %v)", j+1, c.start.Sub(failed.end), i+1, wait)
			}
		}
	}
}

func (f *faultStore) batchSizes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.sizes...)
}

// eachBackend runs the cleanup contract over a local directory and a real MinIO bucket.
func eachBackend(t *testing.T, fn func(t *testing.T, s storage.Store)) {
	t.Run("local", func(t *testing.T) { fn(t, storagetest.NewLocal(t)) })
	t.Run("minio", func(t *testing.T) { fn(t, minioStore(t)) })
}

// cleanupCase is one run of the cleanup contract.
type cleanupCase struct {
	name       string
	n          int
	failAt     []int
	oddOnly    []int
	absent     int // this many of the names were never uploaded
	wantKept   int // tickets left after the first faulty call
	wantDelete int // names confirmed after it
}

// TestCleanupContract: batches of at most BatchSize; confirmed batches released even when a
// later one fails; a failed batch kept whole and retried; ambiguous per-key results keep
// their tickets; absent names count as deleted; no batch starts for RetryWait after a failed
// one; everything converges to zero. With one delete in flight the counts after the first
// faulty call are exact; with two (the default) a batch out beside the faulty one may still
// land, so the end state and the pause are what is checked.
func TestCleanupContract(t *testing.T) {
	tests := []cleanupCase{
		{name: "all batches succeed", n: 2500},
		{name: "middle batch fails", n: 2500, failAt: []int{2}, wantKept: 1500, wantDelete: 1000},
		{name: "ambiguous half of a batch", n: 600, oddOnly: []int{1}, wantKept: 300, wantDelete: 300},
		{name: "already absent counts as deleted", n: 1200, absent: 700},
	}
	for _, tc := range tests {
		for _, inFlight := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/in-flight-%d", tc.name, inFlight), func(t *testing.T) {
				eachBackend(t, func(t *testing.T, s storage.Store) { checkCleanup(t, s, tc, inFlight) })
			})
		}
	}
}

func checkCleanup(t *testing.T, s storage.Store, tc cleanupCase, inFlight int) {
	const retryWait = 400 * time.Millisecond
	ctx := context.Background()
	fs := &faultStore{Store: s, failAt: set(tc.failAt), oddOnly: set(tc.oddOnly)}
	l := openLedger(t, ledger.Config{Path: t.TempDir() + "/l.db", RetryWait: retryWait, DeletesInFlight: inFlight,
		Stores: stores(map[string]storage.Store{"s": fs})}, false)
	ks := keys("c", tc.n)
	if err := l.Reserve(ctx, inv("w"), "s", ks); err != nil {
		t.Fatal(err)
	}
	upload(t, s, ks[tc.absent:])
	if err := l.Abandon(ctx, inv("w"), "s", nil); err != nil {
		t.Fatal(err)
	}
	if len(tc.failAt)+len(tc.oddOnly) > 0 && inFlight == 1 {
		waitFor(t, "a failed batch", func() bool { return l.Stats().DeleteFailures > 0 })
		st := l.Stats()
		if st.Used != tc.wantKept || st.Deleted != uint64(tc.wantDelete) || st.PendingRetry != 1 || st.DeleteFailures == 0 {
			t.Fatalf("after the failure: %+v", st)
		}
		if got := len(present(t, s, "c/")); got != tc.n-tc.absent-tc.wantDelete {
			t.Fatalf("%d objects left, want %d", got, tc.n-tc.absent-tc.wantDelete)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := l.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Used != 0 || st.Deleted != uint64(tc.n) || st.PendingRetry != 0 {
		t.Fatalf("after retry: %+v", st)
	}
	if left := present(t, s, "c/"); len(left) != 0 {
		t.Fatalf("%d objects left", len(left))
	}
	for _, n := range fs.batchSizes() {
		if n > storage.MaxDeleteBatch {
			t.Fatalf("batch of %d", n)
		}
	}
	fs.checkPause(t, retryWait)
}

func set(xs []int) map[int]bool {
	m := map[int]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// MinIO stopped in the middle of cleanup: tickets kept, retried, zero once it is back.
func TestCleanupOutage(t *testing.T) {
	ctx := context.Background()
	srv := testminio.Dedicated(t)
	s := storagetest.NewS3(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	l := openLedger(t, ledger.Config{Path: t.TempDir() + "/l.db", RetryWait: 100 * time.Millisecond, BatchSize: 100,
		Stores: stores(map[string]storage.Store{"m": s})}, false)
	var owners []ledger.Owner
	for i := range 4 {
		o := inv(fmt.Sprintf("inv-%d", i))
		ks := keys(o.ID, 150)
		if err := l.Reserve(ctx, o, "m", ks); err != nil {
			t.Fatal(err)
		}
		upload(t, s, ks)
		owners = append(owners, o)
	}
	srv.Stop()
	for _, o := range owners {
		if err := l.Abandon(ctx, o, "m", nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "failures during the outage", func() bool { return l.Stats().DeleteFailures >= 200 })
	st := l.Stats()
	if st.Used != 600 || st.PendingDelete != 600 || st.PendingRetry == 0 || st.OldestRetryAge <= 0 {
		t.Fatalf("during the outage: %+v", st)
	}
	time.Sleep(300 * time.Millisecond)
	if st := l.Stats(); st.Used != 600 {
		t.Fatalf("tickets released while the store is down: %+v", st)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := l.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Used != 0 || st.Deleted != 600 || st.PendingRetry != 0 || st.OldestRetryAge != 0 {
		t.Fatalf("after the outage: %+v", st)
	}
	if left := present(t, s, ""); len(left) != 0 {
		t.Fatalf("%d objects left", len(left))
	}
}

// Concurrent reservers, accepters and abandoners over a journal; after Close no goroutine of
// the ledger (worker, committer) is left.
func TestConcurrentNoLeak(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	local := storagetest.NewLocal(t)
	l, err := ledger.Open(ctx, ledger.Config{Path: t.TempDir() + "/l.db", Stores: stores(map[string]storage.Store{"s": local})})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				o := inv(fmt.Sprintf("w%d-%d", w, i))
				ks := keys(o.ID, 3)
				if err := l.Reserve(ctx, o, "s", ks); err != nil {
					t.Error(err)
					return
				}
				for _, k := range ks {
					if err := local.Put(ctx, k, strings.NewReader(k), int64(len(k))); err != nil {
						t.Error(err)
					}
				}
				var err error
				if i%2 == 0 {
					err = l.Accept(ctx, o, "s", nil)
				} else {
					err = l.Abandon(ctx, o, "s", nil)
				}
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := l.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.Used != 0 || st.Deleted != 16*25*3 {
		t.Fatalf("%+v", st)
	}
	if got := len(present(t, local, "")); got != 16*25*3 {
		t.Fatalf("%d accepted objects, want %d", got, 16*25*3)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
