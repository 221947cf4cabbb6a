package rpc

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Owner kinds on the wire. Hosts own names as host transactions; invocation owners are the
// sidecar's own (a worker's uploads) and may only be inspected with objects.status.
const (
	OwnerHostTxn    = "host_txn"
	OwnerInvocation = "invocation"
)

// Bounds of the objects.* methods.
const (
	// MaxObjectKeys is the most object keys (or transfer items) in one call.
	MaxObjectKeys = 1000
	// MaxObjectKeyLen is the longest object key, in bytes (the S3 limit).
	MaxObjectKeyLen = 1024
	// MaxTransferSeq is the largest transfer sequence number: 2^53-1, exact in every JSON reader.
	MaxTransferSeq = 1<<53 - 1
	// MaxStatusTickets is the most tickets objects.status lists.
	MaxStatusTickets = 1000
	// MaxSafetyAgeMs is the longest distinct objects.sweep safety age, in ms (about 292 years,
	// the range of a Go time.Duration). A larger safety_age_ms means the same: nothing is ever
	// old enough to sweep.
	MaxSafetyAgeMs = math.MaxInt64 / int64(time.Millisecond)
)

// ObjectOwner names the owner of object tickets.
type ObjectOwner struct {
	// Kind is "host_txn" (objects.status also accepts "invocation").
	Kind string `json:"kind"`
	// ID is the transaction (or invocation) id: 1-128 characters of [A-Za-z0-9._:-].
	ID string `json:"id"`
}

func (o ObjectOwner) validate(field string, inspect bool) error {
	switch {
	case o.Kind == OwnerHostTxn:
	case o.Kind == OwnerInvocation && inspect:
	case inspect:
		return fmt.Errorf("%s.kind %q: want %q or %q", field, o.Kind, OwnerHostTxn, OwnerInvocation)
	default:
		return fmt.Errorf("%s.kind %q: want %q", field, o.Kind, OwnerHostTxn)
	}
	if !ValidID(o.ID) {
		return fmt.Errorf("%s.id must be 1-128 characters of [A-Za-z0-9._:-]", field)
	}
	return nil
}

func validateKeys(keys []string) error {
	if len(keys) > MaxObjectKeys {
		return fmt.Errorf("%d keys, at most %d per call", len(keys), MaxObjectKeys)
	}
	for i, k := range keys {
		if err := validateKey(k); err != nil {
			return fmt.Errorf("keys[%d]: %w", i, err)
		}
	}
	return nil
}

func validateKey(k string) error {
	if k == "" || len(k) > MaxObjectKeyLen {
		return fmt.Errorf("key must be 1-%d bytes", MaxObjectKeyLen)
	}
	if strings.IndexByte(k, 0) >= 0 {
		return errors.New("key contains a NUL byte")
	}
	return nil
}

// ObjectsReserveParams are the params of objects.reserve: take custody of keys before uploading
// them. All or nothing.
type ObjectsReserveParams struct {
	Owner ObjectOwner `json:"owner"`
	// Store is where the objects will be uploaded; the sidecar deletes abandoned ones there with
	// its own credentials.
	Store StoreSpec `json:"store"`
	// Keys are object keys relative to the store (1-1000 of them).
	Keys []string `json:"keys"`
}

// Validate implements Validator.
func (p ObjectsReserveParams) Validate() error {
	if err := p.Owner.validate("owner", false); err != nil {
		return err
	}
	if err := p.Store.Validate(); err != nil {
		return err
	}
	if len(p.Keys) == 0 {
		return errors.New("keys must not be empty")
	}
	return validateKeys(p.Keys)
}

// ObjectsReserveResult acknowledges a reservation: the tickets are durable.
type ObjectsReserveResult struct {
	Reserved int `json:"reserved"` // keys in the call (already-held keys count again)
	Used     int `json:"used"`     // tickets in the ledger after the call
	Capacity int `json:"capacity"`
}

// ObjectsReleaseParams are the params of objects.accept and objects.abandon. Either Keys names
// the objects, or All selects every name the owner holds (in Store when given, else in every
// store): a release of everything has to be asked for explicitly.
type ObjectsReleaseParams struct {
	Owner ObjectOwner `json:"owner"`
	// Store holds the keys; required with Keys, optional with All.
	Store *StoreSpec `json:"store,omitempty"`
	Keys  []string   `json:"keys,omitempty"`
	All   bool       `json:"all,omitempty"`
}

// Validate implements Validator.
func (p ObjectsReleaseParams) Validate() error {
	if err := p.Owner.validate("owner", false); err != nil {
		return err
	}
	if p.Store != nil {
		if err := p.Store.Validate(); err != nil {
			return err
		}
	}
	switch {
	case p.All && len(p.Keys) > 0:
		return errors.New("keys and all are mutually exclusive")
	case p.All:
		return nil
	case len(p.Keys) == 0:
		return errors.New("keys must not be empty (or set all: true)")
	case p.Store == nil:
		return errors.New("store is required with keys")
	}
	return validateKeys(p.Keys)
}

// ObjectsOwnerStatus counts one owner's tickets.
type ObjectsOwnerStatus struct {
	Owner     ObjectOwner `json:"owner"`
	Held      int         `json:"held"`      // held names, including offered ones
	Offered   int         `json:"offered"`   // held names offered in a transfer not yet acknowledged
	Abandoned int         `json:"abandoned"` // names awaiting deletion
}

// ObjectsTransferItem is one name offered in a transfer.
type ObjectsTransferItem struct {
	// Seq numbers the offer within the (from, to) pair: > 0, unique, above the last
	// acknowledged number.
	Seq uint64 `json:"seq"`
	Key string `json:"key"`
}

// ObjectsTransferParams are the params of objects.transfer: offer names held by From, in Store,
// to To. The names stay From's until To acknowledges them with objects.acknowledge.
type ObjectsTransferParams struct {
	From  ObjectOwner           `json:"from"`
	To    ObjectOwner           `json:"to"`
	Store StoreSpec             `json:"store"`
	Items []ObjectsTransferItem `json:"items"`
}

// Validate implements Validator.
func (p ObjectsTransferParams) Validate() error {
	if err := validatePair(p.From, p.To); err != nil {
		return err
	}
	if err := p.Store.Validate(); err != nil {
		return err
	}
	if len(p.Items) == 0 || len(p.Items) > MaxObjectKeys {
		return fmt.Errorf("items: 1-%d per call, got %d", MaxObjectKeys, len(p.Items))
	}
	for i, it := range p.Items {
		if it.Seq == 0 || it.Seq > MaxTransferSeq {
			return fmt.Errorf("items[%d].seq must be 1..2^53-1", i)
		}
		if err := validateKey(it.Key); err != nil {
			return fmt.Errorf("items[%d]: %w", i, err)
		}
	}
	return nil
}

func validatePair(from, to ObjectOwner) error {
	if err := from.validate("from", false); err != nil {
		return err
	}
	if err := to.validate("to", false); err != nil {
		return err
	}
	if from == to {
		return errors.New("from and to are the same owner")
	}
	return nil
}

// ObjectsTransferResult acknowledges an offer: it is durable.
type ObjectsTransferResult struct {
	Offered int `json:"offered"`
}

// ObjectsAcknowledgeParams are the params of objects.acknowledge: To has received every offer
// of From up to UpTo. The ledger moves the contiguous run of offers after the last
// acknowledgement, stopping at the first number never offered.
type ObjectsAcknowledgeParams struct {
	From ObjectOwner `json:"from"`
	To   ObjectOwner `json:"to"`
	UpTo uint64      `json:"up_to"`
}

// Validate implements Validator.
func (p ObjectsAcknowledgeParams) Validate() error {
	if err := validatePair(p.From, p.To); err != nil {
		return err
	}
	if p.UpTo == 0 || p.UpTo > MaxTransferSeq {
		return errors.New("up_to must be 1..2^53-1")
	}
	return nil
}

// ObjectsAcknowledgeResult reports where the receipts stand.
type ObjectsAcknowledgeResult struct {
	// AckedUpTo is the pair's acknowledged number after the call: every offer up to it moved to To.
	AckedUpTo uint64             `json:"acked_up_to"`
	From      ObjectsOwnerStatus `json:"from"`
	To        ObjectsOwnerStatus `json:"to"`
}

// ObjectsStatusParams are the params of objects.status.
type ObjectsStatusParams struct {
	// Owner, if set, adds that owner's counts (kind "host_txn" or "invocation").
	Owner *ObjectOwner `json:"owner,omitempty"`
	// Tickets lists the owner's tickets too (at most MaxStatusTickets). Requires Owner.
	Tickets bool `json:"tickets,omitempty"`
}

// Validate implements Validator.
func (p ObjectsStatusParams) Validate() error {
	if p.Owner == nil {
		if p.Tickets {
			return errors.New("tickets requires owner")
		}
		return nil
	}
	return p.Owner.validate("owner", true)
}

// LedgerFigures are the ledger-wide counters.
type LedgerFigures struct {
	Used              int    `json:"used"`       // tickets held, in transit or awaiting deletion
	HighWater         int    `json:"high_water"` // most tickets at once since the sidecar started
	Capacity          int    `json:"capacity"`
	AdmissionFailures uint64 `json:"admission_failures"` // reservations refused for capacity
	PendingDelete     int    `json:"pending_delete"`     // abandoned names not yet deleted
	PendingRetry      int    `json:"pending_retry"`      // cleanup tasks whose last attempt failed
	OldestRetryAgeMs  int64  `json:"oldest_retry_age_ms"`
	DeleteFailures    uint64 `json:"delete_failures"` // failed delete attempts, per name
	Deleted           uint64 `json:"deleted"`         // names deleted by the cleanup worker
	Owners            int    `json:"owners"`          // owners with tickets or offers
	// Unsettled counts worker invocations whose tickets await a verdict (index.resolve, or the
	// sidecar's own recovery after a restart).
	Unsettled int `json:"unsettled"`
	// Prefixes counts the prefix tickets among Used: each owns every object under its prefix.
	Prefixes int `json:"prefixes"`
	// PrefixObjectsDeleted counts the objects deleted under abandoned prefix tickets.
	PrefixObjectsDeleted uint64 `json:"prefix_objects_deleted"`
}

// ObjectTicket is one ticket in objects.status.
type ObjectTicket struct {
	Store string `json:"store"` // the store's name: url, or url@endpoint
	Key   string `json:"key"`
	State string `json:"state"` // "held" or "abandoned"
	// OfferedTo and Seq describe a pending transfer offer.
	OfferedTo *ObjectOwner `json:"offered_to,omitempty"`
	Seq       uint64       `json:"seq,omitempty"`
}

// ObjectsStatusResult is the answer of objects.status.
type ObjectsStatusResult struct {
	Ledger    LedgerFigures       `json:"ledger"`
	Owner     *ObjectsOwnerStatus `json:"owner,omitempty"`
	Tickets   []ObjectTicket      `json:"tickets,omitempty"`
	Truncated bool                `json:"truncated,omitempty"` // more tickets than listed
}

// ObjectsSweepParams are the params of objects.sweep: find and delete the objects in a dataset's
// data and index folders that no manifest version references and no ticket owns, older than the
// safety age. A path without a readable manifest chain is refused.
type ObjectsSweepParams struct {
	Dataset DatasetRef `json:"dataset"`
	// SafetyAgeMs is the least age of an orphan; default 1 h. Values below the ledger's floor
	// (10 min) are raised to it: an upload in flight is never mistaken for an orphan. Values
	// above MaxSafetyAgeMs mean "never" (see SafetyAge).
	SafetyAgeMs int64 `json:"safety_age_ms,omitempty"`
	// DryRun reports without deleting.
	DryRun bool `json:"dry_run,omitempty"`
}

// SafetyAge is SafetyAgeMs as a Duration, saturating: past MaxSafetyAgeMs it is the longest
// Duration, which the sweep reads as "never" (a plain conversion would wrap 317 years around
// to a few minutes).
func (p ObjectsSweepParams) SafetyAge() time.Duration {
	if p.SafetyAgeMs > MaxSafetyAgeMs {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(p.SafetyAgeMs) * time.Millisecond
}

// Validate implements Validator.
func (p ObjectsSweepParams) Validate() error {
	if err := p.Dataset.Store.Validate(); err != nil {
		return err
	}
	if p.SafetyAgeMs < 0 {
		return errors.New("safety_age_ms must not be negative")
	}
	return p.Dataset.validatePath()
}

// ObjectsSweepResult reports what a sweep found and did.
type ObjectsSweepResult struct {
	Listed       int      `json:"listed"`        // objects under the dataset's data/ and _indices/
	Referenced   int      `json:"referenced"`    // of those, the ones some manifest version references
	SkippedYoung int      `json:"skipped_young"` // unreferenced but younger than the safety age
	SkippedOwned int      `json:"skipped_owned"` // unreferenced but owned by a ticket
	Deferred     int      `json:"deferred"`      // orphans not claimed: the ledger was at capacity
	Found        int      `json:"found"`         // orphans
	Deleted      int      `json:"deleted"`       // orphans deleted before the answer
	Pending      int      `json:"pending"`       // orphans still with the cleanup worker
	Bytes        int64    `json:"bytes"`         // size of the orphans found
	Orphans      []string `json:"orphans,omitempty"`
	SafetyAgeMs  int64    `json:"safety_age_ms"` // the age actually applied
	Truncated    bool     `json:"truncated,omitempty"`
}
