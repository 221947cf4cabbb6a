// Package ledger keeps custody of objects that were uploaded but not yet published: a worker's
// index segments before its manifest commit, a host transaction's spill files before its
// commit. Every such object gets a ticket, reserved by its owner before the upload. The owner
// then accepts it (published: the ticket is released), abandons it (a single cleanup worker
// deletes the object and then releases the ticket) or transfers it to another owner with
// contiguous receipts. Capacity is bounded: a reservation past it is refused before any
// upload, and owned work is never dropped to make room.
//
// Tickets live in a compact in-memory index (names in one byte arena, an open-addressing
// table of uint32 slot ids, owners as small ids) backed by a bbolt journal with a write-ahead
// log in front of it (one flush a commit instead of bbolt's two), so the ledger survives a
// SIGKILL: Recover settles the invocations that were in flight. Sweep finds historical orphans of a dataset: objects in its data and index folders that no manifest
// version references and no ticket owns, older than a safety age, and deletes them through
// the same cleanup path. It refuses a prefix without a readable manifest chain.
//
// A journal file that is present but empty, truncated or damaged is refused with a
// *CorruptError naming it, never loaded as an empty ledger and never allowed to panic.
//
// The package imports storage and internal/boltfile (a leaf) only. It knows nothing of dataset
// formats (a sweep's caller passes a DatasetLayout), JSON-RPC, the worker pipe or Prometheus:
// the sidecar supplies the layout, maps its errors to wire codes and its Stats to metrics.
package ledger
