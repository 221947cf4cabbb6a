package campaign

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/cba1309c/steward/rpc"
)

// Fault kinds. The worker faults are the sidecar's test fault names, passed through the job; the
// others are injected by the campaign around the job's send.
const (
	KindClean = "clean" // no fault

	// Worker faults (sidecar/worker/faults.go; the campaign sees them only as wire strings).
	KindHang              = "hang"
	KindIgnoreSIGTERM     = "ignore_sigterm"
	KindSkipResult        = "skip_result"
	KindGarbage           = "garbage"
	KindFlood             = "flood"
	KindCrashAfterBuild   = "crash_after_build"
	KindCrashBeforeCommit = "crash_before_commit"
	KindCrashAfterCommit  = "crash_after_commit"
	KindOOM               = "oom"
	KindForkBomb          = "fork_bomb"

	// KindSidecarKill SIGKILLs the sidecar the job was sent to, after a random delay, then
	// starts a successor on the same state directory and adds it under the same name.
	KindSidecarKill = "sidecar_kill"
	// KindMinIOOutage stops MinIO (SIGKILL) shortly after the job is sent and restarts it after
	// a random outage of 1-4s.
	KindMinIOOutage = "minio_outage"
	// KindDeadlineUnfundable sends the job with a deadline short of the kill budget: the sidecar
	// must refuse it at receive.
	KindDeadlineUnfundable = "deadline_unfundable"
	// KindDeadlineTight sends the job with a deadline that funds the kill budget and leaves a
	// runnable window of 0-600ms: the deadline races the build and the commit.
	KindDeadlineTight = "deadline_tight"
)

var workerFaults = []string{KindHang, KindIgnoreSIGTERM, KindSkipResult, KindGarbage, KindFlood,
	KindCrashAfterBuild, KindCrashBeforeCommit, KindCrashAfterCommit, KindOOM, KindForkBomb}

// Kinds lists every fault kind, KindClean first.
func Kinds() []string {
	out := []string{KindClean}
	out = append(out, workerFaults...)
	return append(out, KindSidecarKill, KindMinIOOutage, KindDeadlineUnfundable, KindDeadlineTight)
}

func knownKind(k string) bool {
	return slices.Contains(Kinds(), k) || slices.Contains(FailoverKinds(), k) || slices.Contains(SegmentKinds(), k)
}

func isWorkerFault(k string) bool { return slices.Contains(workerFaults, k) }

// column is an indexable column of the generated datasets, with the index name that covers it,
// the index types a mutation may build on it (a plan's coin picks one) and their parameters.
type column struct {
	index, name, typ string
	types            []string
	params           map[string]string
}

// indexType is the type the plan's coin picks for col.
func (col column) indexType(coin int) string { return col.types[coin%len(col.types)] }

// builtinColumns are the built-in generator's columns; each has one index name, so that CREATE,
// REPLACE and DROP of the same name meet each other.
var builtinColumns = []column{
	{index: "ix_id", name: "id", typ: "int64", types: scalarTypes},
	{index: "ix_category", name: "category", typ: "string", types: scalarTypes},
	{index: "ix_price", name: "price", typ: "float64", types: scalarTypes},
	{index: "ix_name", name: "name", typ: "string", types: scalarTypes},
}

// scalarTypes in coin order (coin 0 is BITMAP, as the plan has always drawn it).
var scalarTypes = []string{rpc.IndexBitmap, rpc.IndexBTree}

// planned is one mutation of the plan: everything random about it, drawn from the seed up front
// so that the same seed gives the same sequence of operations and faults.
type planned struct {
	seq         int
	kind        string
	dataset     int // preferred dataset; the next free (dataset, name) is used when it is busy
	column      int // preferred column
	op          string
	coin        int // picks the index type among the column's (column.indexType)
	ifNotExists bool
	ifExists    bool
	delay       time.Duration // sidecar_kill, minio_outage, host and etcd kinds: after the send
	outage      time.Duration // minio_outage, etcd_kill: how long it stays down; host_stop: stopped
	member      int           // etcd_kill: the member killed
	deadline    time.Duration // deadline kinds: the deadline sent, from the send
	step        string        // segment campaigns' sidecar_kill, minio_outage: the step op whose send times it
}

// id is the job id: sequence and fault kind, readable in `steward jobs list`.
func (p planned) id() string {
	return fmt.Sprintf("m%04d.%s", p.seq, strings.ReplaceAll(p.kind, "_", "-"))
}

// cleanShare is the share of clean mutations after the first round: enough commits for the
// checker to verify, most mutations still faulted.
const cleanShare = 4 // one in four

// draw picks a kind: clean one time in cleanShare (when clean is among kinds), else a fault
// kind uniformly.
func draw(r *rand.Rand, kinds []string) string {
	var faulted []string
	for _, k := range kinds {
		if k != KindClean {
			faulted = append(faulted, k)
		}
	}
	if len(faulted) == 0 || (len(faulted) < len(kinds) && r.IntN(cleanShare) == 0) {
		return KindClean
	}
	return faulted[r.IntN(len(faulted))]
}

// pace scales a plan's timings to its engine's mutations.
type pace struct {
	// tight is the longest runnable window a deadline_tight job gets.
	tight time.Duration
	// kill is the longest delay from a sidecar_kill job's send to the SIGKILL; outage the
	// longest from a minio_outage job's send to the stop.
	kill, outage time.Duration
}

// builtinPace: built-in mutations on the campaign's datasets take well under a second.
var builtinPace = pace{tight: 900 * time.Millisecond, kill: 1500 * time.Millisecond, outage: 500 * time.Millisecond}

// lancePace: a Lance mutation takes seconds (Python start, pylance load, build, commit, and the
// sidecar's settle before a COMMITTED answer), so the deadline, the kill and the outage may land
// before, during or after its commit.
var lancePace = pace{tight: 4 * time.Second, kill: 5 * time.Second, outage: 3 * time.Second}

// makePlan draws n mutations from seed: each of kinds once first (shuffled), then by draw, over
// datasets and columns, timed by pc.
func makePlan(seed int64, n, datasets, columns int, kinds []string, pc pace) []planned {
	r := rand.New(rand.NewPCG(uint64(seed), 0xca5ca11))
	first := slices.Clone(kinds)
	r.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	out := make([]planned, n)
	for i := range out {
		p := planned{seq: i, dataset: r.IntN(datasets), column: r.IntN(columns)}
		p.kind = draw(r, kinds)
		if i < len(first) {
			p.kind = first[i]
		}
		switch x := r.IntN(100); {
		case x < 45:
			p.op, p.ifNotExists = rpc.OpCreate, r.IntN(3) == 0
		case x < 70:
			p.op = rpc.OpReplace
		default:
			p.op, p.ifExists = rpc.OpDrop, r.IntN(5) < 2
		}
		p.coin = r.IntN(2)
		switch p.kind {
		case KindSidecarKill:
			p.delay = time.Duration(r.IntN(int(pc.kill/time.Millisecond))) * time.Millisecond
		case KindMinIOOutage:
			p.delay = time.Duration(r.IntN(int(pc.outage/time.Millisecond))) * time.Millisecond
			p.outage = time.Second + time.Duration(r.IntN(3000))*time.Millisecond
		case KindDeadlineUnfundable:
			p.deadline = max(time.Millisecond, time.Duration(r.Int64N(int64(KillBudget)))) // 0 would mean "the default"
		case KindDeadlineTight:
			p.deadline = KillBudget - minRunnable + time.Duration(r.IntN(int(pc.tight/time.Millisecond)))*time.Millisecond
		case KindHostKill:
			p.delay = time.Duration(r.IntN(1500)) * time.Millisecond
		case KindHostStop:
			p.delay = time.Duration(r.IntN(1000)) * time.Millisecond
			p.outage = time.Second + time.Duration(r.IntN(9000))*time.Millisecond
		case KindEtcdKill:
			p.delay = time.Duration(r.IntN(1000)) * time.Millisecond
			p.outage = time.Second + time.Duration(r.IntN(3000))*time.Millisecond
			p.member = r.IntN(3)
		}
		out[i] = p
	}
	return out
}
