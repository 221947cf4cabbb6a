package custody

import (
	"context"
	"errors"
	"fmt"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/ledger"
	"github.com/cba1309c/steward/storage/slot"
)

// Decide settles invocation inv's commit of version pinned+1 of the dataset at path from
// storage alone, for every engine: the claim its gateway wrote and the manifest that claim
// names (storage/slot.Decide; live: the invocation may still be running in this sidecar). For
// the built-in engine a manifest at pinned+1 that names the invocation counts too: commits made
// before the gateway claimed, and fences written then, are read as they were.
func Decide(ctx context.Context, st storage.Store, path string, pinned int64, inv string, builtin, live bool) (slot.Verdict, error) {
	if builtin {
		if v, ok, err := legacySlot(ctx, st, path, pinned, inv); err != nil || ok {
			return v, err
		}
	}
	return slot.Decide(ctx, st, path, pinned, inv, live)
}

// legacySlot reads the built-in format's manifest at pinned+1: ok when it names inv, as its
// commit or its fence.
func legacySlot(ctx context.Context, st storage.Store, path string, pinned int64, inv string) (slot.Verdict, bool, error) {
	d, err := dataset.Open(ctx, st, path, pinned+1)
	switch {
	case errors.Is(err, dataset.ErrVersionNotFound), errors.Is(err, storage.ErrNotFound):
		return slot.Verdict{}, false, nil
	case errors.Is(err, dataset.ErrNotSupported), errors.Is(err, storage.ErrCorrupt):
		return slot.Verdict{}, false, nil // another engine's format, or not a manifest at all
	case err != nil:
		return slot.Verdict{}, false, err
	}
	m := d.Manifest()
	switch {
	case m.IsFence() && m.Transaction.FencedInvocation == inv:
		return slot.Verdict{Outcome: slot.NotCommitted, Fenced: true, Reason: fmt.Sprintf("version %d is this invocation's fence", pinned+1)}, true, nil
	case !m.IsFence() && m.Transaction.InvocationID == inv:
		return slot.Verdict{Outcome: slot.Committed, Reason: fmt.Sprintf("version %d is this invocation's commit", pinned+1)}, true, nil
	}
	return slot.Verdict{}, false, nil
}

// verdictOf maps a slot outcome to the ledger's.
func verdictOf(o slot.Outcome) ledger.Verdict {
	switch o {
	case slot.Committed:
		return ledger.Committed
	case slot.NotCommitted:
		return ledger.NotCommitted
	}
	return ledger.Unknown
}
