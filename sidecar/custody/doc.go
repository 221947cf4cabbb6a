// Package custody is the sidecar's custodian of objects uploaded but not yet published: it puts
// worker invocations on the ownership ledger (storage/ledger) and settles them from their
// answers. It owns Reserve (custody of a name before its upload, with the invocation's record as
// the owner's note, in the same journal commit as its first ticket), Finish (accept on a commit,
// abandon on a certain failure, fence the slot of an indeterminate one), Settle (an
// index.resolve outcome), the recovery loop that settles what a restart found, and the ledger's
// metrics collector. Every goroutine it starts stops on Close.
//
// It refuses to take the engine's word for a failure that may have committed: a failed engine
// call's slot is read before anything is deleted, and tickets stay until storage decides.
package custody
