package dispatch

import (
	"errors"
	"fmt"
)

// Sentinels of the dispatcher. Admission rejections wrap one of the first five; nothing was
// stored when Submit returns an error.
var (
	// ErrDisabled means admission is switched off (Config.Disabled or SetEnabled(false)).
	ErrDisabled = errors.New("dispatch: admission disabled")
	// ErrNameBusy means another job holds the slot of the same dataset and index name (compared
	// case-folded): at most one mutation per name may be live.
	ErrNameBusy = errors.New("dispatch: a live job holds this dataset and index name")
	// ErrDatasetQuota means the dataset already has Config.MaxUnresolvedPerDataset unresolved jobs.
	ErrDatasetQuota = errors.New("dispatch: unresolved jobs per dataset at quota")
	// ErrTotalQuota means the store already holds Config.MaxUnresolved unresolved jobs.
	ErrTotalQuota = errors.New("dispatch: unresolved jobs in total at quota")
	// ErrInvalidJob means the request cannot become a valid index.mutate call.
	ErrInvalidJob = errors.New("dispatch: invalid job")
	// ErrNoSidecar means no live sidecar can plan or serve a segmented job's call.
	ErrNoSidecar = errors.New("dispatch: no live sidecar can serve this")
	// ErrJobExists means a job with the requested id is already stored.
	ErrJobExists = errors.New("dispatch: job id already exists")

	// ErrNotFound means no job has the given id.
	ErrNotFound = errors.New("dispatch: job not found")
	// ErrNotReleasable means force-release was asked for a job that is not an unreleased UNKNOWN.
	ErrNotReleasable = errors.New("dispatch: only an UNKNOWN job that still holds its slot or awaits resolution can be force-released")
	// ErrClosed means the dispatcher (or its store) is closed.
	ErrClosed = errors.New("dispatch: closed")
	// ErrStoreLocked means another process (a running dispatcher) holds the store file: writes
	// (OpenBolt, QuarantineStore) need it; reads can open a Snapshot.
	ErrStoreLocked = errors.New("dispatch: store file is locked by another process (a running dispatcher)")
	// ErrCorrupt means the store file, or a record in it, is corrupt. OpenBolt returns it inside a
	// *CorruptError naming the file; a record that does not decode fails only reads of that job.
	ErrCorrupt = errors.New("dispatch: corrupt job store")
	// ErrNotCorrupt means QuarantineStore was asked to move a sound store file; nothing moved.
	ErrNotCorrupt = errors.New("dispatch: store file is not corrupt")
)

// CorruptError names a store file OpenBolt refuses: empty (a store truncated to 0 bytes is never
// taken for a new one), truncated or damaged so that bbolt cannot read it. The file is unchanged.
type CorruptError struct {
	Path string // the store file
	Err  error  // what is wrong with it
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("dispatch: store %s is corrupt: %v", e.Path, e.Err)
}

// Unwrap exposes ErrCorrupt and the cause to errors.Is.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// Sentinels of the stores.
var (
	// ErrReadOnly means a write was attempted in View (or on a snapshot).
	ErrReadOnly = errors.New("dispatch: read-only transaction")
	// ErrFormat means a stored record carries a format version this build does not read.
	ErrFormat = errors.New("dispatch: unknown record format")
	// ErrConflict means an optimistic Update kept conflicting with other writers and gave up.
	ErrConflict = errors.New("dispatch: transaction kept conflicting")
	// ErrClaimLost means a store refused to journal a send because its node no longer holds the
	// claim the send was journaled under (its lease expired): nothing was written, nothing sent.
	ErrClaimLost = errors.New("dispatch: node claim lost; send not journaled")
	// ErrNodeClaimed means another live process holds the node name OpenEtcd was asked for.
	ErrNodeClaimed = errors.New("dispatch: node name held by another live process")
)

// ErrInvalidConfig means a Config or a sidecar registration is unusable.
var ErrInvalidConfig = errors.New("dispatch: invalid config")

// ErrAuditRequired means a force-release named no operator or no reason.
var ErrAuditRequired = errors.New("dispatch: force-release needs who and why")
