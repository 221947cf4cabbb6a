package sidecar

import (
	"context"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

// storeName is the ledger's name for a store, and the canonical spec it stands for: rpc's one
// canonical name, so every spelling of a store keys the same tickets (and a sweep sees them all).
// It never holds a credential. Specs reach here validated; a failure wraps rpc.ErrInvalidStore.
func storeName(spec rpc.StoreSpec) (string, rpc.StoreSpec, error) {
	p, err := spec.Parse()
	if err != nil {
		return "", rpc.StoreSpec{}, err
	}
	return p.Name(), p.Spec(), nil
}

// reserve takes custody of keys for the job's invocation before the worker uploads them. Without
// a ledger configured every reservation is granted.
func (s *Server) reserve(j *job, keys []string) error {
	if s.custody == nil {
		return nil
	}
	return s.custody.reserve(context.Background(), j, keys)
}

// settleCustody settles the job's tickets from its answer, before the answer is sent.
func (s *Server) settleCustody(j *job, res rpc.MutateResult) {
	if s.custody != nil {
		s.custody.finish(j, res)
	}
}

// recordCreated notes the objects a worker reports it wrote; the ledger already owns them.
func (s *Server) recordCreated(j *job, r *workerproto.Result) {
	s.log.Debug("worker result", "invocation", j.p.InvocationID, "phase", r.Phase, "code", r.Code, "created", len(r.Created))
}

// custodian is what the executor needs of the ownership ledger.
type custodian interface {
	// reserve takes custody of keys of the job's store for its invocation.
	reserve(ctx context.Context, j *job, keys []string) error
	// finish settles a finished job's names from its answer (INDETERMINATE keeps them).
	finish(j *job, res rpc.MutateResult)
	// settle applies an index.resolve outcome (rpc.OutcomeCommitted or rpc.OutcomeNotCommitted).
	settle(ctx context.Context, invocation, outcome string)
}
