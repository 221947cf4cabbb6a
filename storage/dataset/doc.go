// Package dataset owns steward's Lance-style versioned datasets on a storage.Store and the
// index mutations on them.
//
// A dataset is a key prefix holding:
//
//	_versions/<v:020>.manifest   JSON manifest of version v (schema, fragments, indices, transaction)
//	data/<uuid>.parquet          immutable data fragments (Parquet, one row group per ~1M rows)
//	_indices/<uuid>/<kind>.seg   index segments (formats in storage/index)
//
// A commit is a put-if-absent of manifest pinned+1, so of concurrent committers exactly one
// wins; the others get a *CommitConflictError. A fence manifest (ResolveSlot) copies version
// pinned into slot pinned+1 to settle whether an invocation can still commit; readers treat it
// as a no-op version.
//
// Every object a manifest references lies under data/ or _indices/ (Folders). Referenced reads
// the whole manifest chain and returns what it references, so that a caller that deletes the
// rest (the ledger's sweep) works from this package's knowledge of the layout, not its own.
// Manifests are read with a 64 MiB bound (MaxManifestSize).
//
// Object keys reported to callers (custody hooks, MutateResult.Created) are relative to the
// Store the dataset was opened on, i.e. they include the dataset prefix.
//
// The package refuses to know about ledgers, RPC or processes; custody is a callback.
package dataset
