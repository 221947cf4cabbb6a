package sidecar

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/ledger"
)

// TestWireErrEdge: the sidecar's one error edge. A context error is "shutting down" (-32004) only
// while the sidecar stops; a call that ran out of its own bound is -32603 (an objects.sweep
// timeout used to answer -32004 from a running sidecar).
func TestWireErrEdge(t *testing.T) {
	s := &Server{stop: make(chan struct{})}
	for _, tc := range []struct {
		err  error
		want rpc.Code
	}{
		{fmt.Errorf("sweep: %w", context.DeadlineExceeded), rpc.CodeInternal},
		{context.Canceled, rpc.CodeInternal},
		{fmt.Errorf("reserve: %w", ledger.ErrCapacity), rpc.CodeLedgerFull},
		{ledger.ErrNameOwned, rpc.CodeNameOwned},
		{ledger.ErrNotOwned, rpc.CodeUnknownOwner},
		{ledger.ErrInvalid, rpc.CodeInvalidParams},
		{fmt.Errorf("store: %w", rpc.ErrInvalidStore), rpc.CodeInvalidParams},
		{ledger.ErrClosed, rpc.CodeShuttingDown},
		{fmt.Errorf("list: %w", storage.ErrUnavailable), rpc.CodeStorageUnavailable},
		{fmt.Errorf("%w: no such index", rpc.ErrNotFound), rpc.CodeNotFound},
		// A class set by the handler wins over what it wraps.
		{fmt.Errorf("%w: %w", rpc.ErrInvalidParams, context.DeadlineExceeded), rpc.CodeInvalidParams},
		{errors.New("something else"), rpc.CodeInternal},
	} {
		if got := rpc.Code(rpc.ToWire(s.wireErr(tc.err)).Code); got != tc.want {
			t.Errorf("running: %v → %d, want %d", tc.err, got, tc.want)
		}
	}
	if s.wireErr(nil) != nil {
		t.Fatal("nil error classified")
	}
	close(s.stop)
	if got := rpc.Code(rpc.ToWire(s.wireErr(context.DeadlineExceeded)).Code); got != rpc.CodeShuttingDown {
		t.Fatalf("stopping: a context error → %d, want -32004", got)
	}
	// rpc.ToWire itself no longer guesses: an unclassified context error is internal.
	if got := rpc.Code(rpc.ToWire(context.DeadlineExceeded).Code); got != rpc.CodeInternal {
		t.Fatalf("rpc.ToWire(context error) = %d, want -32603", got)
	}
}
