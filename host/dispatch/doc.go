// Package dispatch is the durable host dispatcher: it drives index jobs through a job store
// to a terminal state a database can trust, sending each mutation to a sidecar at most once. The
// store is bbolt on a single node (BoltStore), or a journal in etcd that several host processes
// share (EtcdStore: see etcd.go for its key layout and transactions, and Cluster).
//
// A job moves PENDING → RUNNING → COMMITTED | NOT_COMMITTED | UNKNOWN. RUNNING is journaled, with
// the invocation id, the sidecar epoch and the deadline, before any I/O, so a dispatcher that
// restarts from its store never sends a RUNNING job again. An UNKNOWN outcome is settled later by
// index.resolve (fencing the commit slot) or left for an audited force-release; it is never guessed.
//
// Separately from its outcome, a job holds a slot (the same-name fence and the quotas) for as long
// as a worker might still be running for it: the slot is released by an answer from the sidecar
// (which answers only after its worker's domain is dead), by a refusal at receive, by proof that
// the recorded sidecar epoch is gone, by this dispatcher's knowledge that it journaled the send
// and never made it (unsent.go: the job is then NOT_COMMITTED), or by force-release. A deadline
// never releases it.
//
// On a shared journal each node sends only through its own sidecars, and journals a send only in
// the transaction that proves its claim (lease) still holds. A node that dies or is cut off
// proves nothing about its workers: its RUNNING jobs become UNKNOWN at their deadline, any live
// node settles them by index.resolve (fencing the commit slot), and only then is the slot freed.
//
// A cancel (Dispatcher.Cancel, RequestCancel, `steward jobs cancel`) is journaled in the job's
// record first, by any node: a job not yet sent is NOT_COMMITTED at once and never sent; a sent
// one is cancelled at its sidecar (index.cancel) by the node that drives that sidecar, and its
// one answer settles it as any answer does (cancel.go).
//
// A segmented job (SubmitSegmented, segmented.go) builds one index in K segments: index.plan
// fixes the fragment runs at admission, and the parent job, which holds the name and is never
// sent, is driven through step jobs (TRAIN, SEGMENT per run and per rebuild, COMMIT_SEGMENTS),
// each an ordinary job with a deterministic id sent at most once through the machinery above.
// Segments are spread round robin over the sidecars known at admission; the committing sidecar
// adopts the others' custody before the commit. Any node continues a segmented job from the
// journal: a step sent by a node that died is resolved and, if need be, built again as a new step.
//
// Classification reads typed fields only (phase, code, error sentinels), never message text.
//
// The bbolt store is never taken on trust: a damaged file is a *CorruptError naming it
// (QuarantineStore is the audited way out), readers can open a lock-free Snapshot while a
// dispatcher holds the file, and finished jobs are pruned by age and count.
//
// dispatch imports rpc, host and internal/boltfile only (and the bbolt and etcd clients); it never
// links the sidecar, isolation or storage packages.
package dispatch
