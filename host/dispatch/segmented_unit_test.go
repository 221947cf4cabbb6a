package dispatch

import (
	"testing"

	"github.com/cba1309c/steward/rpc"
)

// TestClassifyStep: what each journaled step outcome means for its segmented job (docs/PROTOCOL.md
// §9 rule 11): done, build again as a new step, fail the job, or wait.
func TestClassifyStep(t *testing.T) {
	written := &Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, CompletionReason: rpc.CompletionSegmentWritten,
		IndexUUID: "0b5e6d3a-3c1b-4a55-9f3e-2f1f1f1f1f1f"}
	resolved := &Resolution{Outcome: rpc.OutcomeNotCommitted, Fenced: true}
	for _, tc := range []struct {
		name  string
		op    string
		state State
		res   *Result
		rsl   *Resolution
		rel   bool
		want  stepState
	}{
		{"pending", rpc.OpSegment, StatePending, nil, nil, false, stepBusy},
		{"running", rpc.OpSegment, StateRunning, nil, nil, false, stepBusy},
		{"unknown, to resolve", rpc.OpSegment, StateUnknown, &Result{Phase: rpc.PhaseIndeterminate}, nil, false, stepBusy},
		{"segment written", rpc.OpSegment, StateCommitted, written, nil, false, stepDone},
		{"trained", rpc.OpTrain, StateCommitted, &Result{Phase: rpc.PhaseNativeReturn, CompletionReason: rpc.CompletionTrained, IndexUUID: written.IndexUUID}, nil, false, stepDone},
		{"segment settled COMMITTED by resolve: no uuid", rpc.OpSegment, StateCommitted, &Result{Phase: rpc.PhaseIndeterminate}, &Resolution{Outcome: rpc.OutcomeCommitted}, false, stepRetry},
		{"commit committed by resolve", rpc.OpCommitSegments, StateCommitted, &Result{Phase: rpc.PhaseIndeterminate}, &Resolution{Outcome: rpc.OutcomeCommitted}, false, stepDone},
		{"unsent", rpc.OpSegment, StateNotCommitted, nil, nil, false, stepRetry},
		{"indeterminate, resolved", rpc.OpSegment, StateNotCommitted, &Result{Phase: rpc.PhaseIndeterminate}, resolved, false, stepRetry},
		{"connection lost, resolved", rpc.OpSegment, StateNotCommitted, &Result{ErrorClass: ErrorConnectionLost}, resolved, false, stepRetry},
		{"oom killed", rpc.OpSegment, StateNotCommitted, &Result{Phase: rpc.PhaseIndeterminate, OOMKilled: true}, resolved, false, stepRetry},
		{"overloaded at receive", rpc.OpSegment, StateNotCommitted, &Result{ErrorClass: ErrorRefused, ErrorCode: int64(rpc.CodeOverloaded)}, nil, false, stepRetry},
		{"invalid params", rpc.OpSegment, StateNotCommitted, &Result{ErrorClass: ErrorRefused, ErrorCode: int64(rpc.CodeInvalidParams)}, nil, false, stepFailed},
		{"commit overloaded", rpc.OpCommitSegments, StateNotCommitted, &Result{ErrorClass: ErrorRefused, ErrorCode: int64(rpc.CodeOverloaded)}, nil, false, stepFailed},
		{"pre-invocation rejected", rpc.OpSegment, StateNotCommitted, &Result{Phase: rpc.PhasePreInvocationRejected, Code: -9}, nil, false, stepFailed},
		{"native failure, resolved", rpc.OpSegment, StateNotCommitted, &Result{Phase: rpc.PhaseNativeReturn, Code: 1}, resolved, false, stepFailed},
		{"unknown, released", rpc.OpSegment, StateUnknown, &Result{Phase: rpc.PhaseIndeterminate}, nil, true, stepFailed},
	} {
		s := Job{ID: "x", Op: tc.op, State: tc.state, Result: tc.res, Resolution: tc.rsl, Released: tc.rel}
		if got := classifyStep(s); got != tc.want {
			t.Errorf("%s: classifyStep = %d, want %d", tc.name, got, tc.want)
		}
	}
}
