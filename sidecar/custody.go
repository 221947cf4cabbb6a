package sidecar

import (
	"context"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

// storeName is the ledger's name for a store: URL plus endpoint, never credentials.
func storeName(spec rpc.StoreSpec) string {
	if spec.Endpoint == "" {
		return spec.URL
	}
	return spec.URL + "@" + spec.Endpoint
}

// reserve takes custody of keys for the job's invocation before the worker uploads them. Without
// a ledger configured every reservation is granted.
func (s *Server) reserve(j *job, keys []string) error {
	if s.custody == nil {
		return nil
	}
	return s.custody.reserve(context.Background(), j.p.InvocationID, storeName(j.p.Dataset.Store), keys)
}

// recordCreated notes the objects a worker reports it wrote; the ledger already owns them.
func (s *Server) recordCreated(j *job, r *workerproto.Result) {
	s.log.Debug("worker result", "invocation", j.p.InvocationID, "phase", r.Phase, "code", r.Code, "created", len(r.Created))
}

// custodian is what the executor needs of the ownership ledger.
type custodian interface {
	reserve(ctx context.Context, invocation, store string, keys []string) error
	settle(ctx context.Context, invocation, outcome string)
}
