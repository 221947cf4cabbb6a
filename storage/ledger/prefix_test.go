package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/ledger"
	"github.com/cba1309c/steward/storage/storagetest"
)

// TestPrefixTickets: a prefix ticket owns its whole tree (no other owner can reserve inside or
// above it), is counted and durable, is released by accept, and on abandon everything under it
// is listed and deleted in batches, through a failed batch, before the ticket goes.
func TestPrefixTickets(t *testing.T) {
	eachBackend(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		fs := &faultStore{Store: s, failAt: set([]int{2})}
		path := t.TempDir() + "/l.db"
		cfg := ledger.Config{Path: path, RetryWait: 200 * time.Millisecond, BatchSize: 100,
			Stores: stores(map[string]storage.Store{"s": fs})}
		l := openLedger(t, cfg, false)
		const p = "ds/_indices/u1/"
		if err := l.Reserve(ctx, inv("a"), "s", []string{p, "ds/_transactions/1-x.txn"}); err != nil {
			t.Fatal(err)
		}
		for name, names := range map[string][]string{
			"a key under it":           {p + "part-0.idx"},
			"a prefix under it":        {p + "sub/"},
			"a prefix above it":        {"ds/_indices/"},
			"the same prefix":          {p},
			"a key and the prefix":     {"ds/other", p},
			"a prefix over a key of a": {"ds/_transactions/"},
		} {
			if err := l.Reserve(ctx, inv("b"), "s", names); !errors.Is(err, ledger.ErrNameOwned) {
				t.Errorf("%s: %v", name, err)
			}
		}
		// The owner itself may reserve below its prefix.
		if err := l.Reserve(ctx, inv("a"), "s", []string{p + "own.key"}); err != nil {
			t.Fatal(err)
		}
		if err := l.Reserve(ctx, inv("b"), "s", []string{"ds/_indices/u2/"}); err != nil {
			t.Fatal(err)
		}
		if st := l.Stats(); st.Used != 4 || st.Prefixes != 2 {
			t.Fatalf("stats %+v", st)
		}
		files := keys("ds/_indices/u1", 250)
		upload(t, s, append(files, "ds/_indices/u2/x", "ds/_indices/u10/neighbour"))
		// Durable: a reopened journal holds the same tickets and the same exclusion.
		l.Close()
		retired.Store(l, true)
		l = openLedger(t, cfg, false)
		if st := l.Stats(); st.Used != 4 || st.Prefixes != 2 {
			t.Fatalf("after reopening: %+v", st)
		}
		if err := l.Reserve(ctx, inv("b"), "s", []string{p + "late"}); !errors.Is(err, ledger.ErrNameOwned) {
			t.Fatalf("after reopening, a key under a's prefix: %v", err)
		}
		if err := l.Accept(ctx, inv("b"), "", nil); err != nil {
			t.Fatal(err)
		}
		if err := l.Abandon(ctx, inv("a"), "", nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the failed batch", func() bool { return l.Stats().DeleteFailures > 0 })
		if st := l.Stats(); st.Prefixes != 1 {
			t.Fatalf("the prefix ticket went before its tree was deleted: %+v", st)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := l.WaitIdle(wctx); err != nil {
			t.Fatal(err)
		}
		left := present(t, s, "ds/")
		if len(left) != 2 || !left["ds/_indices/u2/x"] || !left["ds/_indices/u10/neighbour"] {
			t.Fatalf("left after the abandon: %v", left)
		}
		if st := l.Stats(); st.Used != 0 || st.Prefixes != 0 || st.PrefixObjectsDeleted != 250 {
			t.Fatalf("stats after cleanup %+v", st)
		}
		for _, n := range fs.batchSizes() {
			if n > 100 {
				t.Fatalf("delete batch of %d", n)
			}
		}
		_ = s.DeleteBatch(ctx, []string{"ds/_indices/u2/x", "ds/_indices/u10/neighbour"})
	})
}

// TestSweepHonoursPrefixTickets: objects under a held prefix are owned, never swept.
func TestSweepHonoursPrefixTickets(t *testing.T) {
	ctx := context.Background()
	s := storagetest.NewLocal(t)
	indexedDataset(t, s, "db/t1", 1000, 300, "category", dataset.Bitmap)
	inFlight := []string{"db/t1/_indices/building/part-0", "db/t1/_indices/building/part-1"}
	orphan := "db/t1/_indices/dead/part-0"
	upload(t, s, append(inFlight, orphan))
	l := openLedger(t, ledger.Config{Path: t.TempDir() + "/l.db", Stores: stores(map[string]storage.Store{"m": s})}, false)
	if err := l.Reserve(ctx, inv("builder"), "m", []string{"db/t1/_indices/building/"}); err != nil {
		t.Fatal(err)
	}
	rep, err := l.Sweep(ctx, "m", "db/t1", ledger.SweepOptions{Layout: layout, Now: time.Now().Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.SkippedOwned != 2 || rep.Found != 1 || rep.Orphans[0] != orphan {
		t.Fatalf("report %+v", rep)
	}
	if left := present(t, s, "db/t1/_indices/building/"); len(left) != 2 {
		t.Fatalf("owned objects swept: %v", left)
	}
	if err := l.Accept(ctx, inv("builder"), "", nil); err != nil {
		t.Fatal(err)
	}
}
