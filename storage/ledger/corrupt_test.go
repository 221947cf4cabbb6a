package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cba1309c/steward/internal/boltfile/boltfiletest"
	"github.com/cba1309c/steward/storage/ledger"
)

// A damaged journal is refused with a *CorruptError naming it, never with a panic and never by
// starting empty (a journal truncated to 0 bytes used to become a new, empty one: custody lost).
// The file is left as it was, for the operator's quarantine.
func TestCorruptJournalRefused(t *testing.T) {
	for _, d := range boltfiletest.Damages() {
		t.Run(d.Name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			l := openLedger(t, ledger.Config{Path: path}, true)
			for i := range 20 {
				if err := l.Reserve(context.Background(), inv("w"), "m", keys(string(rune('a'+i)), 200)); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			d.Apply(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			l2, err := ledger.Open(context.Background(), ledger.Config{Path: path})
			if err == nil {
				st := l2.Stats()
				l2.Close()
				t.Fatalf("opened a damaged journal: %+v", st)
			}
			var ce *ledger.CorruptError
			if !errors.As(err, &ce) || ce.Path != path || !errors.Is(err, ledger.ErrCorrupt) {
				t.Fatalf("want a *ledger.CorruptError naming %s, got %v", path, err)
			}
			t.Log(err)
			if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
				t.Fatal("refusing the journal changed it")
			}
		})
	}
}
