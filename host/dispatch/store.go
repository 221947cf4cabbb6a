package dispatch

import "context"

// Store is the durable job store: BoltStore is the embedded single-node default, EtcdStore the
// journal several host processes share. Both pass one contract suite (store_contract_test.go).
//
// Update must be atomic and serializable: admission checks the fence and the quotas and inserts
// in one Update. A store may run fn more than once (an optimistic store retries on conflict), so
// fn must have no effect outside its Tx. A store shared by several dispatchers must also refuse to
// commit a Put that journals a new send (a RUNNING record with an invocation id the stored record
// did not have) unless the writer still holds the claim recorded in it (Job.Node, Job.Claim),
// failing with ErrClaimLost: a node that lost its claim can never send.
type Store interface {
	// View runs fn in a read-only transaction. It must not write to durable storage.
	View(fn func(Tx) error) error
	// Update runs fn in a read-write transaction, committed only if fn returns nil.
	Update(fn func(Tx) error) error
	// Watch returns a channel that receives a value (coalesced) after each committed change to
	// job id, and is closed when ctx ends or the store closes. No change committed after Watch
	// returns is missed.
	Watch(ctx context.Context, id string) (<-chan struct{}, error)
	// Close releases the store.
	Close() error
}

// Cluster is implemented by a Store that several dispatchers share (EtcdStore). Each dispatcher is
// a node holding a claim (a lease); its sidecar epochs are announced under that claim, so other
// nodes see them gone when the node dies or is cut off — which proves nothing about its workers:
// a job of a vanished node is settled by index.resolve (fencing the commit slot in storage) before
// its slot is released.
type Cluster interface {
	// Node returns this store's node name and its current claim (0: none).
	Node() (name string, claim int64)
	// AnnounceEpoch registers a sidecar epoch as driven by this node, for as long as the node
	// holds its claim (re-announced under a new claim).
	AnnounceEpoch(sidecar, epoch string) error
	// EpochLive reports whether a node holding its claim still announces epoch.
	EpochLive(epoch string) (bool, error)
	// SidecarLive reports whether a node holding its claim announces any epoch of the sidecar
	// added under name: false means no node drives it now (a segmented job moves its work off it).
	SidecarLive(name string) (bool, error)
}

// Tx is one transaction over the jobs. A Job it hands out (Get, Active, All) is the caller's: it
// shares no slice, map or pointer with what the store keeps, so changing it changes nothing
// stored (a store that caches decoded jobs hands out copies: decodecache.go).
type Tx interface {
	// Get returns the job with id, or an error wrapping ErrNotFound.
	Get(id string) (Job, error)
	// Put stores j (insert or replace). Only valid in Update.
	Put(j *Job) error
	// Delete removes the job with id, if any. Only valid in Update.
	Delete(id string) error
	// Active calls fn for every job whose Active() was true when it was last Put, in id order.
	Active(fn func(Job) error) error
	// All calls fn for every job in id order.
	All(fn func(Job) error) error
}
