package rpc

import (
	"errors"
	"fmt"
	"strings"
)

// Mutation operations.
const (
	OpCreate  = "CREATE"
	OpReplace = "REPLACE"
	OpDrop    = "DROP"
	// OpOptimize brings an existing index up to date with the dataset's fragments (Lance's
	// optimize_indices): it names the index only. An engine that cannot answers NOT_SUPPORTED.
	OpOptimize = "OPTIMIZE"
)

// Index types.
const (
	IndexBTree  = "BTREE"
	IndexBitmap = "BITMAP"
)

// Schema field types of a host's schema contract (MutateParams.Schema).
const (
	FieldInt64   = "int64"
	FieldFloat64 = "float64"
	FieldString  = "string"
	// FieldListString is a list of strings (engines with nested types, e.g. Lance's LABEL_LIST).
	FieldListString = "list<string>"
)

// Phase says how far an invocation got; it decides what a host may conclude.
const (
	// PhasePreInvocationRejected: the engine was never called. Nothing was committed.
	PhasePreInvocationRejected = "PRE_INVOCATION_REJECTED"
	// PhaseNativeReturn: the engine returned; Code is its native code, verbatim.
	PhaseNativeReturn = "NATIVE_RETURN"
	// PhaseIndeterminate: the worker was launched and no trustworthy native answer came back. The
	// mutation may or may not have committed: settle it with index.resolve.
	PhaseIndeterminate = "INDETERMINATE_AFTER_LAUNCH"
)

// Native codes (≥ 0) mirror lance-c so a Lance-backed engine maps 1:1.
const (
	NativeOK              = 0
	NativeInvalidArgument = 1
	NativeIO              = 2
	NativeNotFound        = 3
	NativeAlreadyExists   = 4
	NativeIndex           = 5
	NativeInternal        = 6
	NativeNotSupported    = 7
	NativeCommitConflict  = 8
)

// Steward's pre-invocation reasons (< 0), valid with PhasePreInvocationRejected, and the codes of
// indeterminate answers, valid with PhaseIndeterminate.
const (
	ReasonDeadlineLapsed     = -1  // the deadline could no longer fund the kill budget at dequeue
	ReasonLaunchFailed       = -2  // the isolated worker could not be started
	ReasonStaleAdmission     = -3  // the pinned version is gone and a newer one exists
	ReasonSchemaMismatch     = -4  // the host's schema contract differs from the pinned snapshot
	ReasonAmbiguousName      = -5  // the normalized index name matches more than one stored index
	ReasonDatasetUnavailable = -6  // the dataset could not be opened (storage unreachable, corrupt)
	ReasonShuttingDown       = -7  // the sidecar began shutting down before the worker launched
	ReasonInvalidRequest     = -8  // the worker found the request unusable before the engine call
	ReasonCancelled          = -9  // index.cancel ended it: while queued, or killed with no commit in storage
	ReasonDuplicate          = -20 // (indeterminate) this invocation id was already admitted
	ReasonWorkerLost         = -21 // (indeterminate) the worker died, hung or broke protocol
	ReasonDeadline           = -22 // (indeterminate) the deadline killed the worker
	ReasonUnconfirmedCommit  = -23 // (indeterminate) the engine claimed a commit that storage does not confirm
	ReasonCancelUnsettled    = -24 // (indeterminate) index.cancel killed the worker and storage could not be read to settle it
)

// Completion reasons explain a NATIVE_RETURN OK that committed nothing.
const (
	CompletionCommitted       = "COMMITTED"
	CompletionIfNotExistsNoop = "IF_NOT_EXISTS_NOOP"
	CompletionIfExistsNoop    = "IF_EXISTS_NOOP"
	// CompletionAlreadyOptimized: an OPTIMIZE found the index covering every fragment already.
	CompletionAlreadyOptimized = "ALREADY_OPTIMIZED"
)

// Credentials are per-call storage credentials. They travel only in the frame to the worker: never
// into a log line, an error, a metric or a file. String redacts them.
type Credentials struct {
	AccessKey    string `json:"access_key"`
	SecretKey    string `json:"secret_key"`
	SessionToken string `json:"session_token,omitempty"`
}

// String redacts the credentials.
func (c *Credentials) String() string { return "credentials{redacted}" }

// GoString redacts the credentials from %#v.
func (c *Credentials) GoString() string { return c.String() }

// DatasetRef locates a dataset.
type DatasetRef struct {
	Store StoreSpec `json:"store"`
	// Path is the dataset's prefix inside the store, e.g. "warehouse/events".
	Path string `json:"path"`
}

func (d DatasetRef) validatePath() error {
	if d.Path == "" || strings.HasPrefix(d.Path, "/") || strings.Contains(d.Path, "..") {
		return errors.New("dataset.path must be a relative prefix without '..'")
	}
	return nil
}

// validate refuses what the stores cannot use yet: temporary (STS) credentials.
func (c *Credentials) validate() error {
	if c != nil && c.SessionToken != "" {
		return errors.New("credentials.session_token is not supported: use an access key and secret")
	}
	return nil
}

// IndexSpec describes the index to build or drop.
type IndexSpec struct {
	Name    string            `json:"name"`
	Columns []string          `json:"columns,omitempty"` // CREATE/REPLACE: exactly one column today
	Type    string            `json:"type,omitempty"`    // BTREE or BITMAP (CREATE/REPLACE)
	Params  map[string]string `json:"params,omitempty"`
}

// FieldContract is the host's belief about one indexed column.
type FieldContract struct {
	Name string `json:"name"`
	Type string `json:"type"` // "int64", "float64" or "string"
}

// WorkerLimits lower the sidecar's worker limits for one call (never raise them).
type WorkerLimits struct {
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	Pids        int64 `json:"pids,omitempty"`
}

// MutateParams are the params of index.mutate.
type MutateParams struct {
	InvocationID   string          `json:"invocation_id"`    // unique per attempt
	JobID          string          `json:"job_id,omitempty"` // the host's job, for logs
	DeadlineUnixMs int64           `json:"deadline_unix_ms"` // absolute wall-clock deadline
	Dataset        DatasetRef      `json:"dataset"`
	PinnedVersion  int64           `json:"pinned_version"` // the admitted version; commits land at +1
	Op             string          `json:"op"`
	Index          IndexSpec       `json:"index"`
	IfNotExists    bool            `json:"if_not_exists,omitempty"`
	IfExists       bool            `json:"if_exists,omitempty"`
	Schema         []FieldContract `json:"schema,omitempty"` // contract for the indexed columns
	Credentials    *Credentials    `json:"credentials,omitempty"`
	Limits         *WorkerLimits   `json:"limits,omitempty"`
	// Fault injects a test fault; refused unless the sidecar was started with faults enabled.
	Fault string `json:"fault,omitempty"`
	// Engine names the registered engine that runs the mutation; "" is the built-in one.
	Engine string `json:"engine,omitempty"`
	// TraceParent is an optional W3C traceparent: echoed in the answer and in $/progress, and
	// its trace id is on the sidecar's and the worker's log lines of this invocation.
	TraceParent string `json:"traceparent,omitempty"`
	// Segment carries the work of TRAIN, SEGMENT and COMMIT_SEGMENTS (rpc/segments.go).
	Segment *SegmentSpec `json:"segment,omitempty"`
}

// ValidID reports whether s is a usable invocation, job or owner id: 1-128 bytes of
// [A-Za-z0-9._:-]. (Hand-written: a package-level regexp costs every worker start 0.5 ms of init.)
func ValidID(s string) bool { return len(s) >= 1 && len(s) <= 128 && onlyOf(s, "._:-") }

// Validate implements Validator.
func (p MutateParams) Validate() error {
	if !ValidID(p.InvocationID) {
		return errors.New("invocation_id must be 1-128 characters of [A-Za-z0-9._:-]")
	}
	if err := p.Credentials.validate(); err != nil {
		return err
	}
	if p.DeadlineUnixMs <= 0 {
		return errors.New("deadline_unix_ms is required")
	}
	return p.Mutation().Validate()
}

// Mutation is an index mutation without the invocation that carries it (its id, deadline and
// credentials): what a host checks when it accepts a job, before any invocation exists. The
// index.mutate params are a Mutation and those.
type Mutation struct {
	JobID         string
	Dataset       DatasetRef
	PinnedVersion int64
	Op            string
	Index         IndexSpec
	IfNotExists   bool
	IfExists      bool
	Schema        []FieldContract
	Limits        *WorkerLimits
	Fault         string
	Engine        string
	TraceParent   string
	Segment       *SegmentSpec
}

// Mutation is the mutation p carries.
func (p MutateParams) Mutation() Mutation {
	return Mutation{JobID: p.JobID, Dataset: p.Dataset, PinnedVersion: p.PinnedVersion, Op: p.Op, Index: p.Index,
		IfNotExists: p.IfNotExists, IfExists: p.IfExists, Schema: p.Schema, Limits: p.Limits, Fault: p.Fault,
		Engine: p.Engine, TraceParent: p.TraceParent, Segment: p.Segment}
}

// Validate checks every field of the mutation as MutateParams.Validate does.
func (p Mutation) Validate() error {
	if err := validateDataset(p.Dataset, nil); err != nil {
		return err
	}
	if p.PinnedVersion < 1 {
		return errors.New("pinned_version must be ≥ 1")
	}
	if p.JobID != "" && !ValidID(p.JobID) {
		return errors.New("job_id must be 1-128 characters of [A-Za-z0-9._:-]")
	}
	if p.TraceParent != "" {
		if err := ValidateTraceParent(p.TraceParent); err != nil {
			return err
		}
	}
	if p.Index.Name == "" || len(p.Index.Name) > 256 {
		return errors.New("index.name must be 1-256 bytes")
	}
	switch p.Op {
	case OpCreate, OpReplace:
		if len(p.Index.Columns) == 0 {
			return errors.New("index.columns is required for " + p.Op)
		}
		if !validToken(p.Index.Type, 32, false) {
			return fmt.Errorf("index.type %q: want 1-32 of [A-Z0-9_], one the engine declares (BTREE or BITMAP for the built-in engine)", p.Index.Type)
		}
	case OpDrop:
	case OpOptimize:
		if len(p.Index.Columns) != 0 || p.Index.Type != "" || len(p.Index.Params) != 0 {
			return errors.New("OPTIMIZE names the index only: leave index.columns, index.type and index.params out")
		}
	case OpTrain, OpSegment, OpCommitSegments:
		if err := p.validateSegment(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("op %q: want CREATE, REPLACE, DROP, OPTIMIZE, TRAIN, SEGMENT or COMMIT_SEGMENTS", p.Op)
	}
	if p.Segment != nil && !IsSegmentOp(p.Op) {
		return errors.New("segment applies to TRAIN, SEGMENT and COMMIT_SEGMENTS only")
	}
	if p.IfNotExists && p.Op != OpCreate {
		return errors.New("if_not_exists applies to CREATE only")
	}
	if p.IfExists && p.Op != OpDrop {
		return errors.New("if_exists applies to DROP only")
	}
	for _, f := range p.Schema {
		if !validFieldType(f.Type) {
			return fmt.Errorf("schema field %q: type %q unknown", f.Name, f.Type)
		}
	}
	if err := validEngine(p.Engine); err != nil {
		return err
	}
	if p.Limits != nil && (p.Limits.MemoryBytes < 0 || p.Limits.Pids < 0) {
		return errors.New("limits must not be negative")
	}
	return nil
}

// MutateResult is the single classified answer to index.mutate.
type MutateResult struct {
	Phase        string `json:"phase"`
	Code         int    `json:"code"`
	InvocationID string `json:"invocation_id"` // echoed
	Epoch        string `json:"epoch"`         // the answering sidecar's epoch
	// ObservedLatestVersion is the newest dataset version the worker saw (0 = unknown).
	ObservedLatestVersion int64 `json:"observed_latest_version"`
	// CommittedVersion is the version this invocation committed (0 = none).
	CommittedVersion int64  `json:"committed_version"`
	CompletionReason string `json:"completion_reason,omitempty"`
	Message          string `json:"message,omitempty"` // sanitized, for people
	IndexUUID        string `json:"index_uuid,omitempty"`
	WallMs           int64  `json:"wall_ms"`
	PeakMemoryBytes  int64  `json:"peak_memory_bytes"`
	OOMKilled        bool   `json:"oom_killed"`
	Signal           string `json:"signal,omitempty"`
	TraceParent      string `json:"traceparent,omitempty"` // the request's, echoed
	// Cancelled is true when an index.cancel for the invocation arrived before this answer was
	// sent, whether or not it changed the outcome (Code says: -9 and -24 are the cancel's).
	Cancelled bool `json:"cancelled,omitempty"`
}

// ResolveParams are the params of index.resolve.
type ResolveParams struct {
	InvocationID  string       `json:"invocation_id"`
	Dataset       DatasetRef   `json:"dataset"`
	PinnedVersion int64        `json:"pinned_version"`
	Credentials   *Credentials `json:"credentials,omitempty"`
	// Engine names the engine the invocation ran on (it knows the dataset's format and how to
	// settle its slot); "" is the built-in one.
	Engine string `json:"engine,omitempty"`
}

// Validate implements Validator.
func (p ResolveParams) Validate() error {
	if err := validEngine(p.Engine); err != nil {
		return err
	}
	return validateSlot(p.InvocationID, p.Dataset, p.PinnedVersion, p.Credentials)
}

// validEngine: "" or a registered-engine name, 1-32 of [a-z0-9_-].
func validEngine(name string) error {
	if name != "" && !validToken(name, 32, true) {
		return errors.New("engine must be 1-32 characters of [a-z0-9_-]")
	}
	return nil
}

// validToken: 1-max bytes of [A-Z0-9_] (upper) or [a-z0-9_-] (lower, for engine names).
func validToken(s string, max int, lower bool) bool {
	if len(s) < 1 || len(s) > max {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= '0' && c <= '9' || c == '_'
		if lower {
			ok = ok || c >= 'a' && c <= 'z' || c == '-'
		} else {
			ok = ok || c >= 'A' && c <= 'Z'
		}
		if !ok {
			return false
		}
	}
	return true
}

// validFieldType: the schema types of docs/PROTOCOL.md §3.1 (int64, float64, string; and for
// engines with nested types, list<string> and vector<float32,N>).
func validFieldType(t string) bool {
	switch t {
	case FieldInt64, FieldFloat64, FieldString, FieldListString:
		return true
	}
	n, ok := strings.CutPrefix(t, "vector<float32,")
	if !ok {
		return false
	}
	if n, ok = strings.CutSuffix(n, ">"); !ok || len(n) == 0 || len(n) > 6 || n[0] == '0' {
		return false
	}
	for _, c := range []byte(n) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// validateSlot checks index.resolve's invocation, dataset, pinned version (whose successor is the
// commit slot) and credentials.
func validateSlot(inv string, d DatasetRef, pinned int64, c *Credentials) error {
	if !ValidID(inv) {
		return errors.New("invocation_id must be 1-128 characters of [A-Za-z0-9._:-]")
	}
	if err := validateDataset(d, c); err != nil {
		return err
	}
	if pinned < 1 {
		return errors.New("pinned_version must be ≥ 1")
	}
	return nil
}

// validateDataset checks a dataset's store, path and the credentials to reach it with.
func validateDataset(d DatasetRef, c *Credentials) error {
	if err := d.Store.Validate(); err != nil {
		return err
	}
	if err := d.validatePath(); err != nil {
		return err
	}
	return c.validate()
}

// Resolution outcomes.
const (
	OutcomeCommitted    = "COMMITTED"
	OutcomeNotCommitted = "NOT_COMMITTED"
	OutcomeUnknown      = "UNKNOWN"
)

// ResolveResult settles an invocation.
type ResolveResult struct {
	InvocationID string `json:"invocation_id"`
	Outcome      string `json:"outcome"`
	// Version is the slot pinned+1 that decided it.
	Version int64 `json:"version"`
	// Fenced is true when this call (or an earlier one) wrote the fence.
	Fenced bool   `json:"fenced"`
	Reason string `json:"reason,omitempty"`
}

// ProgressParams are the params of the $/progress notification.
type ProgressParams struct {
	InvocationID string `json:"invocation_id"`
	Stage        string `json:"stage"` // the engine's step, e.g. "load_data", "commit" (PROTOCOL.md §5)
	Done         int64  `json:"done"`
	Total        int64  `json:"total"`
	TraceParent  string `json:"traceparent,omitempty"` // the mutation's, if it had one
}
