package dataset

import (
	"errors"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/index"
)

// Native result codes, numbered as lance-c numbers them. The worker reports one of these for
// its single native call; the rpc package maps them to wire codes.
const (
	CodeOK              = 0
	CodeInvalidArgument = 1
	CodeIO              = 2
	CodeNotFound        = 3
	CodeAlreadyExists   = 4
	CodeIndex           = 5
	CodeInternal        = 6
	CodeNotSupported    = 7
	CodeCommitConflict  = 8
)

// NativeCode classifies err into a native code. The order matters: the most specific class
// wins (a corrupt index segment is INDEX although it also wraps storage.ErrCorrupt).
func NativeCode(err error) int {
	switch {
	case err == nil:
		return CodeOK
	case errors.Is(err, ErrCommitConflict):
		return CodeCommitConflict
	case errors.Is(err, ErrNotSupported):
		return CodeNotSupported
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrSchemaMismatch),
		errors.Is(err, ErrAmbiguousName), errors.Is(err, storage.ErrInvalidKey):
		return CodeInvalidArgument
	case errors.Is(err, ErrIndexExists), errors.Is(err, ErrDatasetExists):
		return CodeAlreadyExists
	case errors.Is(err, index.ErrCorruptSegment), errors.Is(err, ErrIndexBuild), errors.Is(err, index.ErrTooLarge):
		return CodeIndex
	case errors.Is(err, ErrMissingFragment), errors.Is(err, ErrUploadRefused),
		errors.Is(err, storage.ErrCorrupt), errors.Is(err, storage.ErrUnavailable),
		errors.Is(err, storage.ErrPermission), errors.Is(err, storage.ErrExists),
		errors.Is(err, storage.ErrRejected), errors.Is(err, storage.ErrTooLarge),
		errors.Is(err, storage.ErrSymlink), errors.Is(err, storage.ErrNotRegular):
		return CodeIO
	case errors.Is(err, ErrIndexNotFound), errors.Is(err, storage.ErrNotFound):
		return CodeNotFound
	}
	return CodeInternal
}
