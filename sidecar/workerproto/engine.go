package workerproto

import (
	"fmt"
	"slices"

	"github.com/cba1309c/steward/rpc"
)

// BuiltinName is the registered name of the built-in Go engine; no other engine may take it.
const BuiltinName = "builtin"

// Builtin is the built-in engine's declaration: the one its worker says in hello, and the one the
// sidecar lists for it (the sidecar never links the worker, so the declaration lives here).
func Builtin() Engine {
	return Engine{Name: BuiltinName, Protocol: Protocol, IndexTypes: []string{rpc.IndexBTree, rpc.IndexBitmap}, Settle: SettleFence,
		Faults: slices.Clone(Faults)}
}

// MaxIndexTypes bounds the index types one engine declares.
const MaxIndexTypes = 64

// ValidEngineName reports whether s can name a registered engine: 1-32 of [a-z0-9_-].
func ValidEngineName(s string) bool {
	if len(s) < 1 || len(s) > 32 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validIndexType: 1-32 of [A-Z0-9_], the spelling index.type uses on the wire.
func validIndexType(s string) bool {
	if len(s) < 1 || len(s) > 32 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Check reports why a declaration cannot be registered: another protocol version, an unknown
// settle guarantee, no or malformed index types. The sidecar unregisters such an engine.
// settle is optional: the sidecar decides every engine's outcomes from its gateway's record and
// storage (docs/ENGINE.md §4.3), so a declared guarantee is checked for form only.
func (e *Engine) Check() error {
	if e.Protocol != Protocol {
		return fmt.Errorf("%w: engine speaks protocol %d, the sidecar %d", ErrMalformed, e.Protocol, Protocol)
	}
	switch e.Settle {
	case "", SettleFence, SettleClaimFence, SettleNone:
	default:
		return fmt.Errorf("%w: settle guarantee %q (want fence, claim-fence or none)", ErrMalformed, e.Settle)
	}
	if len(e.IndexTypes) == 0 || len(e.IndexTypes) > MaxIndexTypes {
		return fmt.Errorf("%w: %d index types declared (want 1-%d)", ErrMalformed, len(e.IndexTypes), MaxIndexTypes)
	}
	for _, t := range e.IndexTypes {
		if !validIndexType(t) {
			return fmt.Errorf("%w: index type %q (want 1-32 of [A-Z0-9_])", ErrMalformed, t)
		}
	}
	if len(e.Name) > 64 {
		return fmt.Errorf("%w: engine name of %d bytes", ErrMalformed, len(e.Name))
	}
	return nil
}

// Builds reports whether the engine declared index type t.
func (e *Engine) Builds(t string) bool { return slices.Contains(e.IndexTypes, t) }
