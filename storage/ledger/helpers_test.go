package ledger_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/ledger"
	"github.com/cba1309c/steward/storage/storagetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		helperMain()
		return
	}
	code := m.Run()
	testminio.Cleanup()
	os.Exit(code)
}

var (
	inv = func(id string) ledger.Owner { return ledger.Owner{Kind: ledger.Invocation, ID: id} }
	txn = func(id string) ledger.Owner { return ledger.Owner{Kind: ledger.HostTxn, ID: id} }
)

// stores resolves fixed names for a ledger under test.
func stores(m map[string]storage.Store) func(string) (storage.Store, error) {
	return func(name string) (storage.Store, error) {
		if s, ok := m[name]; ok {
			return s, nil
		}
		return nil, fmt.Errorf("%w: no store %q", storage.ErrNotFound, name)
	}
}

// retired holds ledgers a test closed and replaced by a reopened one.
var retired sync.Map

// openLedger opens a ledger that t closes. Unless keep is set, t also checks at the end that
// cleanup converged and the ledger holds no ticket (the storage invariant of STYLE.md).
func openLedger(t testing.TB, cfg ledger.Config, keep bool) *ledger.Ledger {
	t.Helper()
	l, err := ledger.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer l.Close()
		if _, gone := retired.Load(l); keep || gone || t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := l.WaitIdle(ctx); err != nil {
			t.Errorf("cleanup did not converge: %v (%+v)", err, l.Stats())
		}
		if st := l.Stats(); st.Used != 0 || st.Owners != 0 {
			owners, _ := l.Owners(ctx)
			t.Errorf("ledger not empty at the end: %+v owners %+v", st, owners)
		}
	})
	return l
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/obj-%05d", prefix, i)
	}
	return out
}

// upload writes small objects, 8 at a time.
func upload(t testing.TB, s storage.Store, ks []string) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, len(ks))
	sem := make(chan struct{}, 8)
	for _, k := range ks {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := s.Put(ctx, k, bytes.NewReader([]byte(k)), int64(len(k))); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// present returns which of ks exist in s.
func present(t testing.TB, s storage.Store, prefix string) map[string]bool {
	t.Helper()
	infos, err := storage.ListAll(context.Background(), s, prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, i := range infos {
		out[i.Key] = true
	}
	return out
}

func sharedServer(t testing.TB) *testminio.Server { return testminio.Shared(t) }

func minioStore(t testing.TB) *storage.S3Store {
	srv := testminio.Shared(t)
	return storagetest.NewS3(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
}

// waitFor polls cond until it holds or 30 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) add() int64 { return c.n.Add(1) }
