package dataset

import (
	"errors"
	"fmt"

	"github.com/cba1309c/steward/storage"
)

// Sentinels. Every error this package returns wraps one of these or a storage sentinel, so
// NativeCode (and callers) classify with errors.Is.
var (
	// ErrInvalidArgument: a request is malformed (unknown index type, empty name, bad params).
	ErrInvalidArgument = errors.New("dataset: invalid argument")
	// ErrSchemaMismatch: a column is missing or has another type than required.
	ErrSchemaMismatch = errors.New("dataset: schema mismatch")
	// ErrAmbiguousName: a case-folded index name matches more than one stored index.
	ErrAmbiguousName = errors.New("dataset: ambiguous index name")
	// ErrIndexExists: CREATE of an index whose (case-folded) name is already taken.
	ErrIndexExists = errors.New("dataset: index already exists")
	// ErrIndexNotFound: DROP (without IF EXISTS) or a query named an index that does not exist.
	ErrIndexNotFound = errors.New("dataset: index not found")
	// ErrDatasetNotFound: no manifest exists under the prefix. Wraps storage.ErrNotFound.
	ErrDatasetNotFound = fmt.Errorf("dataset: dataset not found: %w", storage.ErrNotFound)
	// ErrDatasetExists: Create found version 1 already written.
	ErrDatasetExists = errors.New("dataset: dataset already exists")
	// ErrVersionNotFound: the requested version has no manifest. Wraps storage.ErrNotFound.
	ErrVersionNotFound = fmt.Errorf("dataset: version not found: %w", storage.ErrNotFound)
	// ErrCommitConflict: another writer took the commit slot; see *CommitConflictError.
	ErrCommitConflict = errors.New("dataset: commit conflict")
	// ErrMissingFragment: a manifest names a data fragment that is not in the store.
	ErrMissingFragment = errors.New("dataset: missing fragment")
	// ErrNotSupported: a valid request this engine does not implement (multi-column index,
	// a newer manifest format).
	ErrNotSupported = errors.New("dataset: not supported")
	// ErrUploadRefused: the custody hook refused an upload; the hook's error is wrapped too.
	ErrUploadRefused = errors.New("dataset: upload refused by custody hook")
	// ErrIndexBuild: an index build failed for a reason other than I/O (e.g. too many distinct
	// keys for BITMAP).
	ErrIndexBuild = errors.New("dataset: index build failed")
)

// CommitConflictError: the slot Attempted was taken. Latest is the newest version observed
// afterwards (at least Attempted).
type CommitConflictError struct {
	Attempted int64
	Latest    int64
}

func (e *CommitConflictError) Error() string {
	return fmt.Sprintf("dataset: commit conflict: version %d already exists (latest observed %d)", e.Attempted, e.Latest)
}

func (e *CommitConflictError) Unwrap() error { return ErrCommitConflict }

// SchemaError names the field that breaks a schema contract. Got is "" when the field is missing.
type SchemaError struct {
	Field string
	Want  FieldType
	Got   FieldType
}

func (e *SchemaError) Error() string {
	if e.Got == "" {
		return fmt.Sprintf("dataset: schema mismatch: field %q (%s) not found", e.Field, e.Want)
	}
	return fmt.Sprintf("dataset: schema mismatch: field %q is %s, want %s", e.Field, e.Got, e.Want)
}

func (e *SchemaError) Unwrap() error { return ErrSchemaMismatch }

// AmbiguousNameError lists the stored spellings a name matched.
type AmbiguousNameError struct {
	Name    string
	Matches []string
}

func (e *AmbiguousNameError) Error() string {
	return fmt.Sprintf("dataset: index name %q matches %d indices %q", e.Name, len(e.Matches), e.Matches)
}

func (e *AmbiguousNameError) Unwrap() error { return ErrAmbiguousName }

// CorruptError: an object of the dataset does not decode. It wraps storage.ErrCorrupt.
type CorruptError struct {
	Key    string // object key relative to the dataset
	Reason string
	Err    error // cause, may be nil
}

func (e *CorruptError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("dataset: corrupt %s: %s: %v", e.Key, e.Reason, e.Err)
	}
	return fmt.Sprintf("dataset: corrupt %s: %s", e.Key, e.Reason)
}

func (e *CorruptError) Unwrap() []error {
	if e.Err != nil {
		return []error{storage.ErrCorrupt, e.Err}
	}
	return []error{storage.ErrCorrupt}
}

// FragmentError: a data fragment could not be read.
type FragmentError struct {
	FragmentID uint64
	Path       string
	Err        error
}

func (e *FragmentError) Error() string {
	return fmt.Sprintf("dataset: fragment %d (%s): %v", e.FragmentID, e.Path, e.Err)
}

func (e *FragmentError) Unwrap() []error {
	if errors.Is(e.Err, storage.ErrNotFound) {
		return []error{ErrMissingFragment, e.Err}
	}
	return []error{e.Err}
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// isStorageErr reports whether err already carries a storage classification.
func isStorageErr(err error) bool {
	for _, s := range []error{storage.ErrNotFound, storage.ErrUnavailable, storage.ErrCorrupt,
		storage.ErrPermission, storage.ErrInvalidKey, storage.ErrRejected, storage.ErrTooLarge,
		storage.ErrSymlink, storage.ErrNotRegular} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
