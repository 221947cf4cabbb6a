// Package workerproto is the private protocol between the sidecar and one isolated worker, on the
// worker's own pipes (fd 3: sidecar → worker, fd 4: worker → sidecar), never on the host
// transport. Frames are a 4-byte big-endian length followed by one JSON object with a "t" type.
//
//	worker → sidecar: hello (first, before the worker reads anything), progress, reserve (custody
//	                  of an object name before its upload), result (exactly one)
//	sidecar → worker: request (exactly one, after hello; the only place per-call credentials
//	                  travel), reserved (the answer to a reserve)
//
// Both directions are bounded; a malformed, oversized or out-of-order frame is a protocol
// violation for which the sidecar kills the worker.
package workerproto

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/cba1309c/steward/rpc"
)

// Frame bounds.
const (
	MaxRequestFrame = 1 << 20  // sidecar → worker
	MaxWorkerFrame  = 64 << 10 // worker → sidecar
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

// Errors.
var (
	ErrFrameTooLarge = errors.New("workerproto: frame too large")
	ErrMalformed     = errors.New("workerproto: malformed frame")
)

// Frame is the union of all frame types; T says which fields are meaningful.
type Frame struct {
	T string `json:"t"`

	// hello
	Pid int `json:"pid,omitempty"`

	// request
	Request *rpc.MutateParams `json:"request,omitempty"`

	// progress
	Stage string `json:"stage,omitempty"`
	Done  int64  `json:"done,omitempty"`
	Total int64  `json:"total,omitempty"`

	// reserve / reserved
	Seq   uint64   `json:"seq,omitempty"`
	Keys  []string `json:"keys,omitempty"`
	Error string   `json:"error,omitempty"`

	// result
	Result *Result `json:"result,omitempty"`
}

// Result is the worker's account of its single engine call.
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

// Validate checks a frame's type and the fields its type requires.
func (f *Frame) Validate() error {
	switch f.T {
	case TypeHello:
		if f.Pid <= 0 {
			return fmt.Errorf("%w: hello without pid", ErrMalformed)
		}
	case TypeRequest:
		if f.Request == nil {
			return fmt.Errorf("%w: request without body", ErrMalformed)
		}
	case TypeProgress:
		if f.Done < 0 || f.Total < 0 {
			return fmt.Errorf("%w: negative progress", ErrMalformed)
		}
	case TypeReserve:
		if len(f.Keys) == 0 || len(f.Keys) > 1000 {
			return fmt.Errorf("%w: reserve needs 1-1000 keys", ErrMalformed)
		}
	case TypeReserved:
	case TypeResult:
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
	default:
		return fmt.Errorf("%w: unknown frame type %q", ErrMalformed, f.T)
	}
	return nil
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
