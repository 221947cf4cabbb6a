package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/rpc"
)

// Outcome is what one index.mutate send proves.
type Outcome struct {
	// State is COMMITTED, NOT_COMMITTED or UNKNOWN.
	State State
	// WorkerGone is true when no worker can still be running for the invocation: the sidecar
	// refused it at receive, or answered (it answers only after the worker's domain is reaped).
	WorkerGone bool
}

// Classify maps the answer to one send of op to an outcome, from typed fields only:
//
//   - a JSON-RPC error (the sidecar refused the call at receive: never enqueued) → NOT_COMMITTED;
//   - PRE_INVOCATION_REJECTED → NOT_COMMITTED;
//   - NATIVE_RETURN: OK → COMMITTED, COMMIT_CONFLICT → NOT_COMMITTED, NOT_FOUND on DROP or
//     OPTIMIZE → NOT_COMMITTED, any other native code → UNKNOWN;
//   - INDETERMINATE_AFTER_LAUNCH, an unknown phase, an identity mismatch (host.ErrIdentity), or a
//     transport failure after the send (rpc.ErrConnectionLost, a context error, anything else)
//     → UNKNOWN.
func Classify(op string, res rpc.MutateResult, err error) Outcome {
	if err != nil {
		var we *rpc.Error
		if errors.As(err, &we) && !errors.Is(err, host.ErrIdentity) {
			return Outcome{State: StateNotCommitted, WorkerGone: true}
		}
		return Outcome{State: StateUnknown}
	}
	switch res.Phase {
	case rpc.PhasePreInvocationRejected:
		return Outcome{State: StateNotCommitted, WorkerGone: true}
	case rpc.PhaseIndeterminate:
		return Outcome{State: StateUnknown, WorkerGone: true}
	case rpc.PhaseNativeReturn:
		switch {
		case res.Code == rpc.NativeOK:
			return Outcome{State: StateCommitted, WorkerGone: true}
		case res.Code == rpc.NativeCommitConflict:
			return Outcome{State: StateNotCommitted, WorkerGone: true}
		case res.Code == rpc.NativeNotFound && (op == rpc.OpDrop || op == rpc.OpOptimize):
			return Outcome{State: StateNotCommitted, WorkerGone: true}
		}
		return Outcome{State: StateUnknown, WorkerGone: true}
	}
	// A phase this host does not know: trust nothing about it, not even that the worker is gone.
	return Outcome{State: StateUnknown}
}

// resultOf records an answer or an error for the journal.
func resultOf(res rpc.MutateResult, err error, at time.Time) *Result {
	r := &Result{At: at}
	if err != nil {
		r.Error, r.ErrorClass = err.Error(), errorClass(err)
		var we *rpc.Error
		if r.ErrorClass == ErrorRefused && errors.As(err, &we) {
			r.ErrorCode = int64(we.Code)
		}
		if r.ErrorClass != ErrorIdentity {
			return r
		}
	}
	r.Phase, r.Code = res.Phase, res.Code
	r.ObservedLatestVersion, r.CommittedVersion = res.ObservedLatestVersion, res.CommittedVersion
	r.CompletionReason, r.Message, r.IndexUUID = res.CompletionReason, res.Message, res.IndexUUID
	r.WallMs, r.PeakMemoryBytes, r.OOMKilled, r.Signal = res.WallMs, res.PeakMemoryBytes, res.OOMKilled, res.Signal
	r.Cancelled = res.Cancelled
	return r
}

func errorClass(err error) string {
	var we *rpc.Error
	switch {
	case errors.Is(err, host.ErrIdentity):
		return ErrorIdentity
	case errors.As(err, &we):
		return ErrorRefused
	case errors.Is(err, rpc.ErrConnectionLost):
		return ErrorConnectionLost
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return ErrorTimeout
	}
	return ErrorTransport
}

// SettleGuarantee is what sc's hello declares for engine ("" = builtin): rpc.SettleFence,
// rpc.SettleClaimFence, rpc.SettleNone, or "" when the sidecar does not list the engine. A sidecar
// that reports no hello (a test fake) is taken to run the built-in engine only, which fences.
func SettleGuarantee(sc Sidecar, engine string) string {
	if engine == "" {
		engine = "builtin"
	}
	info, ok := sc.(interface{ Info() rpc.HelloResult })
	if !ok {
		if engine == "builtin" {
			return rpc.SettleFence
		}
		return ""
	}
	for _, e := range info.Info().Engines {
		if e.Name == engine {
			return e.Settle
		}
	}
	if engine == "builtin" && len(info.Info().Engines) == 0 {
		return rpc.SettleFence // a sidecar from before engines: the built-in engine fences
	}
	return ""
}

// Resolvable reports whether index.resolve settles an UNKNOWN outcome of an engine with settle
// guarantee g: fence and claim-fence do (claim-fence: among steward's writers; a host that lets
// other writers commit to the dataset accepts their window, docs/ENGINE.md §3.1); none, and any
// guarantee this host does not know, leave UNKNOWN to a person.
func Resolvable(g string) bool { return g == rpc.SettleFence || g == rpc.SettleClaimFence }
