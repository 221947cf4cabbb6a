// Package workerproto is engine protocol v1 (docs/ENGINE.md): the frames between the sidecar and
// one engine process in its worker domain, on the engine's own pipes (fd 3: sidecar → engine,
// fd 4: engine → sidecar), never on the host transport. Frames are a 4-byte big-endian length
// followed by one JSON object with a "t" type.
//
//	engine → sidecar: hello (first, before the engine reads anything; its declaration), progress,
//	                  reserve (custody of object keys and prefixes before writing them), and
//	                  exactly one answer: result
//	sidecar → engine: request (exactly one, after hello; kind mutate; the only place per-call
//	                  credentials travel), reserved (the answer to a reserve)
//
// Both directions are bounded; a malformed, oversized or out-of-order frame is a protocol
// violation for which the sidecar kills the domain. The package owns the frame shapes and their
// validation only: what the sidecar enforces across frames lives in the sidecar, what an engine
// does with them in sidecar/enginesdk.
package workerproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/cba1309c/steward/rpc"
)

// Protocol is the engine protocol version this package speaks.
const Protocol = 1

// Frame bounds.
const (
	MaxRequestFrame = 1 << 20  // sidecar → engine
	MaxWorkerFrame  = 64 << 10 // engine → sidecar
	// MaxReserveNames bounds the keys, and separately the prefixes, of one reserve frame.
	MaxReserveNames = 1000
)

// Frame types.
const (
	TypeHello    = "hello"
	TypeProgress = "progress"
	TypeReserve  = "reserve"
	TypeResult   = "result"
	TypeRequest  = "request"
	TypeReserved = "reserved"
)

// Request kinds.
const (
	KindMutate = "mutate"
)

// Settle guarantees an engine declares (docs/ENGINE.md §3.1), the same values hello reports.
const (
	SettleFence      = rpc.SettleFence
	SettleClaimFence = rpc.SettleClaimFence
	SettleNone       = rpc.SettleNone
)

// Why a reservation was refused (Frame.Refusal of a reserved frame; docs/ENGINE.md §6). Only
// RefusalUnavailable may succeed if asked again.
const (
	RefusalForeign     = "foreign"     // outside the dataset's data and index folders, or a prefix holding older objects
	RefusalExists      = "exists"      // a key that already exists in the store
	RefusalOwned       = "owned"       // another owner holds a ticket on the name, above or below it
	RefusalQuota       = "quota"       // the invocation's ticket quota is used up
	RefusalCapacity    = "capacity"    // the ledger's capacity is used up
	RefusalUnavailable = "unavailable" // storage or the journal failed: nothing is known about the name
)

// Errors.
var (
	ErrFrameTooLarge = errors.New("workerproto: frame too large")
	ErrMalformed     = errors.New("workerproto: malformed frame")
)

// Frame is the union of all frame types; T says which fields are meaningful.
type Frame struct {
	T string `json:"t"`

	// hello
	Pid    int     `json:"pid,omitempty"`
	Engine *Engine `json:"engine,omitempty"`

	// request: Kind ("" = mutate) and its body, a MutateRequest (decode it with Mutate). The
	// sidecar sends no other kind: the settle requests of older sidecars are gone (ENGINE.md §5).
	Kind    string          `json:"kind,omitempty"`
	Request json.RawMessage `json:"request,omitempty"`

	// progress
	Stage string `json:"stage,omitempty"`
	Done  int64  `json:"done,omitempty"`
	Total int64  `json:"total,omitempty"`

	// reserve / reserved
	Seq      uint64   `json:"seq,omitempty"`
	Keys     []string `json:"keys,omitempty"`
	Prefixes []string `json:"prefixes,omitempty"`
	Error    string   `json:"error,omitempty"`
	// Refusal classifies a refused reservation (reserved with Error): one of the Refusal* values.
	Refusal string `json:"refusal,omitempty"`

	// result
	Result *Result `json:"result,omitempty"`
}

// Engine is an engine's declaration in its hello (docs/ENGINE.md §3.1).
type Engine struct {
	// Name is the engine's own name, for logs.
	Name string `json:"name"`
	// Protocol is the engine protocol version it speaks (Protocol).
	Protocol int `json:"protocol"`
	// IndexTypes are the index.type values it builds.
	IndexTypes []string `json:"index_types"`
	// Settle is how an UNKNOWN outcome of this engine settles: SettleFence, SettleClaimFence or
	// SettleNone.
	Settle string `json:"settle"`
	// Custody optionally says when the engine reserves the prefix of an index type's folder.
	Custody *Custody `json:"custody,omitempty"`
	// Faults lists the test faults (faults.go) the engine acts out; a sidecar with test faults
	// refuses any other fault for this engine rather than run a "faulted" mutation that is not.
	Faults []string `json:"faults,omitempty"`
}

// Custody lists the index types whose folder prefix is reserved before the build and those
// reserved only after it (the engine cannot choose the folder name up front).
type Custody struct {
	PrefixBeforeBuild []string `json:"prefix_before_build,omitempty"`
	PrefixAfterBuild  []string `json:"prefix_after_build,omitempty"`
}

// MutateRequest is the body of a mutate request (docs/ENGINE.md §4.1): the index.mutate params
// without engine, their dataset and credentials the invocation's gateway's, and the domain's
// private temp dir. Its JSON is the params' own, field for field and in their order.
type MutateRequest struct {
	InvocationID   string              `json:"invocation_id"`
	JobID          string              `json:"job_id,omitempty"`
	DeadlineUnixMs int64               `json:"deadline_unix_ms"`
	Dataset        rpc.DatasetRef      `json:"dataset"` // the gateway's store, the call's path
	PinnedVersion  int64               `json:"pinned_version"`
	Op             string              `json:"op"`
	Index          rpc.IndexSpec       `json:"index"`
	IfNotExists    bool                `json:"if_not_exists,omitempty"`
	IfExists       bool                `json:"if_exists,omitempty"`
	Schema         []rpc.FieldContract `json:"schema,omitempty"`
	Credentials    *rpc.Credentials    `json:"credentials,omitempty"` // the gateway's key
	Limits         *rpc.WorkerLimits   `json:"limits,omitempty"`
	Fault          string              `json:"fault,omitempty"`
	TraceParent    string              `json:"traceparent,omitempty"`
	Segment        *rpc.SegmentSpec    `json:"segment,omitempty"`
	// TempDir is the private directory of the domain (also TMPDIR and HOME), removed after the
	// domain is reaped.
	TempDir string `json:"temp_dir,omitempty"`
}

// NewMutateRequest is the request for call p to an engine that reaches its dataset as dataset
// with creds (its gateway's), with its domain's temp dir tmp.
func NewMutateRequest(p rpc.MutateParams, dataset rpc.DatasetRef, creds *rpc.Credentials, tmp string) *MutateRequest {
	return &MutateRequest{
		InvocationID: p.InvocationID, JobID: p.JobID, DeadlineUnixMs: p.DeadlineUnixMs, Dataset: dataset,
		PinnedVersion: p.PinnedVersion, Op: p.Op, Index: p.Index, IfNotExists: p.IfNotExists, IfExists: p.IfExists,
		Schema: p.Schema, Credentials: creds, Limits: p.Limits, Fault: p.Fault, TraceParent: p.TraceParent,
		Segment: p.Segment, TempDir: tmp,
	}
}

// Result is the engine's account of its single mutation.
type Result struct {
	Phase            string   `json:"phase"` // PRE_INVOCATION_REJECTED or NATIVE_RETURN
	Code             int      `json:"code"`
	ObservedLatest   int64    `json:"observed_latest"`
	CommittedVersion int64    `json:"committed_version"`
	CompletionReason string   `json:"completion_reason,omitempty"`
	Message          string   `json:"message,omitempty"`
	IndexUUID        string   `json:"index_uuid,omitempty"`
	Created          []string `json:"created,omitempty"` // object keys the call wrote (store-relative)
}

// Mutate decodes a mutate request's body.
func (f *Frame) Mutate() (*MutateRequest, error) {
	if f.T != TypeRequest || (f.Kind != "" && f.Kind != KindMutate) {
		return nil, fmt.Errorf("%w: %q frame of kind %q is not a mutate request", ErrMalformed, f.T, f.Kind)
	}
	var r MutateRequest
	if err := json.Unmarshal(f.Request, &r); err != nil {
		return nil, fmt.Errorf("%w: mutate request: %v", ErrMalformed, err)
	}
	return &r, nil
}

// NewRequest builds a request frame of kind with body (a *MutateRequest).
func NewRequest(kind string, body any) (*Frame, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("workerproto: marshal request: %w", err)
	}
	return &Frame{T: TypeRequest, Kind: kind, Request: b}, nil
}

// Validate checks a frame's type and the fields its type requires.
func (f *Frame) Validate() error {
	switch f.T {
	case TypeHello:
		if f.Pid <= 0 {
			return fmt.Errorf("%w: hello without pid", ErrMalformed)
		}
		if f.Engine == nil {
			return fmt.Errorf("%w: hello without the engine declaration", ErrMalformed)
		}
	case TypeRequest:
		if f.Kind != "" && f.Kind != KindMutate {
			return fmt.Errorf("%w: request kind %q", ErrMalformed, f.Kind)
		}
		if len(f.Request) == 0 || f.Request[0] != '{' {
			return fmt.Errorf("%w: request without an object body", ErrMalformed)
		}
	case TypeProgress:
		if f.Done < 0 || f.Total < 0 {
			return fmt.Errorf("%w: negative progress", ErrMalformed)
		}
	case TypeReserve:
		return f.validateReserve()
	case TypeReserved:
	case TypeResult:
		return f.validateResult()
	default:
		return fmt.Errorf("%w: unknown frame type %q", ErrMalformed, f.T)
	}
	return nil
}

func (f *Frame) validateReserve() error {
	if len(f.Keys)+len(f.Prefixes) == 0 || len(f.Keys) > MaxReserveNames || len(f.Prefixes) > MaxReserveNames {
		return fmt.Errorf("%w: reserve needs 0-%d keys and 0-%d prefixes, at least one name", ErrMalformed, MaxReserveNames, MaxReserveNames)
	}
	if f.Seq == 0 {
		return fmt.Errorf("%w: reserve without seq", ErrMalformed)
	}
	for _, k := range f.Keys {
		if k == "" || strings.HasSuffix(k, "/") {
			return fmt.Errorf("%w: reserve key %q (a key must not be empty or end in /)", ErrMalformed, k)
		}
	}
	for _, p := range f.Prefixes {
		if len(p) < 2 || !strings.HasSuffix(p, "/") {
			return fmt.Errorf("%w: reserve prefix %q does not end in /", ErrMalformed, p)
		}
	}
	return nil
}

func (f *Frame) validateResult() error {
	if f.Result == nil {
		return fmt.Errorf("%w: result without body", ErrMalformed)
	}
	switch f.Result.Phase {
	case rpc.PhasePreInvocationRejected:
		if f.Result.Code >= 0 {
			return fmt.Errorf("%w: pre-invocation result with native code %d", ErrMalformed, f.Result.Code)
		}
	case rpc.PhaseNativeReturn:
		if f.Result.Code < 0 {
			return fmt.Errorf("%w: native result with steward code %d", ErrMalformed, f.Result.Code)
		}
	default:
		return fmt.Errorf("%w: result phase %q", ErrMalformed, f.Result.Phase)
	}
	if f.Result.CommittedVersion < 0 || f.Result.ObservedLatest < 0 {
		return fmt.Errorf("%w: negative version in result", ErrMalformed)
	}
	if u := f.Result.IndexUUID; u != "" && !validIndexUUID(u) {
		return fmt.Errorf("%w: index_uuid %q is not 1-64 of [A-Za-z0-9._-] starting alphanumeric", ErrMalformed, truncate(u, 80))
	}
	if len(f.Result.Created) > MaxReserveNames {
		return fmt.Errorf("%w: %d created keys (at most %d)", ErrMalformed, len(f.Result.Created), MaxReserveNames)
	}
	return nil
}

// validIndexUUID: an index's folder name as engines choose it (a UUID, Lance's or the built-in
// engine's): 1-64 of [A-Za-z0-9._-], starting alphanumeric — never a path or a control character.
func validIndexUUID(u string) bool {
	if len(u) > 64 {
		return false
	}
	for i, c := range []byte(u) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return u != ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Write writes one frame, refusing one larger than limit.
func Write(w io.Writer, f *Frame, limit int) error {
	body, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("workerproto: marshal: %w", err)
	}
	if len(body) > limit {
		return fmt.Errorf("%w: %d bytes > %d", ErrFrameTooLarge, len(body), limit)
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	_, err = w.Write(buf)
	return err
}

// Read reads one frame of at most limit bytes and validates it. io.EOF means a clean end before
// any byte of a frame.
func Read(r io.Reader, limit int) (*Frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || int64(n) > int64(limit) {
		return nil, fmt.Errorf("%w: %d bytes (limit %d)", ErrFrameTooLarge, n, limit)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("%w: truncated body: %v", ErrMalformed, err)
	}
	return Decode(body)
}

// Decode parses and validates one frame body.
func Decode(body []byte) (*Frame, error) {
	var f Frame
	if err := json.Unmarshal(body, &f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}
