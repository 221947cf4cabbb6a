package dataset

import (
	"context"
	"errors"
	"fmt"

	"github.com/cba1309c/steward/storage"
)

// SlotOutcome is the settled fate of an invocation's commit slot.
type SlotOutcome struct {
	// Committed is true only when the slot holds a manifest committed by the invocation.
	Committed bool
	// FenceWritten is true when this call wrote the fence (the invocation can never commit).
	FenceWritten bool
	// Version is the slot, pinned+1.
	Version int64
	// Op and Holder describe the manifest in the slot: its transaction op and invocation id
	// (for a fence, the fenced invocation).
	Op     string
	Holder string
}

func (o SlotOutcome) String() string {
	if o.Committed {
		return fmt.Sprintf("COMMITTED at version %d", o.Version)
	}
	return fmt.Sprintf("NOT_COMMITTED (slot %d holds %s by %q, fence written here: %t)", o.Version, o.Op, o.Holder, o.FenceWritten)
}

// ResolveSlot settles whether invocationID committed at pinned+1 (index.resolve in
// docs/PROTOCOL.md). It puts a fence manifest (version pinned's content, transaction FENCE
// naming invocationID) into the slot with put-if-absent:
//   - fence written: the invocation can never commit there: NOT_COMMITTED;
//   - slot already holds a manifest whose transaction.invocation_id is invocationID: COMMITTED;
//   - slot holds anything else (another commit, any fence): NOT_COMMITTED.
//
// If the store cannot be reached the error wraps storage.ErrUnavailable and nothing is known.
func ResolveSlot(ctx context.Context, store storage.Store, datasetPrefix string, pinned int64, invocationID string) (SlotOutcome, error) {
	if pinned < 1 || invocationID == "" {
		return SlotOutcome{}, invalidf("resolve needs a pinned version >= 1 and an invocation id")
	}
	d := newDataset(store, datasetPrefix)
	slot := pinned + 1
	// Look first: resolving an already-settled slot must not need version pinned to exist.
	if out, ok, err := d.inspectSlot(ctx, slot, invocationID); err != nil || ok {
		return out, err
	}
	base, err := d.readManifest(ctx, pinned)
	if err != nil {
		return SlotOutcome{}, fmt.Errorf("dataset: resolve %q@%d: %w", datasetPrefix, pinned, err)
	}
	fence := base.clone()
	fence.Version = slot
	fence.FormatVersion = FormatVersion
	fence.CreatedAt = nowUTC()
	fence.Transaction = Transaction{Op: OpFence, ReadVersion: pinned, FencedInvocation: invocationID}
	err = putManifest(ctx, d.store, fence)
	switch {
	case err == nil:
		return SlotOutcome{FenceWritten: true, Version: slot, Op: OpFence, Holder: invocationID}, nil
	case errors.Is(err, storage.ErrExists):
		out, _, err := d.inspectSlot(ctx, slot, invocationID)
		return out, err
	}
	return SlotOutcome{}, fmt.Errorf("dataset: resolve %q@%d: %w", datasetPrefix, pinned, err)
}

// inspectSlot reads the manifest at slot; ok is false when the slot is empty.
func (d *Dataset) inspectSlot(ctx context.Context, slot int64, invocationID string) (SlotOutcome, bool, error) {
	m, err := d.readManifest(ctx, slot)
	if errors.Is(err, ErrVersionNotFound) {
		return SlotOutcome{}, false, nil
	}
	if err != nil {
		return SlotOutcome{}, false, fmt.Errorf("dataset: resolve slot %d of %q: %w", slot, d.prefix, err)
	}
	out := SlotOutcome{Version: slot, Op: m.Transaction.Op, Holder: m.Transaction.InvocationID}
	if m.IsFence() {
		out.Holder = m.Transaction.FencedInvocation
	} else {
		out.Committed = m.Transaction.InvocationID == invocationID
	}
	return out, true, nil
}
