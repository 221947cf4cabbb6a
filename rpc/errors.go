package rpc

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sourcegraph/jsonrpc2"
)

// Code is a JSON-RPC error code. The JSON-RPC 2.0 codes are standard; steward's own codes live in
// the server-error range -32000..-32099 and are listed in docs/PROTOCOL.md.
type Code int64

// The error-code table. A code is part of the wire contract: never renumber one.
const (
	CodeParseError     Code = -32700 // the frame is not valid JSON
	CodeInvalidRequest Code = -32600 // valid JSON, not a valid JSON-RPC 2.0 request
	CodeMethodNotFound Code = -32601 // no such method
	CodeInvalidParams  Code = -32602 // params missing, mistyped, unknown field, or failed validation
	CodeInternal       Code = -32603 // a steward bug; nothing was enqueued

	CodeOverloaded           Code = -32001 // receive queue or handler pool full; retry later
	CodeDeadlineUnfundable   Code = -32002 // deadline cannot fund the kill budget + runnable window
	CodeIsolationUnavailable Code = -32003 // isolation did not verify; nothing is ever launched
	CodeShuttingDown         Code = -32004 // the sidecar is stopping and accepts no new work
	CodeUnsupportedProtocol  Code = -32005 // the host's protocol_version is not spoken here
	CodeFrameTooLarge        Code = -32006 // the frame exceeds the negotiated maximum size
	CodeDuplicateOwner       Code = -32007 // reserved: an owner/invocation id that is already in use

	CodeLedgerFull         Code = -32010 // no ticket capacity left; nothing was reserved
	CodeUnknownOwner       Code = -32011 // the owner holds no tickets
	CodeNameOwned          Code = -32012 // an object name is already owned by another owner
	CodeStorageUnavailable Code = -32013 // object storage did not answer; try again later
	CodeNotFound           Code = -32014 // a named entity (dataset, invocation) does not exist

	CodeConditionalWritesIgnored Code = -32015 // the store accepts a second put-if-absent: no commit or fence on it
	CodeStoreNotAllowed          Code = -32016 // no per-call credentials, and the store is not on the sidecar's --allow-store list

	CodeOverMemoryBudget Code = -32020 // the call's worker memory limit exceeds the sidecar's whole memory budget
)

// Sentinel is a wire error class. Domain code wraps a sentinel (fmt.Errorf("...: %w",
// rpc.ErrOverloaded)); ToWire maps it to its code; a Go host gets an *Error that errors.Is the same
// sentinel back.
type Sentinel struct {
	code Code
	name string
}

func (s *Sentinel) Error() string { return s.name }

// Code returns the wire code of s.
func (s *Sentinel) Code() Code { return s.code }

func newSentinel(c Code, name string) *Sentinel {
	s := &Sentinel{code: c, name: name}
	sentinels = append(sentinels, s)
	return s
}

var sentinels []*Sentinel

// Sentinels of the wire contract, one per code.
var (
	ErrParse                = newSentinel(CodeParseError, "parse error")
	ErrInvalidRequest       = newSentinel(CodeInvalidRequest, "invalid request")
	ErrMethodNotFound       = newSentinel(CodeMethodNotFound, "method not found")
	ErrInvalidParams        = newSentinel(CodeInvalidParams, "invalid params")
	ErrInternal             = newSentinel(CodeInternal, "internal error")
	ErrOverloaded           = newSentinel(CodeOverloaded, "overloaded")
	ErrDeadlineUnfundable   = newSentinel(CodeDeadlineUnfundable, "deadline cannot fund the kill budget")
	ErrIsolationUnavailable = newSentinel(CodeIsolationUnavailable, "isolation unavailable")
	ErrShuttingDown         = newSentinel(CodeShuttingDown, "shutting down")
	ErrUnsupportedProtocol  = newSentinel(CodeUnsupportedProtocol, "unsupported protocol version")
	ErrFrameTooLarge        = newSentinel(CodeFrameTooLarge, "frame too large")
	ErrDuplicateOwner       = newSentinel(CodeDuplicateOwner, "duplicate owner")
	ErrLedgerFull           = newSentinel(CodeLedgerFull, "ledger full")
	ErrUnknownOwner         = newSentinel(CodeUnknownOwner, "unknown owner")
	ErrNameOwned            = newSentinel(CodeNameOwned, "object name owned by another owner")
	ErrStorageUnavailable   = newSentinel(CodeStorageUnavailable, "storage unavailable")
	ErrNotFound             = newSentinel(CodeNotFound, "not found")
	// ErrConditionalWritesIgnored: the store ignores If-None-Match: * (a probe's second
	// put-if-absent succeeded), so commits at pinned+1 and fences cannot be made safe on it. The
	// sidecar refuses every index.mutate on that store for the rest of its life.
	ErrConditionalWritesIgnored = newSentinel(CodeConditionalWritesIgnored, "store ignores conditional writes")
	// ErrStoreNotAllowed: a call without per-call credentials names an s3 store that is not on
	// the sidecar's allow-list, so the sidecar will not send its own keys there. Nothing was
	// done; send credentials with the call, or add the store to --allow-store.
	ErrStoreNotAllowed = newSentinel(CodeStoreNotAllowed, "store not allowed for the sidecar's own credentials")
	// ErrOverMemoryBudget: the call's worker memory limit is larger than the sidecar's whole
	// memory budget, so it could never be admitted, however long it waited. Nothing ran; send
	// a lower limits.memory_bytes, or raise --memory-budget.
	ErrOverMemoryBudget = newSentinel(CodeOverMemoryBudget, "worker memory limit exceeds the memory budget")
)

// Errors of the wire contract's own decoders, wrapped with the detail. DecodeParams wraps a
// failed Validate in ErrInvalidParams, so they reach the wire as CodeInvalidParams.
var (
	// ErrInvalidStore means a store spec (url, endpoint, secure, region) or a ledger store name
	// does not follow the grammar of docs/PROTOCOL.md §3.1.1.
	ErrInvalidStore = errors.New("invalid store")
)

// Errors of the transport itself, seen only by the calling side.
var (
	// ErrConnectionLost means the connection closed before the answer arrived. For a request that
	// was sent, the outcome is unknown.
	ErrConnectionLost = errors.New("rpc: connection lost")
)

// Error is a JSON-RPC error as received by a Go host. It matches its code's sentinel with errors.Is.
type Error struct {
	Code    Code
	Message string
	Data    json.RawMessage
}

func (e *Error) Error() string { return fmt.Sprintf("rpc error %d: %s", e.Code, e.Message) }

// Is reports whether target is the sentinel of e's code.
func (e *Error) Is(target error) bool {
	s, ok := target.(*Sentinel)
	return ok && s.code == e.Code
}

// maxMessage bounds the message text carried on the wire.
const maxMessage = 512

// ToWire maps a handler error to its JSON-RPC error. This is the one place where wire classes
// become codes: an error wrapping a Sentinel gets its code, anything else is CodeInternal.
// Classifying domain errors (context errors included) is the server's job, before this.
func ToWire(err error) *jsonrpc2.Error {
	var we *Error
	if errors.As(err, &we) {
		return &jsonrpc2.Error{Code: int64(we.Code), Message: truncate(we.Message)}
	}
	code := CodeInternal
	for _, s := range sentinels {
		if errors.Is(err, s) {
			code = s.code
			break
		}
	}
	return &jsonrpc2.Error{Code: int64(code), Message: truncate(err.Error())}
}

// Classified reports whether err already carries a wire class (a Sentinel or a received *Error).
func Classified(err error) bool {
	var we *Error
	if errors.As(err, &we) {
		return true
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// FromWire converts a received error into a Go error that errors.Is its sentinel. Transport
// closure becomes ErrConnectionLost; context errors pass through unchanged.
func FromWire(err error) error {
	if err == nil {
		return nil
	}
	var je *jsonrpc2.Error
	if errors.As(err, &je) {
		e := &Error{Code: Code(je.Code), Message: je.Message}
		if je.Data != nil {
			e.Data = append(json.RawMessage(nil), (*je.Data)...)
		}
		return e
	}
	if errors.Is(err, jsonrpc2.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrConnectionLost, err)
	}
	return err
}

func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage] + "…"
}
