package ledger

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by the ledger wraps one of these (or a storage
// sentinel, for a sweep that could not read its store), so callers classify with errors.Is.
var (
	// ErrCapacity: the reservation would take the ledger past its capacity. Nothing was
	// reserved; the caller must not upload. Work already owned is unaffected.
	ErrCapacity = errors.New("ledger: capacity exhausted")

	// ErrQuota: the reservation would take its owner past the quota it was reserved under
	// (ReserveWithin). Nothing was reserved; the owner's other tickets are unaffected.
	ErrQuota = errors.New("ledger: owner's ticket quota exhausted")

	// ErrNameOwned: another owner (or the cleanup worker) holds a ticket for the name.
	// Nothing was reserved.
	ErrNameOwned = errors.New("ledger: name owned by another owner")

	// ErrNotOwned: the caller asked to accept, abandon or transfer a name it does not hold.
	// Nothing changed.
	ErrNotOwned = errors.New("ledger: name not owned by this owner")

	// ErrSeqConflict: a transfer reused a sequence number for another name, or offered one at
	// or below what the receiver already acknowledged. Nothing changed.
	ErrSeqConflict = errors.New("ledger: transfer sequence conflict")

	// ErrInvalid: a malformed argument (empty owner id, invalid object key, store name with a
	// NUL byte, zero sequence number).
	ErrInvalid = errors.New("ledger: invalid argument")

	// ErrJournal: the durable journal could not record the change. For a reservation nothing
	// was reserved; the caller must not upload.
	ErrJournal = errors.New("ledger: journal write failed")

	// ErrCorrupt: the journal file, or a record in it, is corrupt. Open returns it inside a
	// *CorruptError that names the file; nothing was loaded and nothing in the file changed.
	ErrCorrupt = errors.New("ledger: corrupt journal")

	// ErrNotDataset: a sweep was asked for a prefix without a readable manifest chain (no
	// manifest, or one that cannot be read or decoded). Nothing was deleted.
	ErrNotDataset = errors.New("ledger: sweep prefix is not a dataset")

	// ErrClosed: the ledger was closed.
	ErrClosed = errors.New("ledger: closed")
)

// KeyError names the object a reservation, accept, abandon or transfer failed on.
type KeyError struct {
	Op    string // "reserve", "accept", "abandon", "transfer"
	Store string // store name
	Key   string // object key
	Err   error  // one of the sentinels above
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("ledger %s %s:%q: %v", e.Op, e.Store, e.Key, e.Err)
}

// Unwrap exposes the sentinel to errors.Is.
func (e *KeyError) Unwrap() error { return e.Err }

func keyErr(op, store, key string, err error) error {
	return &KeyError{Op: op, Store: store, Key: key, Err: err}
}

// CorruptError names a journal file Open refuses: empty (a journal truncated to 0 bytes is never
// taken for a new one), truncated, damaged so that bbolt cannot read it, or holding a record that
// does not decode. The way out is an explicit operator action that moves the file aside (the
// sidecar's "steward ledger quarantine"), accepting that the custody it recorded is lost.
type CorruptError struct {
	Path string // the journal file
	Err  error  // what is wrong with it
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("ledger: journal %s is corrupt: %v", e.Path, e.Err)
}

// Unwrap exposes ErrCorrupt and the cause to errors.Is.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }
