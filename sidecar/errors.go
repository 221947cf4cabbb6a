package sidecar

import (
	"context"
	"errors"
	"fmt"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/ledger"
)

// handle registers fn for method with every error it returns passed through wireErr: the one
// place where the sidecar's domain errors (ledger, storage, context) meet the wire classes.
func handle[P any, R any](s *Server, method string, fn func(context.Context, P) (R, error)) {
	rpc.Register(s.router, method, func(ctx context.Context, p P) (R, error) {
		r, err := fn(ctx, p)
		return r, s.wireErr(err)
	})
}

// wireErr classifies err for the wire; rpc.ToWire then maps the class to its code. An error that
// already carries a wire class keeps it. A context error means "shutting down" only when the
// sidecar really is stopping; otherwise a call ran out of its own time bound, which is -32603
// like any other failure the host cannot correct. Messages are kept: they hold no credential
// (callers sanitize store errors before they get here).
func (s *Server) wireErr(err error) error {
	var class error
	switch {
	case err == nil:
		return nil
	case rpc.Classified(err):
		return err
	case errors.Is(err, ErrStoreNotAllowed):
		class = rpc.ErrStoreNotAllowed
	case errors.Is(err, ledger.ErrCapacity):
		class = rpc.ErrLedgerFull
	case errors.Is(err, ledger.ErrNameOwned):
		class = rpc.ErrNameOwned
	case errors.Is(err, ledger.ErrNotOwned):
		class = rpc.ErrUnknownOwner
	case errors.Is(err, ledger.ErrInvalid), errors.Is(err, ledger.ErrSeqConflict), errors.Is(err, rpc.ErrInvalidStore),
		errors.Is(err, ledger.ErrNotDataset):
		class = rpc.ErrInvalidParams
	case errors.Is(err, ledger.ErrClosed):
		class = rpc.ErrShuttingDown
	case errors.Is(err, storage.ErrUnavailable):
		class = rpc.ErrStorageUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		class = rpc.ErrInternal
		if isClosed(s.stop) {
			class = rpc.ErrShuttingDown
		}
	default:
		class = rpc.ErrInternal
	}
	return fmt.Errorf("%w: %w", class, err)
}
