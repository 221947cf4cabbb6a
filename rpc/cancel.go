package rpc

import "errors"

// CancelParams are the params of index.cancel.
type CancelParams struct {
	// InvocationID is the index.mutate invocation to end.
	InvocationID string `json:"invocation_id"`
}

// Validate implements Validator.
func (p CancelParams) Validate() error {
	if !ValidID(p.InvocationID) {
		return errors.New("invocation_id must be 1-128 characters of [A-Za-z0-9._:-]")
	}
	return nil
}

// What an index.cancel found (CancelResult.State).
const (
	// CancelCancelled: a cancel (this one or an earlier one) ended the invocation: it was answered
	// -9 while queued, or its worker was killed and its answer says what storage holds.
	CancelCancelled = "CANCELLED"
	// CancelAnswered: the invocation had already ended on its own (its engine had answered, its
	// deadline or a protocol violation had begun its kill, or its answer was sent): the cancel
	// changed nothing.
	CancelAnswered = "ANSWERED"
	// CancelUnknownInvocation: this sidecar holds no record of the invocation (never admitted
	// here, or answered longer ago than it remembers).
	CancelUnknownInvocation = "UNKNOWN_INVOCATION"
)

// CancelResult is index.cancel's reply, sent only after the mutation's own answer was sent.
type CancelResult struct {
	InvocationID string `json:"invocation_id"` // echo
	State        string `json:"state"`         // CANCELLED, ANSWERED or UNKNOWN_INVOCATION
	// Outcome is whether the invocation committed its version pinned+1, as storage said when the
	// sidecar decided it (what index.resolve answers): COMMITTED, NOT_COMMITTED or UNKNOWN
	// (storage could not be read; settle with index.resolve). "" with UNKNOWN_INVOCATION.
	Outcome string `json:"outcome,omitempty"`
	// Phase, Code and CommittedVersion repeat the mutation's answer ("" and 0 with UNKNOWN_INVOCATION).
	Phase            string `json:"phase,omitempty"`
	Code             int    `json:"code"`
	CommittedVersion int64  `json:"committed_version"`
	Message          string `json:"message,omitempty"` // for people
}
