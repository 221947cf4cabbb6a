package ledger_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/ledger"
	"github.com/cba1309c/steward/storage/storagetest"
)

func TestReserveAcceptAbandon(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, l *ledger.Ledger) error
		want error
	}{
		{"reserve twice by the same owner is idempotent", func(t *testing.T, l *ledger.Ledger) error {
			if err := l.Reserve(ctx, inv("a"), "s", []string{"k1", "k2"}); err != nil {
				return err
			}
			return l.Reserve(ctx, inv("a"), "s", []string{"k2", "k3"})
		}, nil},
		{"another owner's name is refused, all or nothing", func(t *testing.T, l *ledger.Ledger) error {
			_ = l.Reserve(ctx, inv("a"), "s", []string{"k1"})
			err := l.Reserve(ctx, txn("b"), "s", []string{"k0", "k1"})
			if st, _ := l.Status(ctx, txn("b")); st.Held != 0 {
				t.Errorf("partial reservation: %+v", st)
			}
			return err
		}, ledger.ErrNameOwned},
		{"same key in another store is another name", func(t *testing.T, l *ledger.Ledger) error {
			_ = l.Reserve(ctx, inv("a"), "s", []string{"k1"})
			return l.Reserve(ctx, inv("b"), "t", []string{"k1"})
		}, nil},
		{"accept of someone else's name", func(t *testing.T, l *ledger.Ledger) error {
			_ = l.Reserve(ctx, inv("a"), "s", []string{"k1"})
			return l.Accept(ctx, inv("b"), "s", []string{"k1"})
		}, ledger.ErrNotOwned},
		{"accept of an abandoned name", func(t *testing.T, l *ledger.Ledger) error {
			_ = l.Reserve(ctx, inv("a"), "s", []string{"k1"})
			_ = l.Abandon(ctx, inv("a"), "s", []string{"k1"})
			return l.Accept(ctx, inv("a"), "s", []string{"k1"})
		}, ledger.ErrNotOwned},
		{"reserve of a name being deleted", func(t *testing.T, l *ledger.Ledger) error {
			_ = l.Reserve(ctx, inv("a"), "s", []string{"k1"})
			_ = l.Abandon(ctx, inv("a"), "s", nil)
			return l.Reserve(ctx, inv("a"), "s", []string{"k1"})
		}, ledger.ErrNameOwned},
		{"accept and abandon of unknown names succeed (retries)", func(t *testing.T, l *ledger.Ledger) error {
			if err := l.Accept(ctx, inv("a"), "s", []string{"nope"}); err != nil {
				return err
			}
			return l.Abandon(ctx, inv("a"), "s", []string{"nope"})
		}, nil},
		{"invalid key", func(t *testing.T, l *ledger.Ledger) error {
			return l.Reserve(ctx, inv("a"), "s", []string{"../x"})
		}, ledger.ErrInvalid},
		{"empty owner id", func(t *testing.T, l *ledger.Ledger) error {
			return l.Reserve(ctx, inv(""), "s", []string{"x"})
		}, ledger.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			held := &heldStore{Store: storagetest.NewLocal(t), release: make(chan struct{})}
			l := openLedger(t, ledger.Config{Stores: stores(map[string]storage.Store{"s": held, "t": held})}, false)
			err := tc.run(t, l)
			close(held.release)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			// Settle everything so the end-of-test invariant holds.
			owners, _ := l.Owners(ctx)
			for _, o := range owners {
				if err := l.Abandon(ctx, o.Owner, "", nil); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// heldStore keeps the cleanup worker's deletes waiting until release closes, so a name being
// deleted is still being deleted when a test looks at it (the worker is otherwise free to finish
// first, and the test would race it).
type heldStore struct {
	storage.Store
	release chan struct{}
}

func (h *heldStore) DeleteBatch(ctx context.Context, keys []string) []storage.DeleteResult {
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return h.Store.DeleteBatch(ctx, keys)
}

func TestStatusAndTickets(t *testing.T) {
	ctx := context.Background()
	l := openLedger(t, ledger.Config{}, false)
	if err := l.Reserve(ctx, txn("t1"), "s", []string{"b", "a"}); err != nil {
		t.Fatal(err)
	}
	st, _ := l.Status(ctx, txn("t1"))
	tk, _ := l.Tickets(ctx, txn("t1"))
	if st.Held != 2 || len(tk) != 2 || tk[0].Key != "a" || tk[0].State != ledger.Held {
		t.Fatalf("status %+v tickets %+v", st, tk)
	}
	if s := l.Stats(); s.Used != 2 || s.HighWater != 2 || s.Owners != 1 {
		t.Fatalf("stats %+v", s)
	}
	if err := l.Accept(ctx, txn("t1"), "", nil); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Used != 0 || s.HighWater != 2 {
		t.Fatalf("stats after accept %+v", s)
	}
}

// Capacity exhaustion refuses the next reservation before its upload, while the owners that
// hold tickets keep uploading, accepting and abandoning (real MinIO).
func TestCapacityExhaustion(t *testing.T) {
	ctx := context.Background()
	s := minioStore(t)
	l := openLedger(t, ledger.Config{Capacity: 10, Path: t.TempDir() + "/l.db", Stores: stores(map[string]storage.Store{"m": s})}, false)
	a := keys("a", 10)
	if err := l.Reserve(ctx, inv("a"), "m", a); err != nil {
		t.Fatal(err)
	}
	upload(t, s, a[:5])
	b := []string{"b/obj"}
	err := l.Reserve(ctx, inv("b"), "m", b)
	if !errors.Is(err, ledger.ErrCapacity) {
		t.Fatalf("reserve past capacity: %v", err)
	}
	// b does not upload: it was refused before. a carries on.
	upload(t, s, a[5:])
	if err := l.Accept(ctx, inv("a"), "m", a[:5]); err != nil {
		t.Fatal(err)
	}
	if err := l.Abandon(ctx, inv("a"), "m", a[5:]); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.AdmissionFailures != 1 || st.HighWater != 10 {
		t.Fatalf("stats %+v", st)
	}
	if err := l.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	got := present(t, s, "")
	if want := map[string]bool{a[0]: true, a[1]: true, a[2]: true, a[3]: true, a[4]: true}; !mapsEqual(got, want) {
		t.Fatalf("bucket holds %v", got)
	}
	if err := l.Reserve(ctx, inv("b"), "m", b); err != nil {
		t.Fatalf("reserve after room was made: %v", err)
	}
	if err := l.Accept(ctx, inv("b"), "m", b); err != nil {
		t.Fatal(err)
	}
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// Transfers move only the acknowledged contiguous prefix.
func TestTransferGap(t *testing.T) {
	ctx := context.Background()
	for _, path := range []string{"", "disk"} {
		t.Run("journal="+path, func(t *testing.T) {
			cfg := ledger.Config{}
			if path != "" {
				cfg.Path = t.TempDir() + "/l.db"
			}
			l := openLedger(t, cfg, false)
			from, to := inv("producer"), txn("coordinator")
			ks := keys("x", 6)
			if err := l.Reserve(ctx, from, "s", ks); err != nil {
				t.Fatal(err)
			}
			items := func(seqs ...uint64) []ledger.TransferItem {
				var out []ledger.TransferItem
				for _, q := range seqs {
					out = append(out, ledger.TransferItem{Seq: q, Store: "s", Key: ks[q-1]})
				}
				return out
			}
			// Offers 1, 2, 4, 5: 3 is missing.
			if err := l.Transfer(ctx, from, to, items(1, 2, 4, 5)); err != nil {
				t.Fatal(err)
			}
			acked, err := l.Acknowledge(ctx, from, to, 5)
			if err != nil || acked != 2 {
				t.Fatalf("ack 5 with a gap at 3: acked %d, %v", acked, err)
			}
			fs, _ := l.Status(ctx, from)
			ts, _ := l.Status(ctx, to)
			if fs.Held != 4 || fs.Offered != 2 || ts.Held != 2 {
				t.Fatalf("after gap: from %+v to %+v", fs, ts)
			}
			// Reusing an acknowledged number, or a pending one for another name, is refused.
			if err := l.Transfer(ctx, from, to, []ledger.TransferItem{{Seq: 2, Store: "s", Key: ks[2]}}); !errors.Is(err, ledger.ErrSeqConflict) {
				t.Fatalf("reused seq: %v", err)
			}
			if err := l.Transfer(ctx, from, to, []ledger.TransferItem{{Seq: 4, Store: "s", Key: ks[2]}}); !errors.Is(err, ledger.ErrSeqConflict) {
				t.Fatalf("taken seq: %v", err)
			}
			// The receiver's names are no longer the sender's.
			if err := l.Accept(ctx, from, "s", ks[:1]); !errors.Is(err, ledger.ErrNotOwned) {
				t.Fatalf("sender accepted a moved name: %v", err)
			}
			if path != "" {
				l = reopen(t, l, cfg)
			}
			// Fill the gap; a stale acknowledgement changes nothing, a new one moves 3..5.
			if err := l.Transfer(ctx, from, to, items(3)); err != nil {
				t.Fatal(err)
			}
			if acked, _ := l.Acknowledge(ctx, from, to, 1); acked != 2 {
				t.Fatalf("stale ack moved to %d", acked)
			}
			if acked, err := l.Acknowledge(ctx, from, to, 5); err != nil || acked != 5 {
				t.Fatalf("ack 5: %d %v", acked, err)
			}
			tk, _ := l.Tickets(ctx, to)
			var got []string
			for _, x := range tk {
				got = append(got, x.Key)
			}
			if !slices.Equal(got, ks[:5]) {
				t.Fatalf("receiver holds %v", got)
			}
			if err := l.Accept(ctx, to, "", nil); err != nil {
				t.Fatal(err)
			}
			if err := l.Accept(ctx, from, "", nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// reopen closes l and opens the same journal again; the new ledger replaces l for the
// end-of-test checks.
func reopen(t *testing.T, l *ledger.Ledger, cfg ledger.Config) *ledger.Ledger {
	t.Helper()
	retired.Store(l, true)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return openLedger(t, cfg, false)
}
