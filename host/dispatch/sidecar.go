package dispatch

import (
	"context"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/rpc"
)

// Sidecar is what the dispatcher needs of a running sidecar. *host.Client satisfies it; tests use
// a fake only for faults a real sidecar cannot produce (an identity mismatch).
type Sidecar interface {
	// Epoch is the sidecar's epoch (random per process start).
	Epoch() string
	// Exited is closed once the sidecar process has exited: its workers are dead.
	Exited() <-chan struct{}
	// Mutate sends index.mutate once and waits for the answer.
	Mutate(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error)
	// Resolve settles an invocation with index.resolve.
	Resolve(ctx context.Context, p rpc.ResolveParams) (rpc.ResolveResult, error)
}

var _ Sidecar = (*host.Client)(nil)

func exited(s Sidecar) bool {
	select {
	case <-s.Exited():
		return true
	default:
		return false
	}
}
