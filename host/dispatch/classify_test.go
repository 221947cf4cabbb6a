package dispatch

import (
	"context"
	"fmt"
	"testing"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/rpc"
	"github.com/sourcegraph/jsonrpc2"
)

func TestClassify(t *testing.T) {
	native := func(code int) rpc.MutateResult { return rpc.MutateResult{Phase: rpc.PhaseNativeReturn, Code: code} }
	for _, tc := range []struct {
		name string
		op   string
		res  rpc.MutateResult
		err  error
		want Outcome
	}{
		{"refused at receive: unfundable", rpc.OpCreate, rpc.MutateResult{}, rpc.FromWire(&jsonrpc2.Error{Code: int64(rpc.CodeDeadlineUnfundable)}), Outcome{StateNotCommitted, true}},
		{"refused at receive: overloaded, wrapped", rpc.OpCreate, rpc.MutateResult{}, fmt.Errorf("x: %w", rpc.FromWire(&jsonrpc2.Error{Code: int64(rpc.CodeOverloaded)})), Outcome{StateNotCommitted, true}},
		{"pre-invocation rejected", rpc.OpCreate, rpc.MutateResult{Phase: rpc.PhasePreInvocationRejected, Code: rpc.ReasonSchemaMismatch}, nil, Outcome{StateNotCommitted, true}},
		{"native OK", rpc.OpCreate, native(rpc.NativeOK), nil, Outcome{StateCommitted, true}},
		{"native commit conflict", rpc.OpReplace, native(rpc.NativeCommitConflict), nil, Outcome{StateNotCommitted, true}},
		{"native not found on DROP", rpc.OpDrop, native(rpc.NativeNotFound), nil, Outcome{StateNotCommitted, true}},
		{"native not found on CREATE", rpc.OpCreate, native(rpc.NativeNotFound), nil, Outcome{StateUnknown, true}},
		{"native not found on OPTIMIZE", rpc.OpOptimize, native(rpc.NativeNotFound), nil, Outcome{StateNotCommitted, true}},
		{"native already exists", rpc.OpCreate, native(rpc.NativeAlreadyExists), nil, Outcome{StateUnknown, true}},
		{"native IO", rpc.OpCreate, native(rpc.NativeIO), nil, Outcome{StateUnknown, true}},
		{"indeterminate", rpc.OpCreate, rpc.MutateResult{Phase: rpc.PhaseIndeterminate, Code: rpc.ReasonWorkerLost}, nil, Outcome{StateUnknown, true}},
		{"unknown phase", rpc.OpCreate, rpc.MutateResult{Phase: "FUTURE", Code: 0}, nil, Outcome{StateUnknown, false}},
		{"identity mismatch", rpc.OpCreate, native(rpc.NativeOK), fmt.Errorf("%w: other invocation", host.ErrIdentity), Outcome{StateUnknown, false}},
		{"connection lost", rpc.OpCreate, rpc.MutateResult{}, rpc.FromWire(jsonrpc2.ErrClosed), Outcome{StateUnknown, false}},
		{"context deadline", rpc.OpCreate, rpc.MutateResult{}, context.DeadlineExceeded, Outcome{StateUnknown, false}},
		{"context canceled", rpc.OpCreate, rpc.MutateResult{}, context.Canceled, Outcome{StateUnknown, false}},
		{"bare sentinel is not a received error", rpc.OpCreate, rpc.MutateResult{}, rpc.ErrOverloaded, Outcome{StateUnknown, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.op, tc.res, tc.err); got != tc.want {
				t.Fatalf("Classify = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestFoldName(t *testing.T) {
	for _, tc := range []struct{ a, b string }{{"Idx", "IDX"}, {"idx_ſ", "IDX_S"}, {"K", "k"}} {
		if FoldName(tc.a) != FoldName(tc.b) {
			t.Errorf("FoldName(%q)=%q != FoldName(%q)=%q", tc.a, FoldName(tc.a), tc.b, FoldName(tc.b))
		}
	}
	if FoldName("a") == FoldName("b") {
		t.Error("distinct names fold together")
	}
}

// helloSidecar is a Sidecar with a hello listing engines.
type helloSidecar struct {
	Sidecar
	hello rpc.HelloResult
}

func (h helloSidecar) Info() rpc.HelloResult { return h.hello }

// TestSettleGuarantee: UNKNOWN is settled through index.resolve only for an engine whose hello
// declares a fence; none, an engine the sidecar does not list, or a guarantee this host does not
// know leave it for a person.
func TestSettleGuarantee(t *testing.T) {
	sc := helloSidecar{hello: rpc.HelloResult{Engines: []rpc.EngineInfo{
		{Name: "builtin", Settle: rpc.SettleFence}, {Name: "lance", Settle: rpc.SettleClaimFence},
		{Name: "loose", Settle: rpc.SettleNone}, {Name: "future", Settle: "quorum"}}}}
	for _, tc := range []struct {
		engine     string
		resolvable bool
	}{
		{"", true}, {"builtin", true}, {"lance", true}, {"loose", false}, {"future", false}, {"absent", false},
	} {
		if got := Resolvable(SettleGuarantee(sc, tc.engine)); got != tc.resolvable {
			t.Errorf("engine %q: resolvable %v, want %v", tc.engine, got, tc.resolvable)
		}
	}
	old := helloSidecar{} // a sidecar from before engines lists none: its built-in engine fences
	if !Resolvable(SettleGuarantee(old, "")) || Resolvable(SettleGuarantee(old, "lance")) {
		t.Error("a sidecar without engines in its hello")
	}
}
