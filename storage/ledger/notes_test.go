package ledger_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/cba1309c/steward/storage/ledger"
)

// TestOwnerNotes: a note is durable with the owner's first ticket, handed to Recover after a
// restart, kept while any ticket is, and gone with the last one — also across a restart.
func TestOwnerNotes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	cfg := ledger.Config{Path: path}
	inv := ledger.Owner{Kind: ledger.Invocation, ID: "inv-1"}
	bare := ledger.Owner{Kind: ledger.Invocation, ID: "inv-2"}
	note := []byte(`{"path":"ds","pinned":3}`)

	l, err := ledger.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReserveNoted(ctx, inv, note, "file:///s", []string{"ds/data/a"}); err != nil {
		t.Fatal(err)
	}
	// A later reservation with another note keeps the first.
	if err := l.ReserveNoted(ctx, inv, []byte("other"), "file:///s", []string{"ds/data/b"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Reserve(ctx, bare, "file:///s", []string{"ds/data/c"}); err != nil {
		t.Fatal(err)
	}
	if got, ok := l.Note(inv); !ok || !bytes.Equal(got, note) {
		t.Fatalf("note %q %v", got, ok)
	}
	if _, ok := l.Note(bare); ok {
		t.Fatal("an owner reserved without a note has one")
	}
	if err := l.ReserveNoted(ctx, ledger.Owner{Kind: ledger.Invocation, ID: "big"}, bytes.Repeat([]byte("x"), ledger.MaxNoteLen+1),
		"file:///s", []string{"ds/data/z"}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("oversized note: %v", err)
	}
	l.Close() // as a crash would leave it: tickets and note on disk

	l = openLedger(t, cfg, true)
	seen := map[string][]byte{}
	rep, err := l.Recover(ctx, func(_ context.Context, o ledger.Owner, n []byte) (ledger.Verdict, error) {
		seen[o.ID] = n
		return ledger.Unknown, nil
	})
	if err != nil || rep.Unknown != 2 {
		t.Fatalf("recover %+v %v", rep, err)
	}
	if !bytes.Equal(seen["inv-1"], note) || seen["inv-2"] != nil {
		t.Fatalf("recover saw notes %q", seen)
	}
	// Releasing one of two tickets keeps the note; the last one takes it along.
	if err := l.Accept(ctx, inv, "file:///s", []string{"ds/data/a"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Note(inv); !ok {
		t.Fatal("note gone while a ticket is held")
	}
	if err := l.Accept(ctx, inv, "", nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Accept(ctx, bare, "", nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Note(inv); ok {
		t.Fatal("note outlived the owner's last ticket")
	}
	time.Sleep(100 * time.Millisecond) // the unwaited release commits within its linger
	l.Close()

	l = openLedger(t, cfg, false)
	if _, ok := l.Note(inv); ok {
		t.Fatal("note back after a restart without tickets")
	}
	if err := l.Reserve(ctx, inv, "file:///s", []string{"ds/data/d"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Note(inv); ok {
		t.Fatal("an old note came back for a new reservation")
	}
	if err := l.Accept(ctx, inv, "", nil); err != nil {
		t.Fatal(err)
	}
}
