package worker

import (
	"fmt"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/cba1309c/steward/storage/dataset"
)

// The wire (rpc) and the engine (storage/dataset) name the same things with separate types, and
// neither leaf may import the other. These functions are the one translation between them: an
// explicit table each, never a string cast, so a value one side adds without the other is an
// error here and not a silently different meaning.

var mutateOps = map[string]dataset.MutateOp{
	rpc.OpCreate:  dataset.MutateCreate,
	rpc.OpReplace: dataset.MutateReplace,
	rpc.OpDrop:    dataset.MutateDrop,
}

var indexTypes = map[string]dataset.IndexType{
	rpc.IndexBTree:  dataset.BTree,
	rpc.IndexBitmap: dataset.Bitmap,
}

var fieldTypes = map[string]dataset.FieldType{
	rpc.FieldInt64:   dataset.Int64,
	rpc.FieldFloat64: dataset.Float64,
	rpc.FieldString:  dataset.String,
}

// nativeCodes pairs each wire native code with the engine's: the same lance-c numbering.
var nativeCodes = map[int]int{
	rpc.NativeOK:              dataset.CodeOK,
	rpc.NativeInvalidArgument: dataset.CodeInvalidArgument,
	rpc.NativeIO:              dataset.CodeIO,
	rpc.NativeNotFound:        dataset.CodeNotFound,
	rpc.NativeAlreadyExists:   dataset.CodeAlreadyExists,
	rpc.NativeIndex:           dataset.CodeIndex,
	rpc.NativeInternal:        dataset.CodeInternal,
	rpc.NativeNotSupported:    dataset.CodeNotSupported,
	rpc.NativeCommitConflict:  dataset.CodeCommitConflict,
}

func mutateOp(op string) (dataset.MutateOp, error) {
	if v, ok := mutateOps[op]; ok {
		return v, nil
	}
	return "", fmt.Errorf("op %q has no engine operation", op)
}

func indexType(t string) (dataset.IndexType, error) {
	if v, ok := indexTypes[t]; ok {
		return v, nil
	}
	return "", fmt.Errorf("index type %q has no engine index", t)
}

func fieldType(t string) (dataset.FieldType, error) {
	if v, ok := fieldTypes[t]; ok {
		return v, nil
	}
	return "", fmt.Errorf("field type %q has no engine type", t)
}

// mutateSpec translates the request's index mutation for the engine. A DROP carries no type.
func mutateSpec(req *workerproto.MutateRequest) (dataset.MutateSpec, error) {
	op, err := mutateOp(req.Op)
	if err != nil {
		return dataset.MutateSpec{}, err
	}
	spec := dataset.MutateSpec{Op: op, Name: req.Index.Name, Columns: req.Index.Columns, Params: req.Index.Params,
		IfNotExists: req.IfNotExists, IfExists: req.IfExists}
	if req.Index.Type != "" {
		if spec.Type, err = indexType(req.Index.Type); err != nil {
			return dataset.MutateSpec{}, err
		}
	}
	return spec, nil
}

// wireNative returns the wire native code of an engine code (INTERNAL for one the table lacks,
// which TestNativeCodeTable rules out).
func wireNative(engine int) int {
	for wire, e := range nativeCodes {
		if e == engine {
			return wire
		}
	}
	return rpc.NativeInternal
}
