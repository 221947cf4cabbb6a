package sidecar

import (
	"errors"
	"testing"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

func TestParseEngineFlag(t *testing.T) {
	for _, tc := range []struct {
		name, flag string
		ok         bool
		argv       int
	}{
		{"command and args", "lance=/opt/py -B  -s /x/engine.py", true, 4},
		{"command only", "e2=/bin/true", true, 1},
		{"no equals", "lance", false, 0},
		{"relative command", "lance=python3 engine.py", false, 0},
		{"builtin is taken", "builtin=/bin/true", false, 0},
		{"bad name", "Lance=/bin/true", false, 0},
		{"empty command", "lance=", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := ParseEngineFlag(tc.flag)
			if (err == nil) != tc.ok || (tc.ok && len(spec.Argv) != tc.argv) {
				t.Errorf("%q: %+v %v", tc.flag, spec, err)
			}
		})
	}
}

func TestAdmitEngine(t *testing.T) {
	s := &Server{engines: map[string]*engine{
		workerproto.BuiltinName: {name: workerproto.BuiltinName, decl: workerproto.Builtin()},
		"lance":                 {name: "lance", argv: []string{"/x"}, decl: workerproto.Engine{Protocol: 1, IndexTypes: []string{"BTREE", "IVF_PQ"}, Settle: workerproto.SettleClaimFence}},
	}, engineOrder: []string{workerproto.BuiltinName, "lance"}}
	for _, tc := range []struct {
		name, engine, op, typ string
		want                  string // registered name, or "" for -32602
	}{
		{"default builtin", "", rpc.OpCreate, "BTREE", "builtin"},
		{"builtin refuses IVF_PQ", "", rpc.OpCreate, "IVF_PQ", ""},
		{"lance builds IVF_PQ", "lance", rpc.OpCreate, "IVF_PQ", "lance"},
		{"lance refuses BITMAP it did not declare", "lance", rpc.OpReplace, "BITMAP", ""},
		{"drop has no type", "lance", rpc.OpDrop, "", "lance"},
		{"unknown engine", "nope", rpc.OpDrop, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := s.admitEngine(&rpc.MutateParams{Engine: tc.engine, Op: tc.op, Index: rpc.IndexSpec{Type: tc.typ}})
			switch {
			case tc.want == "" && !errors.Is(err, rpc.ErrInvalidParams):
				t.Errorf("want invalid params, got %v", err)
			case tc.want != "" && (err != nil || e.name != tc.want):
				t.Errorf("want %s, got %v %v", tc.want, e, err)
			}
		})
	}
}
