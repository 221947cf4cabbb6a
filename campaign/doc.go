// Package campaign runs a randomized fault campaign against real sidecars and a real MinIO, and
// then checks, from typed job fields and storage truth only, that every outcome the dispatcher
// reported is true.
//
// A campaign creates datasets on a MinIO it controls, launches `steward serve --test-faults`
// sidecars in a private cgroup parent and state directory, and drives N seeded, randomized index
// mutations (CREATE / REPLACE / DROP, BTREE / BITMAP, IF conditions, pinned at the dataset's
// latest version) through one durable dispatcher while it injects faults: every worker fault of
// the sidecar, SIGKILLs of a sidecar mid-job (followed by a successor on the same state
// directory), MinIO stopped and restarted mid-run, and deadlines too short to fund the kill
// budget or barely funding it. It then waits for convergence (MinIO up, every UNKNOWN settled by
// the dispatcher's resolve driver, every sidecar's ledger drained) and checks:
//
//   - every COMMITTED job's invocation committed exactly slot admitted+1 of its dataset's
//     manifest chain, with its index present (CREATE, REPLACE) or absent (DROP) at that
//     version, or it was an IF condition no-op that the pinned snapshot justifies;
//   - no NOT_COMMITTED job's invocation committed anywhere, and no commit belongs to no job;
//   - no job is left UNKNOWN, PENDING or RUNNING, or holding its slot;
//   - every object a manifest references exists, and no object in the bucket is neither
//     referenced by a manifest nor owned by a ledger ticket;
//   - no process and no cgroup of the campaign survives it.
//
// The package composes host, host/dispatch, rpc and storage only: it sees a sidecar from the
// outside, as a database host would, and refuses to import sidecar, isolation or plugin.
package campaign
