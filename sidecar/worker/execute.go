package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/enginesdk"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storecfg"
)

func rejected(code int, msg string, latest int64) *workerproto.Result {
	return &workerproto.Result{Phase: rpc.PhasePreInvocationRejected, Code: code, Message: msg, ObservedLatest: latest}
}

// Mutate runs the prechecks on the pinned snapshot and then exactly one engine call.
func (builtin) Mutate(ctx context.Context, c *enginesdk.Conn, req *workerproto.MutateRequest) *workerproto.Result {
	if rpc.IsSegmentOp(req.Op) {
		// The built-in format keeps one segment per index with no fragment bitmap to publish
		// several under one name: segment builds are Lance's (docs/ENGINE.md §4.4).
		return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeNotSupported,
			Message: "the built-in engine does not build indexes in segments (" + req.Op + "): use an engine that does, e.g. lance"}
	}
	cfg, err := storecfg.FromSpec(req.Dataset.Store, req.Credentials)
	if err != nil {
		return rejected(rpc.ReasonInvalidRequest, err.Error(), 0)
	}
	store, err := storage.OpenStore(ctx, cfg)
	if err != nil {
		return rejected(rpc.ReasonDatasetUnavailable, "open store: "+err.Error(), 0)
	}
	store = faultStore(c, store, req.Fault)
	latest, err := dataset.LatestVersion(ctx, store, req.Dataset.Path)
	if err != nil {
		return rejected(rpc.ReasonDatasetUnavailable, "read versions: "+err.Error(), 0)
	}
	ds, err := dataset.Open(ctx, store, req.Dataset.Path, req.PinnedVersion)
	if err != nil {
		if errors.Is(err, dataset.ErrVersionNotFound) && latest > req.PinnedVersion {
			return rejected(rpc.ReasonStaleAdmission, errStale.Error()+": "+err.Error(), latest)
		}
		return rejected(rpc.ReasonDatasetUnavailable, "open pinned version: "+err.Error(), latest)
	}
	if len(req.Schema) > 0 {
		contract := make(map[string]dataset.FieldType, len(req.Schema))
		for _, f := range req.Schema {
			t, err := fieldType(f.Type)
			if err != nil {
				return rejected(rpc.ReasonInvalidRequest, err.Error(), latest)
			}
			contract[f.Name] = t
		}
		if err := ds.CheckSchema(contract); err != nil {
			return rejected(rpc.ReasonSchemaMismatch, err.Error(), latest)
		}
	}
	if req.Op == rpc.OpOptimize {
		// Its segments cover the fragments of the version they were built on and there is no
		// delta segment to add: the engine call that would run is a rebuild, which REPLACE is.
		return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeNotSupported, ObservedLatest: latest,
			Message: "the built-in engine does not optimize indexes: REPLACE the index to rebuild it over every fragment, or run OPTIMIZE on engine lance"}
	}
	spec, err := mutateSpec(req)
	if err != nil {
		return rejected(rpc.ReasonInvalidRequest, err.Error(), latest)
	}
	plan, err := ds.Precheck(spec)
	switch {
	case errors.Is(err, dataset.ErrAmbiguousName):
		return rejected(rpc.ReasonAmbiguousName, err.Error(), latest)
	case err == nil && plan.NoOp:
		reason := rpc.CompletionIfNotExistsNoop
		if spec.Op == dataset.MutateDrop {
			reason = rpc.CompletionIfExistsNoop
		}
		res := &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, ObservedLatest: latest, CompletionReason: reason}
		if plan.Existing != nil {
			res.IndexUUID = plan.Existing.UUID
		}
		return res
	}
	// A spare the sidecar started while idle was born on one CPU (its prestart): the engine's
	// work gets all of them. A worker left on one still answers correctly, only slower.
	if cpus, err := isolation.WidenCPUs(); err != nil {
		fmt.Fprintln(os.Stderr, "steward worker:", err)
	} else if cpus != nil {
		fmt.Fprintf(os.Stderr, "steward worker: engine call on cpus %v (GOMAXPROCS %d)\n", cpus, runtime.GOMAXPROCS(0))
	}
	// Exactly one call into the engine; its native code passes through verbatim. Any other
	// precheck failure (exists, not found, bad column) is the engine's to report.
	mres, err := ds.Mutate(ctx, spec, dataset.MutateOptions{
		InvocationID: req.InvocationID,
		BeforeUpload: func(ctx context.Context, key string) error { return c.Reserve(ctx, []string{key}, nil) },
		Progress:     func(done, total int64) { c.Progress("load_data", done, total) },
		Stage:        c.Progress,
	})
	res := &workerproto.Result{
		Phase: rpc.PhaseNativeReturn, Code: wireNative(dataset.NativeCode(err)), ObservedLatest: latest,
		IndexUUID: mres.IndexUUID, Created: mres.Created,
	}
	var conflict *dataset.CommitConflictError
	switch {
	case err == nil:
		res.CommittedVersion, res.ObservedLatest = mres.Version, max(latest, mres.Version)
		res.CompletionReason = rpc.CompletionCommitted
	case errors.As(err, &conflict):
		res.ObservedLatest = max(latest, conflict.Latest)
		res.Message = err.Error()
	default:
		res.Message = err.Error()
	}
	return res
}
