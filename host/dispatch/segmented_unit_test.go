package dispatch

import (
	"testing"
	"time"

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
		{"commit unsent", rpc.OpCommitSegments, StateNotCommitted, nil, nil, false, stepRetry},
		{"segment sent, its sender died, resolved", rpc.OpSegment, StateNotCommitted, nil, resolved, false, stepRetry},
		{"commit sent, its sender died, resolved: its segments went with it", rpc.OpCommitSegments, StateNotCommitted, nil, resolved, false, stepFailed},
		{"indeterminate, resolved", rpc.OpSegment, StateNotCommitted, &Result{Phase: rpc.PhaseIndeterminate}, resolved, false, stepRetry},
		{"connection lost, resolved", rpc.OpSegment, StateNotCommitted, &Result{ErrorClass: ErrorConnectionLost}, resolved, false, stepRetry},
		{"oom killed", rpc.OpSegment, StateNotCommitted, &Result{Phase: rpc.PhaseIndeterminate, OOMKilled: true}, resolved, false, stepRetry},
		{"train oom killed: the same limit kills it again", rpc.OpTrain, StateNotCommitted, &Result{Phase: rpc.PhaseIndeterminate, OOMKilled: true}, resolved, false, stepFailed},
		{"commit oom killed", rpc.OpCommitSegments, StateNotCommitted, &Result{Phase: rpc.PhaseIndeterminate, OOMKilled: true}, resolved, false, stepFailed},
		{"overloaded at receive", rpc.OpSegment, StateNotCommitted, &Result{ErrorClass: ErrorRefused, ErrorCode: int64(rpc.CodeOverloaded)}, nil, false, stepRetry},
		{"invalid params", rpc.OpSegment, StateNotCommitted, &Result{ErrorClass: ErrorRefused, ErrorCode: int64(rpc.CodeInvalidParams)}, nil, false, stepFailed},
		{"commit overloaded: its segments never taken", rpc.OpCommitSegments, StateNotCommitted, &Result{ErrorClass: ErrorRefused, ErrorCode: int64(rpc.CodeOverloaded)}, nil, false, stepRetry},
		{"train storage unavailable at receive", rpc.OpTrain, StateNotCommitted, &Result{ErrorClass: ErrorRefused, ErrorCode: int64(rpc.CodeStorageUnavailable)}, nil, false, stepRetry},
		{"commit dataset unavailable at launch: segments given back", rpc.OpCommitSegments, StateNotCommitted, &Result{Phase: rpc.PhasePreInvocationRejected, Code: rpc.ReasonDatasetUnavailable}, nil, false, stepRetry},
		{"commit indeterminate, resolved: its segments went with it", rpc.OpCommitSegments, StateNotCommitted, &Result{Phase: rpc.PhaseIndeterminate}, resolved, false, stepFailed},
		{"commit conflict", rpc.OpCommitSegments, StateNotCommitted, &Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeCommitConflict}, nil, false, stepFailed},
		{"train indeterminate, resolved", rpc.OpTrain, StateNotCommitted, &Result{Phase: rpc.PhaseIndeterminate}, resolved, false, stepRetry},
		{"pre-invocation rejected", rpc.OpSegment, StateNotCommitted, &Result{Phase: rpc.PhasePreInvocationRejected, Code: -9}, nil, false, stepFailed},
		{"stale admission", rpc.OpCommitSegments, StateNotCommitted, &Result{Phase: rpc.PhasePreInvocationRejected, Code: rpc.ReasonStaleAdmission}, nil, false, stepFailed},
		{"native failure, resolved", rpc.OpSegment, StateNotCommitted, &Result{Phase: rpc.PhaseNativeReturn, Code: 1}, resolved, false, stepFailed},
		{"segment: the store failed under it", rpc.OpSegment, StateNotCommitted, &Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeIO}, nil, false, stepRetry},
		{"train: the store failed under it", rpc.OpTrain, StateNotCommitted, &Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeIO}, nil, false, stepRetry},
		{"commit: the store failed under it, its segments with it", rpc.OpCommitSegments, StateNotCommitted, &Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeIO}, nil, false, stepFailed},
		{"unknown, released", rpc.OpSegment, StateUnknown, &Result{Phase: rpc.PhaseIndeterminate}, nil, true, stepFailed},
	} {
		s := Job{ID: "x", Op: tc.op, State: tc.state, Result: tc.res, Resolution: tc.rsl, Released: tc.rel}
		if got := classifyStep(s); got != tc.want {
			t.Errorf("%s: classifyStep = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestStepIDAttempts: a TRAIN's or COMMIT_SEGMENTS's first step keeps the id of plans journaled
// before their attempts were counted; countAttempt counts each next one once, from either.
func TestStepIDAttempts(t *testing.T) {
	if a, b := StepID("j", stepTrain, 0, 1), StepID("j", stepTrain, 0, 0); a != "j.train" || b != a {
		t.Errorf("first TRAIN %q, %q", a, b)
	}
	if got := StepID("j", stepCommit, 0, 3); got != "j.commit.a3" {
		t.Errorf("third commit %q", got)
	}
	for _, tc := range []struct {
		name          string
		counted, next int
		want          int
		err           error
	}{
		{"first", 0, 1, 1, nil},
		{"second after a counted first", 1, 2, 2, nil},
		{"second after an uncounted first", 0, 2, 2, nil},
		{"created by another node", 2, 2, 2, errNoChange},
	} {
		sp := &SegmentedPlan{CommitAttempts: tc.counted}
		err := countAttempt(sp, "j", Job{ID: StepID("j", stepCommit, 0, tc.next), Op: rpc.OpCommitSegments})
		if err != tc.err || sp.CommitAttempts != tc.want {
			t.Errorf("%s: counted %d, error %v; want %d, %v", tc.name, sp.CommitAttempts, err, tc.want, tc.err)
		}
	}
}

// TestRetryAt: a step refused for now waits RetryBackoff, doubled per attempt, before its next
// attempt; any other step to build again is rebuilt at once.
func TestRetryAt(t *testing.T) {
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	refused := Job{Updated: at, Result: &Result{ErrorClass: ErrorRefused, ErrorCode: int64(rpc.CodeStorageUnavailable)}}
	rejected := Job{Updated: at, Result: &Result{Phase: rpc.PhasePreInvocationRejected, Code: rpc.ReasonDatasetUnavailable}}
	lost := Job{Updated: at, Result: &Result{Phase: rpc.PhaseIndeterminate}}
	for _, tc := range []struct {
		name string
		s    Job
		a    int
		want time.Time
	}{
		{"refused, first attempt", refused, 1, at.Add(RetryBackoff)},
		{"rejected, second attempt", rejected, 2, at.Add(2 * RetryBackoff)},
		{"indeterminate", lost, 1, time.Time{}},
		{"the store failed under it, second attempt", Job{Updated: at, Result: &Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeIO}}, 2, at.Add(2 * RetryBackoff)},
		{"the engine failed otherwise", Job{Updated: at, Result: &Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeIndex}}, 1, time.Time{}},
		{"unsent", Job{Updated: at}, 1, time.Time{}},
	} {
		if got := retryAt(tc.s, tc.a); !got.Equal(tc.want) {
			t.Errorf("%s: retry at %s, want %s", tc.name, got, tc.want)
		}
	}
}
