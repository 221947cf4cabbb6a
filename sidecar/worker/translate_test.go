package worker

import (
	"testing"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/cba1309c/steward/storage/dataset"
)

// TestNativeCodeTable ties the two copies of the lance-c numbering: every wire native code has
// exactly one engine code of the same number, and back.
func TestNativeCodeTable(t *testing.T) {
	if len(nativeCodes) != 9 {
		t.Fatalf("%d native codes paired, want 9 (0-8)", len(nativeCodes))
	}
	seen := map[int]bool{}
	for wire, engine := range nativeCodes {
		if wire != engine {
			t.Errorf("wire native code %d is engine code %d", wire, engine)
		}
		if seen[engine] {
			t.Errorf("engine code %d paired twice", engine)
		}
		seen[engine] = true
		if got := wireNative(engine); got != wire {
			t.Errorf("wireNative(%d) = %d", engine, got)
		}
	}
}

// TestTranslationTables: every value the wire validates has an engine counterpart, and an
// unknown one is an error rather than a cast.
func TestTranslationTables(t *testing.T) {
	for _, op := range []string{rpc.OpCreate, rpc.OpReplace, rpc.OpDrop} {
		if _, err := mutateOp(op); err != nil {
			t.Error(err)
		}
	}
	for _, typ := range []string{rpc.IndexBTree, rpc.IndexBitmap} {
		if _, err := indexType(typ); err != nil {
			t.Error(err)
		}
	}
	for _, f := range []string{rpc.FieldInt64, rpc.FieldFloat64, rpc.FieldString} {
		if _, err := fieldType(f); err != nil {
			t.Error(err)
		}
	}
	if _, err := mutateOp("TRUNCATE"); err == nil {
		t.Error("unknown op translated")
	}
	if _, err := indexType("btree"); err == nil {
		t.Error("a misspelled index type translated")
	}
	if _, err := fieldType("int32"); err == nil {
		t.Error("unknown field type translated")
	}
	spec, err := mutateSpec(&workerproto.MutateRequest{Op: rpc.OpDrop, Index: rpc.IndexSpec{Name: "ix"}})
	if err != nil || spec.Op != dataset.MutateDrop || spec.Type != "" {
		t.Errorf("DROP spec %+v %v", spec, err)
	}
}
