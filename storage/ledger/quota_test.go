package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cba1309c/steward/storage/ledger"
)

// TestReserveWithinQuota: an owner reserving under a quota gets at most quota tickets held at
// once, all or nothing per call; names it already holds do not count again; other owners keep the
// rest of the capacity; the refusal is counted; a released ticket frees the quota; the journal
// holds exactly what was granted.
func TestReserveWithinQuota(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := openLedger(t, ledger.Config{Path: path, Capacity: 10}, true)
	greedy, other := inv("greedy"), inv("other")
	names := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("ds/data/%s-%d", prefix, i))
		}
		return out
	}
	if err := l.ReserveWithin(ctx, greedy, 4, nil, "file:///s", names("a", 3)); err != nil {
		t.Fatal(err)
	}
	// Re-reserving held names plus one new one fits exactly.
	if err := l.ReserveWithin(ctx, greedy, 4, nil, "file:///s", append(names("a", 3), "ds/data/b")); err != nil {
		t.Fatalf("idempotent names counted again: %v", err)
	}
	err := l.ReserveWithin(ctx, greedy, 4, nil, "file:///s", []string{"ds/data/c", "ds/data/d"})
	if !errors.Is(err, ledger.ErrQuota) {
		t.Fatalf("past the quota: %v; want ErrQuota", err)
	}
	if st, _ := l.Status(ctx, greedy); st.Held != 4 {
		t.Fatalf("greedy holds %d after a refused call, want 4 (all or nothing)", st.Held)
	}
	// The other owners get the rest of the capacity.
	if err := l.ReserveWithin(ctx, other, 4, nil, "file:///s", names("o", 4)); err != nil {
		t.Fatalf("another owner starved: %v", err)
	}
	if st := l.Stats(); st.QuotaRefusals != 1 || st.Used != 8 {
		t.Fatalf("stats %+v: want 1 quota refusal, 8 tickets", st)
	}
	// Capacity still applies: 2 left, 3 asked by a third owner under a big quota.
	if err := l.ReserveWithin(ctx, inv("third"), 100, nil, "file:///s", names("t", 3)); !errors.Is(err, ledger.ErrCapacity) {
		t.Fatalf("past capacity: %v; want ErrCapacity", err)
	}
	if err := l.Accept(ctx, greedy, "file:///s", []string{"ds/data/b"}); err != nil {
		t.Fatal(err)
	}
	if err := l.ReserveWithin(ctx, greedy, 4, nil, "file:///s", []string{"ds/data/c"}); err != nil {
		t.Fatalf("a released ticket does not free the quota: %v", err)
	}
	l.Close()
	retired.Store(l, true)
	l2 := openLedger(t, ledger.Config{Path: path, Capacity: 10}, true)
	if st, _ := l2.Status(ctx, greedy); st.Held != 4 {
		t.Fatalf("after a restart greedy holds %d, want 4", st.Held)
	}
}
