package index

import (
	"errors"
	"fmt"

	"github.com/cba1309c/steward/storage"
)

var (
	// ErrCorruptSegment: a segment does not decode. It wraps storage.ErrCorrupt.
	ErrCorruptSegment = fmt.Errorf("index: corrupt segment: %w", storage.ErrCorrupt)
	// ErrKeyType: a segment holds keys of another type than the caller asked for.
	ErrKeyType = errors.New("index: key type mismatch")
	// ErrUnsorted: a writer was fed keys out of order (a bug in the caller).
	ErrUnsorted = errors.New("index: keys not in order")
	// ErrTooLarge: a writer would write a page, bitmap or lookup table larger than readers
	// accept (256 MiB); nothing readable could come of it.
	ErrTooLarge = errors.New("index: segment part too large")
	// ErrRetiredFormat: a segment of a format no release of steward wrote (formats 1 and 3,
	// and format 2 with string keys: development builds before 2026-12-06), no longer read.
	// It wraps ErrCorruptSegment too: the reader cannot decode it. Fix: rebuild the index.
	ErrRetiredFormat = errors.New("index: retired segment format")
)

// CorruptError tells where a segment stopped making sense.
type CorruptError struct {
	Segment string // "btree" or "bitmap"
	Offset  int64  // byte offset of the bad part, -1 if not applicable
	Reason  string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("index: corrupt %s segment at offset %d: %s", e.Segment, e.Offset, e.Reason)
}

func (e *CorruptError) Unwrap() error { return ErrCorruptSegment }

func corrupt(seg string, off int64, format string, args ...any) error {
	return &CorruptError{Segment: seg, Offset: off, Reason: fmt.Sprintf(format, args...)}
}

// retiredError is a segment of a retired format (ErrRetiredFormat).
type retiredError struct{ magic string }

func (e *retiredError) Error() string {
	return fmt.Sprintf("index: BTREE segment format %s was written only by development builds of steward and is no longer read: rebuild the index (DROP it, then CREATE it)", e.magic)
}

func (e *retiredError) Unwrap() []error { return []error{ErrRetiredFormat, ErrCorruptSegment} }
