package boltfile

import (
	"errors"
	"fmt"
)

// Sentinels. Every error of Open, Check, Snapshot and Quarantine that is about the file itself
// wraps one of these; I/O and permission errors are returned as the os package reports them.
var (
	// ErrCorrupt: the file exists but is not a sound bbolt file (empty, truncated, bad meta pages,
	// a page bbolt cannot read). It comes inside a *CorruptError naming the file. Nothing in the
	// file was changed.
	ErrCorrupt = errors.New("bbolt file is corrupt")

	// ErrNotCorrupt: Quarantine found nothing wrong with the files it was given, and moved none.
	ErrNotCorrupt = errors.New("bbolt file is not corrupt")

	// ErrInUse: another process has the file open (a bbolt handle holds its flock), so it cannot
	// be quarantined.
	ErrInUse = errors.New("bbolt file is in use by another process")

	// ErrBusy: Snapshot could not copy a consistent state because the file was committed to
	// during every attempt.
	ErrBusy = errors.New("bbolt file changed during every snapshot attempt")

	// ErrUnsupported: the operation needs flock, which this platform lacks.
	ErrUnsupported = errors.New("boltfile: unsupported on this platform")
)

// CorruptError names a corrupt file and says what is wrong with it.
type CorruptError struct {
	Path string // the file
	Err  error  // what is wrong: a bbolt error, a size mismatch, or what a read of a page hit
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("corrupt bbolt file %s: %v", e.Path, e.Err)
}

// Unwrap exposes ErrCorrupt and the cause to errors.Is.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

func corrupt(path string, format string, args ...any) error {
	return &CorruptError{Path: path, Err: fmt.Errorf(format, args...)}
}
