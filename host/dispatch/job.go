package dispatch

import (
	"path"
	"strings"
	"time"
	"unicode"

	"github.com/cba1309c/steward/rpc"
)

// State is a job's outcome state.
type State string

// Job states. COMMITTED and NOT_COMMITTED are final; UNKNOWN is terminal for sending (the job is
// never sent again) but may still be settled by index.resolve or by a late answer.
const (
	StatePending      State = "PENDING"
	StateRunning      State = "RUNNING"
	StateCommitted    State = "COMMITTED"
	StateNotCommitted State = "NOT_COMMITTED"
	StateUnknown      State = "UNKNOWN"
)

// Settled reports whether s is a definite outcome.
func (s State) Settled() bool { return s == StateCommitted || s == StateNotCommitted }

// RefreshState tracks the host's post-commit refresh hook for a job.
type RefreshState string

// Refresh states. FAILED is retried at most once per Config.RefreshRetryInterval.
const (
	RefreshNotRequired RefreshState = "NOT_REQUIRED"
	RefreshRequired    RefreshState = "REQUIRED"
	RefreshRunning     RefreshState = "RUNNING"
	RefreshDone        RefreshState = "DONE"
	RefreshFailed      RefreshState = "FAILED"
)

// pending reports whether the refresh driver still has work for this state.
func (r RefreshState) pending() bool {
	return r == RefreshRequired || r == RefreshRunning || r == RefreshFailed
}

// Events recorded in a job's history.
const (
	EventSubmit       = "submit"        // admitted as PENDING
	EventDispatch     = "dispatch"      // journaled RUNNING before the send
	EventAnswer       = "answer"        // the sidecar answered (result or refusal) or the call failed
	EventDeadline     = "deadline"      // the deadline passed with no answer
	EventOverdue      = "overdue"       // no answer by the deadline + AnswerGrace; still waited for
	EventUnsent       = "unsent"        // journaled RUNNING, then never sent: NOT_COMMITTED, slot released
	EventEpochGone    = "epoch-gone"    // the recorded sidecar epoch is gone: slot released
	EventNodeGone     = "node-gone"     // settled, and no live node announces its epoch: slot released
	EventResolve      = "resolve"       // index.resolve settled the outcome
	EventRefresh      = "refresh"       // the refresh hook ran (or was scheduled)
	EventForceRelease = "force-release" // an operator released the job
	EventStep         = "step"          // a segmented job journaled new steps, or its failure
	EventAdopt        = "adopt"         // the committing sidecar adopted a builder's custody
	EventSidecarGone  = "sidecar-gone"  // no node announces a plan sidecar: its work moves to live ones
	EventRetarget     = "retarget"      // a never-sent step was re-aimed off a gone sidecar
)

// Transition is one entry of a job's history.
type Transition struct {
	At    time.Time `json:"at"`
	Event string    `json:"event"`
	// From and To are the states around the event (equal when only the slot or refresh moved).
	From State `json:"from,omitempty"`
	To   State `json:"to,omitempty"`
	// Slot is "held" or "released" after the event.
	Slot string `json:"slot,omitempty"`
	// Refresh is the refresh state after the event.
	Refresh RefreshState `json:"refresh,omitempty"`
	// By is who acted (force-release); Detail says why, for people.
	By     string `json:"by,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Result is what a send produced: the sidecar's typed answer, or the error class of a refusal or
// a transport failure. Error is for people; classification never reads it.
type Result struct {
	At                    time.Time `json:"at"`
	Phase                 string    `json:"phase,omitempty"`
	Code                  int       `json:"code"`
	ObservedLatestVersion int64     `json:"observed_latest_version,omitempty"`
	CommittedVersion      int64     `json:"committed_version,omitempty"`
	CompletionReason      string    `json:"completion_reason,omitempty"`
	Message               string    `json:"message,omitempty"`
	IndexUUID             string    `json:"index_uuid,omitempty"`
	WallMs                int64     `json:"wall_ms,omitempty"`
	PeakMemoryBytes       int64     `json:"peak_memory_bytes,omitempty"`
	OOMKilled             bool      `json:"oom_killed,omitempty"`
	Signal                string    `json:"signal,omitempty"`
	// Cancelled: an index.cancel reached the invocation before its answer (rpc.MutateResult.Cancelled).
	Cancelled bool `json:"cancelled,omitempty"`
	// ErrorCode is the JSON-RPC error code of a refusal at receive (0 otherwise).
	ErrorCode int64 `json:"error_code,omitempty"`
	// ErrorClass is the class of a failed call: ErrorRefused, ErrorIdentity, ErrorConnectionLost,
	// ErrorTimeout or ErrorTransport ("" for an answer).
	ErrorClass string `json:"error_class,omitempty"`
	// Error describes a refusal or transport failure.
	Error string `json:"error,omitempty"`
}

// Error classes of a failed call, from its typed error.
const (
	ErrorRefused        = "refused"         // a JSON-RPC error: refused at receive, never executed
	ErrorIdentity       = "identity"        // the answer did not echo the invocation id or epoch
	ErrorConnectionLost = "connection-lost" // the connection closed after the send
	ErrorTimeout        = "timeout"         // the call's context ended before an answer
	ErrorTransport      = "transport"       // any other failure after the send
)

// Resolution is the answer of index.resolve that settled an UNKNOWN job.
type Resolution struct {
	At      time.Time `json:"at"`
	Outcome string    `json:"outcome"`
	Version int64     `json:"version"`
	Fenced  bool      `json:"fenced"`
	Reason  string    `json:"reason,omitempty"`
}

// Job is one durable index mutation. Credentials are never part of it.
type Job struct {
	ID      string         `json:"id"`
	Dataset rpc.DatasetRef `json:"dataset"`
	Op      string         `json:"op"`
	Index   rpc.IndexSpec  `json:"index"`
	// AdmittedVersion is the dataset version the host admitted the job at; the mutation commits
	// at AdmittedVersion+1 or not at all.
	AdmittedVersion int64               `json:"admitted_version"`
	IfNotExists     bool                `json:"if_not_exists,omitempty"`
	IfExists        bool                `json:"if_exists,omitempty"`
	Schema          []rpc.FieldContract `json:"schema,omitempty"`
	Limits          *rpc.WorkerLimits   `json:"limits,omitempty"`
	// Fault is a test-only fault passed through to a sidecar started with --test-faults.
	Fault string `json:"fault,omitempty"`
	// Engine is the registered engine that runs the job ("" = the built-in one); its settle
	// guarantee in the sidecar's hello decides whether UNKNOWN is settled by index.resolve.
	Engine string `json:"engine,omitempty"`
	// TraceParent is the job's W3C traceparent, carried by every send.
	TraceParent string `json:"traceparent,omitempty"`
	// ExecuteDeadline overrides Config.ExecuteDeadline for this job (0: the default).
	ExecuteDeadline time.Duration `json:"execute_deadline_ns,omitempty"`

	// Segmented is set on a segmented job (segmented.go): the parent that holds the index name,
	// is never sent itself, and is driven through its step jobs.
	Segmented *SegmentedPlan `json:"segmented,omitempty"`
	// Parent, Segment and Target are set on a step of a segmented job: the parent's id, the
	// step's segment work, and the sidecar name it must be sent to ("" = any).
	Parent  string           `json:"parent,omitempty"`
	Segment *rpc.SegmentSpec `json:"segment,omitempty"`
	Target  string           `json:"target,omitempty"`

	State State `json:"state"`
	// SlotHeld is true while a worker might still be running for this job.
	SlotHeld bool `json:"slot_held"`
	// Released is set by a force-release: the job is no longer driven.
	Released bool `json:"released,omitempty"`

	// Set when RUNNING is journaled, before the send.
	InvocationID string    `json:"invocation_id,omitempty"`
	Sidecar      string    `json:"sidecar,omitempty"` // the name the sidecar was added under
	Epoch        string    `json:"epoch,omitempty"`
	Deadline     time.Time `json:"deadline,omitzero"`
	// Node and Claim are the node that journaled the send and the claim it held then (a shared
	// store only: see Cluster); empty and 0 on a single-node store.
	Node  string `json:"node,omitempty"`
	Claim int64  `json:"claim,omitempty"`

	Result     *Result     `json:"result,omitempty"`
	Resolution *Resolution `json:"resolution,omitempty"`
	// Cancel is set once a cancel of the job is journaled (cancel.go).
	Cancel *CancelIntent `json:"cancel,omitempty"`

	Refresh          RefreshState `json:"refresh"`
	RefreshAttempts  int          `json:"refresh_attempts,omitempty"`
	RefreshAttemptAt time.Time    `json:"refresh_attempt_at,omitzero"`
	RefreshError     string       `json:"refresh_error,omitempty"`

	Created time.Time    `json:"created"`
	Updated time.Time    `json:"updated"`
	History []Transition `json:"history"`
}

// Unresolved reports whether the job counts against the quotas: it still holds its slot, or its
// outcome is still to be settled.
func (j *Job) Unresolved() bool {
	if j.SlotHeld {
		return true
	}
	switch j.State {
	case StatePending, StateRunning:
		return true
	case StateUnknown:
		return !j.Released
	}
	return false
}

// Active reports whether a dispatcher round still has something to do with the job.
func (j *Job) Active() bool { return j.Unresolved() || j.Refresh.pending() }

// Finished reports whether no round will ever act on the job again: its outcome is settled (or
// it was force-released UNKNOWN), its slot is free and its refresh is done. Only finished jobs
// are pruned.
func (j *Job) Finished() bool {
	return !j.Active() && (j.State.Settled() || (j.State == StateUnknown && j.Released))
}

// DatasetKey identifies the job's dataset for the fence and the per-dataset quota.
func (j *Job) DatasetKey() string { return datasetKey(j.Dataset) }

// NameKey identifies the job's slot: its dataset and case-folded index name.
func (j *Job) NameKey() string { return j.DatasetKey() + "\x00" + FoldName(j.Index.Name) }

// datasetKey names the store canonically, so every spelling of one dataset meets the same fence.
// A spec the parser refuses (only a job journaled before it could hold one) keeps its raw fields.
func datasetKey(d rpc.DatasetRef) string {
	store := d.Store.URL + "\x00" + d.Store.Endpoint
	if p, err := d.Store.Parse(); err == nil {
		store = p.Name()
	}
	return store + "\x00" + path.Clean(strings.Trim(d.Path, "/"))
}

// FoldName normalizes an index name the way the engine compares names (Unicode simple case
// folding, as strings.EqualFold): each rune becomes the smallest rune of its fold orbit.
func FoldName(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b.WriteRune(m)
	}
	return b.String()
}

// maxRefreshHistory bounds the refresh entries kept in a job's history: a refresh that keeps
// failing is retried forever, and its older attempts are dropped (every other event is kept).
const maxRefreshHistory = 16

// record appends a history entry and stamps Updated.
func (j *Job) record(at time.Time, event string, from State, detail string) {
	if event == EventRefresh {
		j.trimRefreshHistory()
	}
	slot := "released"
	if j.SlotHeld {
		slot = "held"
	}
	j.Updated = at
	j.History = append(j.History, Transition{
		At: at, Event: event, From: from, To: j.State, Slot: slot, Refresh: j.Refresh, Detail: detail,
	})
}

// hasEvent reports whether the job's history holds event.
func (j *Job) hasEvent(event string) bool {
	for _, h := range j.History {
		if h.Event == event {
			return true
		}
	}
	return false
}

func (j *Job) trimRefreshHistory() {
	n := 0
	for _, h := range j.History {
		if h.Event == EventRefresh {
			n++
		}
	}
	if n < maxRefreshHistory {
		return
	}
	for i, h := range j.History {
		if h.Event == EventRefresh {
			j.History = append(j.History[:i], j.History[i+1:]...)
			return
		}
	}
}
