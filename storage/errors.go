package storage

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by a Store wraps exactly one of these (through *OpError),
// so callers classify with errors.Is and never by message text.
var (
	// ErrNotFound: the object (or bucket) does not exist.
	ErrNotFound = errors.New("storage: not found")

	// ErrExists: a put-if-absent found the key already present (HTTP 412 on S3, EEXIST locally).
	ErrExists = errors.New("storage: object already exists")

	// ErrPreconditionFailed is ErrExists under the name S3 gives it; both names are one sentinel.
	ErrPreconditionFailed = ErrExists

	// ErrUnavailable: the store could not be reached or did not answer in time (connection
	// refused, reset, timeout, DNS failure, 5xx/SlowDown, cancelled context). The outcome of a
	// write that fails with ErrUnavailable is unknown: it may or may not have happened.
	ErrUnavailable = errors.New("storage: store unavailable")

	// ErrCorrupt: bytes were read but do not decode (bad magic, checksum, truncated object).
	// Decoders in sub-packages wrap it too.
	ErrCorrupt = errors.New("storage: corrupt data")

	// ErrPermission: the store refused the credentials or the operation.
	ErrPermission = errors.New("storage: permission denied")

	// ErrInvalidKey: an object key is empty, absolute, or escapes the store root.
	ErrInvalidKey = errors.New("storage: invalid key")

	// ErrRejected: the store understood the request and refused it as invalid (an S3 4xx
	// other than the ones above, e.g. EntityTooLarge).
	ErrRejected = errors.New("storage: request rejected")

	// ErrInvalidConfig: a StoreConfig is incomplete or inconsistent.
	ErrInvalidConfig = errors.New("storage: invalid configuration")

	// ErrTooLarge: an object is larger than the bound its reader set (ReadAll). At most one
	// byte past the bound was read.
	ErrTooLarge = errors.New("storage: object exceeds the read bound")

	// ErrSymlink: in a local store, the key's path (a directory on the way or the object itself)
	// is a symbolic link. A local store never follows one, for reads, writes or deletes.
	ErrSymlink = errors.New("storage: symbolic link in a local store")

	// ErrNotRegular: in a local store, the key names a device, FIFO, socket or other file that
	// is not a regular file. It is neither opened nor replaced nor deleted.
	ErrNotRegular = errors.New("storage: not a regular file")
)

// OpError describes a failed store operation. Kind is one of the sentinels above; Err is the
// underlying cause (an *os.PathError, a minio.ErrorResponse, a net error, context.Canceled...).
// errors.Is matches both.
type OpError struct {
	Op   string // "put", "put-if-absent", "get", "stat", "list", "delete"
	Key  string // object key, or prefix for list
	Kind error  // one of the package sentinels
	Err  error  // underlying cause; may be nil
}

func (e *OpError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("storage %s %q: %v", e.Op, e.Key, e.Kind)
	}
	return fmt.Sprintf("storage %s %q: %v: %v", e.Op, e.Key, e.Kind, e.Err)
}

// Unwrap exposes both the sentinel and the cause to errors.Is / errors.As.
func (e *OpError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

func opErr(op, key string, kind, cause error) error {
	return &OpError{Op: op, Key: key, Kind: kind, Err: cause}
}
