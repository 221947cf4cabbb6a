package dispatch

// Store is the durable job store. The embedded default is BoltStore; a multi-master host can put
// the same interface over a distributed store. Update must be atomic and serializable: admission
// checks the fence and the quotas and inserts in one Update.
type Store interface {
	// View runs fn in a read-only transaction. It must not write to durable storage.
	View(fn func(Tx) error) error
	// Update runs fn in a read-write transaction, committed only if fn returns nil.
	Update(fn func(Tx) error) error
	// Close releases the store.
	Close() error
}

// Tx is one transaction over the jobs.
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
