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
// With Config.Engine EngineLance the mutations run on the real Lance engine (engines/lance,
// registered in every sidecar) over real Lance datasets made with Lance's own library, drawing the
// fault kinds that apply to it (LanceKinds; an oom is a real OOM kill under a lowered memory
// limit), and the checker reads Lance's own version chain (lancectl.py chain); lanceFormat.read
// documents what a Lance version references.
//
// With Config.Segments (Lance only) every mutation is a segmented build of a new index through
// dispatch.SubmitSegmented (a TRAIN for IVF_PQ, 2 or 3 SEGMENTs, one COMMIT_SEGMENTS), one build
// per dataset at a time, with a fault in one of its steps (SegmentKinds), injected on the wire
// when that step is sent; the checker adds, from Lance's own describe_indices (segcheck.py), that
// every COMMITTED job's index is exactly the segments its commit listed and covers every fragment
// once, that no NOT_COMMITTED job's index is in any version, that no TRAIN or SEGMENT committed,
// and that nothing is left under `_steward/builds/` (checkSegmented).
//
// For either engine the checker also reads the commit-slot claims the sidecars' storage gateways
// and outcome decisions wrote (storage/slot, `<dataset>/_steward/claims/<v>/<invocation>.json`):
// every version a job committed holds the manifest its claim names, every claim is a job's at its
// admitted version + 1, no fenced invocation committed, and no claimed manifest that never landed
// was left unfenced (checkClaims).
//
// RunFailover is the same campaign past one node: three host processes (`steward-campaign node`,
// each a dispatcher with its own real sidecar) share one job journal in a real 3-member etcd
// cluster and one MinIO, while the campaign SIGKILLs host processes (their sidecars die with
// them; a successor takes the node name and the sidecar state directory), SIGSTOPs them past
// their lease and deadlines (their sidecars run on), and kills etcd members. Its checker adds:
// every invocation left a host at most once (the hosts' SEND lines, read as they come) and was
// handed to a worker at most once across the cluster, counted from each sidecar incarnation's own
// log file (its stderr, so a sidecar killed with its host keeps its count); every job journaled at
// most one send.
//
// With Segments (Lance) RunFailover runs the segmented builds there (SegmentFailoverKinds): the
// campaign's own dispatcher drives no sidecar, so each build is submitted on a host process in
// turn (a "segmented" command), whose dispatcher plans it through its own sidecar; host kills and
// stops, etcd kills and MinIO outages are timed from the first send of the build's fault step
// (timedBy), and the checker runs both sets of checks.
//
// The package composes host, host/dispatch, rpc and storage only: it sees a sidecar from the
// outside, as a database host would, and refuses to import sidecar, isolation or plugin.
package campaign
