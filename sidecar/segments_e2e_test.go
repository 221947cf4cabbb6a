package sidecar_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
)

// Segment builds through the real sidecar with the real Lance engine (docs/PROTOCOL.md §3.13):
// index.plan reads the pinned version's fragments from its manifest; TRAIN, K SEGMENTs and one
// COMMIT_SEGMENTS run as contained invocations; Lance's own library reads the published index
// back (describe_indices' num_segments, each segment's fragment bitmap, a query through it, no
// unindexed row); custody holds every object of the build until the commit and nothing is left
// after (no ticket, no orphan under _indices/, nothing under the build's area).

type lanceSegments struct {
	NumSegments int `json:"num_segments"`
	Segments    []struct {
		UUID        string   `json:"uuid"`
		FragmentIDs []uint64 `json:"fragment_ids"`
	} `json:"segments"`
	Fragments     []uint64 `json:"fragments"`
	UnindexedRows int64    `json:"unindexed_rows"`
	IndexedRows   int64    `json:"indexed_rows"`
}

// createFragments creates a dataset of rows in frags fragments and returns its version.
func (l *lanceSidecar) createFragments(path string, rows, frags int) int64 {
	var created struct {
		Version int64 `json:"version"`
	}
	l.ctl(&created, "create", l.uri(path), "--rows", strconv.Itoa(rows), "--fragments", strconv.Itoa(frags))
	return created.Version
}

// plan asks the sidecar for k segments over version v.
func (l *lanceSidecar) plan(path string, v int64, k int) rpc.PlanResult {
	l.t.Helper()
	var res rpc.PlanResult
	err := l.c.Call(context.Background(), rpc.MethodIndexPlan, rpc.PlanParams{Dataset: rpc.DatasetRef{Store: l.store, Path: path},
		Version: v, Credentials: l.creds, Segments: k}, &res)
	if err != nil {
		l.t.Fatalf("index.plan: %v", err)
	}
	return res
}

// segParams is a segment op of build b.
func (l *lanceSidecar) segParams(op, build, path string, pinned int64, name, column, typ string, params map[string]string) rpc.MutateParams {
	p := l.lanceParams(randID("inv-"), path, pinned, op, name, column, typ, params)
	p.Segment = &rpc.SegmentSpec{BuildID: build}
	return p
}

// buildHeld is the number of tickets build b holds.
func (l *lanceSidecar) buildHeld(b string) int {
	l.t.Helper()
	var st rpc.ObjectsStatusResult
	owner := rpc.ObjectOwner{Kind: rpc.OwnerHostTxn, ID: rpc.BuildOwner(b)}
	if err := l.c.Call(context.Background(), rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{Owner: &owner}, &st); err != nil {
		l.t.Fatal(err)
	}
	if st.Owner == nil {
		return 0
	}
	return st.Owner.Held
}

// btreeSegments builds one BTREE segment of index idx_id per fragment run for build b.
func (l *lanceSidecar) btreeSegments(b, path string, pinned int64, runs [][]uint64) []rpc.SegmentRef {
	l.t.Helper()
	var refs []rpc.SegmentRef
	for _, run := range runs {
		p := l.segParams(rpc.OpSegment, b, path, pinned, "idx_id", "id", "BTREE", nil)
		p.Segment.FragmentIDs = run
		res := l.mutate(p)
		if res.CompletionReason != rpc.CompletionSegmentWritten {
			l.t.Fatalf("SEGMENT %+v", res)
		}
		refs = append(refs, rpc.SegmentRef{UUID: res.IndexUUID, FragmentIDs: run})
	}
	return refs
}

// reapOurZombies waits for those of pids that are exited children of this process.
func reapOurZombies(pids []string) {
	for _, p := range pids {
		b, err := os.ReadFile(filepath.Join("/proc", p, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after its closing paren.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(os.Getpid()) {
			pid, _ := strconv.Atoi(p)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
	}
}

// procStates names each pid with its state and command, for a failure message.
func procStates(pids []string) []string {
	out := make([]string, len(pids))
	for i, p := range pids {
		b, _ := os.ReadFile(filepath.Join("/proc", p, "stat"))
		out[i] = p + " " + string(b[:min(len(b), 64)])
	}
	return out
}

// abandonBuild ends build b as a host does: objects.abandon of its owner, everything.
func (l *lanceSidecar) abandonBuild(b string) {
	l.t.Helper()
	var st rpc.ObjectsOwnerStatus
	if err := l.c.Call(context.Background(), rpc.MethodObjectsAbandon, rpc.ObjectsReleaseParams{
		Owner: rpc.ObjectOwner{Kind: rpc.OwnerHostTxn, ID: rpc.BuildOwner(b)}, All: true}, &st); err != nil {
		l.t.Fatal(err)
	}
}

// nothingLeft waits for custody to settle, then fails the test if the dataset holds an index
// folder Lance does not list or anything under a build area.
func (l *lanceSidecar) nothingLeft(path string) {
	l.t.Helper()
	l.settled()
	l.noOrphanIndex(path)
	l.nothingOfBuilds(path)
}

// nothingOfBuilds fails the test if anything is left under the dataset's build areas.
func (l *lanceSidecar) nothingOfBuilds(path string) {
	l.t.Helper()
	for _, k := range l.objects(path) {
		if strings.HasPrefix(k, path+"/_steward/builds/") {
			l.t.Errorf("build object left: %s", k)
		}
	}
}

// segmented runs a whole build: TRAIN (vector types), one SEGMENT per planned run, COMMIT.
func (l *lanceSidecar) segmented(build, path string, pinned int64, runs [][]uint64, name, column, typ string, params map[string]string) (rpc.MutateResult, []rpc.SegmentRef) {
	l.t.Helper()
	var train string
	if strings.HasPrefix(typ, "IVF") {
		res := l.mutate(l.segParams(rpc.OpTrain, build, path, pinned, name, column, typ, params))
		if res.Phase != rpc.PhaseNativeReturn || res.Code != 0 || res.CompletionReason != rpc.CompletionTrained || res.IndexUUID == "" {
			l.t.Fatalf("TRAIN: %+v", res)
		}
		train = res.IndexUUID
	}
	var refs []rpc.SegmentRef
	for _, run := range runs {
		p := l.segParams(rpc.OpSegment, build, path, pinned, name, column, typ, params)
		p.Segment.FragmentIDs, p.Segment.TrainUUID = run, train
		res := l.mutate(p)
		if res.Phase != rpc.PhaseNativeReturn || res.Code != 0 || res.CompletionReason != rpc.CompletionSegmentWritten ||
			res.CommittedVersion != 0 || res.IndexUUID == "" {
			l.t.Fatalf("SEGMENT %v: %+v", run, res)
		}
		l.t.Logf("%s segment %v: %s, %d ms, peak %d MiB", typ, run, res.IndexUUID, res.WallMs, res.PeakMemoryBytes>>20)
		refs = append(refs, rpc.SegmentRef{UUID: res.IndexUUID, FragmentIDs: run})
	}
	if held := l.buildHeld(build); held == 0 {
		l.t.Fatalf("build %s holds no ticket before its commit", build)
	}
	p := l.segParams(rpc.OpCommitSegments, build, path, pinned, name, column, typ, params)
	p.Segment.Segments = refs
	return l.mutate(p), refs
}

// TestLanceSegmentedBuilds: a BTREE and an IVF_PQ built in 3 segments each and committed at
// pinned+1, on a local store and on MinIO. Lance's library sees one index of 3 segments whose
// fragment bitmaps are the planned runs, no unindexed row, and answers a query through it.
func TestLanceSegmentedBuilds(t *testing.T) {
	lanceStores(t, func(t *testing.T, onMinIO bool) {
		l := newLanceSidecar(t, onMinIO)
		if !slices.Contains(l.c.Info().Capabilities, rpc.CapSegments) {
			t.Fatalf("hello capabilities %v lack %s", l.c.Info().Capabilities, rpc.CapSegments)
		}
		const path = "events"
		pinned := l.createFragments(path, 12000, 6)
		plan := l.plan(path, pinned, 3)
		if len(plan.Fragments) != 6 || len(plan.Segments) != 3 {
			t.Fatalf("plan %+v", plan)
		}
		for _, tc := range []struct {
			typ, column string
			params      map[string]string
		}{
			{"BTREE", "id", nil},
			{"IVF_PQ", "vec", map[string]string{"num_partitions": "4", "num_sub_vectors": "16", "sample_rate": "16"}},
		} {
			t.Run(tc.typ, func(t *testing.T) {
				l.t = t
				name, build := "idx_"+strings.ToLower(tc.typ), randID("b-")
				plan := l.plan(path, pinned, 3)
				res, refs := l.segmented(build, path, pinned, plan.Segments, name, tc.column, tc.typ, tc.params)
				if res.Phase != rpc.PhaseNativeReturn || res.Code != 0 || res.CommittedVersion != pinned+1 || res.CompletionReason != rpc.CompletionCommitted || res.Message != "" {
					t.Fatalf("COMMIT_SEGMENTS: %+v", res)
				}
				pinned++
				var segs lanceSegments
				l.ctl(&segs, "segments", l.uri(path), name)
				if segs.NumSegments != 3 || len(segs.Segments) != 3 || segs.UnindexedRows != 0 || segs.IndexedRows != 12000 {
					t.Fatalf("Lance describes %+v", segs)
				}
				for _, ref := range refs {
					i := slices.IndexFunc(segs.Segments, func(s struct {
						UUID        string   `json:"uuid"`
						FragmentIDs []uint64 `json:"fragment_ids"`
					}) bool {
						return s.UUID == ref.UUID
					})
					if i < 0 || !slices.Equal(segs.Segments[i].FragmentIDs, ref.FragmentIDs) {
						t.Fatalf("segment %s %v: Lance lists %+v", ref.UUID, ref.FragmentIDs, segs.Segments)
					}
				}
				var chk lanceCheck
				l.ctl(&chk, "check", l.uri(path), name, tc.column, tc.typ)
				// The top 10 of random Gaussian vectors are nearly equidistant, so one query's
				// recall swings with the PQ codebook (0.7-1.0 seen for the same build): the
				// index must find the query's own row and most of its neighbours.
				exact := chk.Equal || (strings.HasPrefix(tc.typ, "IVF") && chk.SelfHit && chk.Recall >= 0.5)
				if !chk.Listed || !chk.UsesIndex || !exact || chk.Last.Version != pinned || chk.Last.Kind != "commit" {
					t.Fatalf("Lance's reader: %+v", chk)
				}
				l.nothingLeft(path)
				t.Logf("%s in 3 segments %v: committed v%d; Lance: num_segments=%d, 0 unindexed rows, plan uses it (recall %.1f)",
					tc.typ, plan.Segments, pinned, segs.NumSegments, chk.Recall)
			})
		}
	})
}

// TestLanceSegmentFailures: a segment OOM-killed under a small memory limit is rebuilt alone
// (new uuid) and the build commits; coverage violations are refused before anything runs; an
// abandoned build leaves nothing; the built-in engine refuses segment ops with NATIVE_RETURN 7.
func TestLanceSegmentFailures(t *testing.T) {
	l := newLanceSidecar(t, false)
	const path = "events"
	pinned := l.createFragments(path, 40000, 4)
	plan := l.plan(path, pinned, 2)
	ivf := map[string]string{"num_partitions": "8", "num_sub_vectors": "16", "sample_rate": "16"}

	t.Run("oom segment rebuilt", func(t *testing.T) {
		l.t = t
		build := randID("b-")
		train := l.mutate(l.segParams(rpc.OpTrain, build, path, pinned, "idx_vec", "vec", "IVF_PQ", ivf))
		if train.CompletionReason != rpc.CompletionTrained {
			t.Fatalf("TRAIN %+v", train)
		}
		seg := func(run []uint64, memory int64) rpc.MutateResult {
			p := l.segParams(rpc.OpSegment, build, path, pinned, "idx_vec", "vec", "IVF_PQ", ivf)
			p.Segment.FragmentIDs, p.Segment.TrainUUID = run, train.IndexUUID
			if memory > 0 {
				p.Limits = &rpc.WorkerLimits{MemoryBytes: memory}
			}
			return l.mutate(p)
		}
		first := seg(plan.Segments[0], 0)
		held := l.buildHeld(build)
		// Python and pylance alone take ~41 MiB; a segment of 20,000 vectors does not fit in 48.
		oom := seg(plan.Segments[1], 48<<20)
		if oom.Phase != rpc.PhaseIndeterminate || !oom.OOMKilled {
			t.Fatalf("segment under 48 MiB: %+v", oom)
		}
		if r := l.resolveLance(oom.InvocationID, path, pinned); r.Outcome != rpc.OutcomeNotCommitted {
			t.Fatalf("resolve of the killed segment: %+v", r)
		}
		if got := l.buildHeld(build); got != held {
			t.Fatalf("the killed segment changed the build's custody: %d tickets, had %d", got, held)
		}
		again := seg(plan.Segments[1], 0)
		if again.CompletionReason != rpc.CompletionSegmentWritten || again.IndexUUID == first.IndexUUID {
			t.Fatalf("rebuilt segment %+v", again)
		}
		p := l.segParams(rpc.OpCommitSegments, build, path, pinned, "idx_vec", "vec", "IVF_PQ", ivf)
		p.Segment.Segments = []rpc.SegmentRef{{UUID: first.IndexUUID, FragmentIDs: plan.Segments[0]}, {UUID: again.IndexUUID, FragmentIDs: plan.Segments[1]}}
		res := l.mutate(p)
		if res.CommittedVersion != pinned+1 || res.Message != "" {
			t.Fatalf("COMMIT_SEGMENTS %+v", res)
		}
		pinned++
		var segs lanceSegments
		l.ctl(&segs, "segments", l.uri(path), "idx_vec")
		if segs.NumSegments != 2 || segs.UnindexedRows != 0 {
			t.Fatalf("Lance describes %+v", segs)
		}
		l.nothingLeft(path)
		t.Logf("segment OOM-killed under 48 MiB (peak %d MiB), resolved NOT_COMMITTED, rebuilt as %s (peak %d MiB); committed v%d",
			oom.PeakMemoryBytes>>20, again.IndexUUID, again.PeakMemoryBytes>>20, pinned)
	})

	t.Run("coverage refused", func(t *testing.T) {
		l.t = t
		build := randID("b-")
		refs := l.btreeSegments(build, path, pinned, plan.Segments)
		held := l.buildHeld(build)
		overlap := slices.Clone(refs)
		overlap[1].FragmentIDs = append([]uint64{overlap[0].FragmentIDs[0]}, overlap[1].FragmentIDs...)
		slices.Sort(overlap[1].FragmentIDs)
		for _, tc := range []struct {
			name string
			refs []rpc.SegmentRef
			want string
		}{
			{"missing fragment", refs[:1], "is in no segment"},
			{"overlap", overlap, "overlap"},
			{"unknown segment", []rpc.SegmentRef{refs[0], {UUID: "00000000-0000-4000-8000-000000000000", FragmentIDs: refs[1].FragmentIDs}}, "holds no object of segment"},
		} {
			p := l.segParams(rpc.OpCommitSegments, build, path, pinned, "idx_id", "id", "BTREE", nil)
			p.Segment.Segments = tc.refs
			_, err := l.c.Mutate(context.Background(), p)
			if !errors.Is(err, rpc.ErrInvalidParams) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want invalid params naming %q", tc.name, err, tc.want)
			}
			t.Logf("%s: %v", tc.name, err)
		}
		if got := l.buildHeld(build); got != held {
			t.Fatalf("refused commits changed the build's custody: %d tickets, had %d", got, held)
		}
		// The host abandons the build: everything it wrote is deleted.
		l.abandonBuild(build)
		l.nothingLeft(path)
	})

	t.Run("builtin refuses", func(t *testing.T) {
		l.t = t
		l.makeDataset("builtin", 1000)
		p := l.params(randID("inv-"), "builtin", 1, rpc.OpSegment, "idx", "id", "BTREE")
		p.Segment = &rpc.SegmentSpec{BuildID: "b1", FragmentIDs: []uint64{0}}
		res := l.mutate(p)
		if res.Phase != rpc.PhaseNativeReturn || res.Code != rpc.NativeNotSupported {
			t.Fatalf("built-in SEGMENT: %+v", res)
		}
	})
}

// TestLanceSegmentSidecarKilled: the sidecar is SIGKILLed while a segment runs. The restarted
// sidecar (same state dir, same cgroup parent) still holds the build's training and finished
// segment (a host transaction: recovery leaves it), settles the killed segment's invocation from
// storage (its objects deleted), and the host rebuilds that segment alone and commits. Nothing
// of the build is left, whether the killed segment had written anything or not.
func TestLanceSegmentSidecarKilled(t *testing.T) {
	// One executor: its next spare starts only after the job it runs is answered, so none is
	// being launched when the sidecar is killed mid-segment (a sidecar killed while launching a
	// domain is isolation's case, not this test's).
	l := newLanceSidecar(t, false, "--state-dir", t.TempDir(), "--executors", "1")
	const path = "events"
	pinned := l.createFragments(path, 40000, 4)
	plan := l.plan(path, pinned, 2)
	ivf := map[string]string{"num_partitions": "8", "num_sub_vectors": "16", "sample_rate": "16"}
	build := randID("b-")
	train := l.mutate(l.segParams(rpc.OpTrain, build, path, pinned, "idx_vec", "vec", "IVF_PQ", ivf))
	segP := func(run []uint64) rpc.MutateParams {
		p := l.segParams(rpc.OpSegment, build, path, pinned, "idx_vec", "vec", "IVF_PQ", ivf)
		p.Segment.FragmentIDs, p.Segment.TrainUUID = run, train.IndexUUID
		return p
	}
	first := l.mutate(segP(plan.Segments[0]))
	if train.CompletionReason != rpc.CompletionTrained || first.CompletionReason != rpc.CompletionSegmentWritten {
		t.Fatalf("TRAIN %+v, SEGMENT %+v", train, first)
	}
	held := l.buildHeld(build)

	killed := segP(plan.Segments[1])
	errs := make(chan error, 1)
	go func() {
		_, err := l.c.Mutate(context.Background(), killed)
		errs <- err
	}()
	l.waitProgress(killed.InvocationID, "segment") // killed once the engine reports its segment under way
	l.killAndRestart(errs)

	// Recovery settles the killed invocation: only the build's tickets (and, had the killed
	// segment answered in time, its own, now the build's) remain.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if st := l.status(); st.Used == l.buildHeld(build) && st.PendingDelete == 0 && st.Unsettled == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("recovery did not settle the killed segment: %+v, build holds %d", l.status(), l.buildHeld(build))
		}
	}
	after := l.buildHeld(build)
	if after < held {
		t.Fatalf("the build lost custody across the restart: %d tickets, had %d", after, held)
	}
	again := l.mutate(segP(plan.Segments[1]))
	if again.CompletionReason != rpc.CompletionSegmentWritten {
		t.Fatalf("rebuilt segment %+v", again)
	}
	p := l.segParams(rpc.OpCommitSegments, build, path, pinned, "idx_vec", "vec", "IVF_PQ", ivf)
	p.Segment.Segments = []rpc.SegmentRef{{UUID: first.IndexUUID, FragmentIDs: plan.Segments[0]}, {UUID: again.IndexUUID, FragmentIDs: plan.Segments[1]}}
	if res := l.mutate(p); res.CommittedVersion != pinned+1 || res.Message != "" {
		t.Fatalf("COMMIT_SEGMENTS %+v", res)
	}
	var segs lanceSegments
	l.ctl(&segs, "segments", l.uri(path), "idx_vec")
	if segs.NumSegments != 2 || segs.UnindexedRows != 0 {
		t.Fatalf("Lance describes %+v", segs)
	}
	l.nothingLeft(path)
	t.Logf("sidecar killed mid-segment; after restart the build held %d tickets (%d before the killed segment), the segment was rebuilt and the build committed at v%d", after, held, pinned+1)
}

// killAndRestart SIGKILLs the sidecar while the call that errs answers runs, and starts its
// successor on the same state directory.
func (l *lanceSidecar) killAndRestart(errs <-chan error) {
	t := l.t
	t.Helper()
	sigkill(t, l.c)
	if err := <-errs; err == nil {
		t.Log("the call answered before the kill: its answer is lost to the host all the same")
	}
	l.c.Close()
	// The killed sidecar's domain dies with it (PDEATHSIG). Its orphans re-parent to the nearest
	// child subreaper: init, or this test process once another test of the package made it one
	// (an in-process isolation.Supervisor), which must then reap them itself. The successor is
	// started once they are gone, so that what the harness finds at the end is its own.
	for deadline := time.Now().Add(time.Minute); len(testsidecar.ProcessesIn(l.sc.Parent)) > 0; time.Sleep(50 * time.Millisecond) {
		reapOurZombies(testsidecar.ProcessesIn(l.sc.Parent))
		if time.Now().After(deadline) {
			t.Fatalf("the killed sidecar's processes outlived it by a minute: %v", procStates(testsidecar.ProcessesIn(l.sc.Parent)))
		}
	}
	l.sc.Restart()
	l.c = l.sc.Client
}

// waitProgress waits up to a minute for a $/progress of inv at stage.
func (l *lanceSidecar) waitProgress(inv, stage string) {
	l.t.Helper()
	at := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return slices.ContainsFunc(l.progress, func(p rpc.ProgressParams) bool { return p.InvocationID == inv && p.Stage == stage })
	}
	for deadline := time.Now().Add(time.Minute); !at(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			l.t.Fatalf("no %s progress of %s within a minute", stage, inv)
		}
	}
}

// TestLanceCommitSidecarKilled: the sidecar is SIGKILLed while a COMMIT_SEGMENTS runs, after it
// took the build's segments into the commit's custody. Its successor settles the commit's
// tickets by itself, from the invocation's record, as for any mutation (before the record came
// with the segments, they stayed held with "no record of invocation" until a host resolved the
// invocation on this very sidecar: found by the segment campaign). The host's index.resolve then
// agrees with storage, and once it abandons the build nothing is left.
func TestLanceCommitSidecarKilled(t *testing.T) {
	l := newLanceSidecar(t, false, "--state-dir", t.TempDir(), "--executors", "1")
	const path = "events"
	pinned := l.createFragments(path, 8000, 4)
	plan := l.plan(path, pinned, 2)
	build := randID("b-")
	p := l.segParams(rpc.OpCommitSegments, build, path, pinned, "idx_id", "id", "BTREE", nil)
	p.Segment.Segments = l.btreeSegments(build, path, pinned, plan.Segments)
	errs := make(chan error, 1)
	go func() {
		_, err := l.c.Mutate(context.Background(), p)
		errs <- err
	}()
	l.waitProgress(p.InvocationID, "commit")
	l.killAndRestart(errs)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var st rpc.ObjectsStatusResult
		owner := rpc.ObjectOwner{Kind: rpc.OwnerInvocation, ID: p.InvocationID}
		if err := l.c.Call(context.Background(), rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{Owner: &owner}, &st); err != nil {
			t.Fatal(err)
		}
		if (st.Owner == nil || st.Owner.Held == 0) && st.Ledger.Unsettled == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted sidecar did not settle the killed commit by itself: %+v %+v", st.Owner, st.Ledger)
		}
	}
	r := l.resolveLance(p.InvocationID, path, pinned)
	l.abandonBuild(build)
	var segs lanceSegments
	l.ctl(&segs, "segments", l.uri(path), "idx_id")
	if want := map[string]int{rpc.OutcomeCommitted: 2}[r.Outcome]; r.Outcome == rpc.OutcomeUnknown || segs.NumSegments != want {
		t.Fatalf("resolve %+v; Lance describes %+v, want %d segments", r, segs, want)
	}
	l.nothingLeft(path)
	t.Logf("sidecar killed mid-commit; its successor settled the commit's custody by itself; resolved %s, Lance describes %d segments", r.Outcome, segs.NumSegments)
}

// adoptBuild moves build b's custody from sidecar from to sidecar to, by the host, with the
// ledger methods: from lists the build's tickets, to reserves the same keys for the build (its
// durable reservation is the receipt), and only then from accepts them (releases without
// deleting). A crash in between leaves both holding them, never neither.
func adoptBuild(t *testing.T, from, to *lanceSidecar, b string) int {
	t.Helper()
	owner := rpc.ObjectOwner{Kind: rpc.OwnerHostTxn, ID: rpc.BuildOwner(b)}
	var st rpc.ObjectsStatusResult
	if err := from.c.Call(context.Background(), rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{Owner: &owner, Tickets: true}, &st); err != nil {
		t.Fatal(err)
	}
	if st.Truncated || len(st.Tickets) == 0 {
		t.Fatalf("build %s on the building sidecar: %d tickets, truncated %v", b, len(st.Tickets), st.Truncated)
	}
	keys := make([]string, len(st.Tickets))
	for i, tk := range st.Tickets {
		keys[i] = tk.Key
	}
	var rr rpc.ObjectsReserveResult
	if err := to.c.Call(context.Background(), rpc.MethodObjectsReserve, rpc.ObjectsReserveParams{Owner: owner, Store: from.store, Keys: keys}, &rr); err != nil {
		t.Fatalf("adopt on the committing sidecar: %v", err)
	}
	var released rpc.ObjectsOwnerStatus
	if err := from.c.Call(context.Background(), rpc.MethodObjectsAccept, rpc.ObjectsReleaseParams{Owner: owner, Store: &from.store, Keys: keys}, &released); err != nil {
		t.Fatalf("release on the building sidecar: %v", err)
	}
	return len(keys)
}

// TestLanceSegmentsAcrossSidecars: one build's segments on two sidecars (two ledgers) over one
// store; the committing sidecar refuses segments it holds no custody of, adopts the other
// sidecar's (adoptBuild), and commits them all. Nothing is left in either ledger or the store.
func TestLanceSegmentsAcrossSidecars(t *testing.T) {
	a, b := newLanceSidecar(t, false), newLanceSidecar(t, false)
	b.store, b.root = a.store, a.root // one store, two sidecars
	const path = "events"
	pinned := a.createFragments(path, 12000, 4)
	plan := a.plan(path, pinned, 2)
	build := randID("b-")
	var refs []rpc.SegmentRef
	for i, l := range []*lanceSidecar{a, b} {
		p := l.segParams(rpc.OpSegment, build, path, pinned, "idx_id", "id", "BTREE", nil)
		p.Segment.FragmentIDs = plan.Segments[i]
		res := l.mutate(p)
		if res.CompletionReason != rpc.CompletionSegmentWritten {
			t.Fatalf("SEGMENT on sidecar %d: %+v", i, res)
		}
		refs = append(refs, rpc.SegmentRef{UUID: res.IndexUUID, FragmentIDs: plan.Segments[i]})
	}
	commit := b.segParams(rpc.OpCommitSegments, build, path, pinned, "idx_id", "id", "BTREE", nil)
	commit.Segment.Segments = refs
	if _, err := b.c.Mutate(context.Background(), commit); !errors.Is(err, rpc.ErrInvalidParams) || !strings.Contains(err.Error(), refs[0].UUID) {
		t.Fatalf("a commit of a segment held by another sidecar: %v", err)
	}
	moved := adoptBuild(t, a, b, build)
	commit.InvocationID = randID("inv-")
	if res := b.mutate(commit); res.CommittedVersion != pinned+1 || res.Message != "" {
		t.Fatalf("COMMIT_SEGMENTS on the adopting sidecar: %+v", res)
	}
	var segs lanceSegments
	b.ctl(&segs, "segments", b.uri(path), "idx_id")
	if segs.NumSegments != 2 || segs.UnindexedRows != 0 {
		t.Fatalf("Lance describes %+v", segs)
	}
	a.settled()
	b.nothingLeft(path)
	t.Logf("segments built on two sidecars; %d objects adopted by the committing one; committed v%d with %d segments", moved, pinned+1, segs.NumSegments)
}

// TestLanceSegmentFaults: a segment crashed right after Lance wrote it (before its record and its
// answer) is INDETERMINATE, resolved NOT_COMMITTED, and leaves the build as it was; a commit
// crashed before its commit is resolved NOT_COMMITTED and its segments, now its own, are
// deleted with it; one crashed after its commit is resolved COMMITTED and its segments are
// published. Each ends with no ticket, no orphan and nothing of the build.
func TestLanceSegmentFaults(t *testing.T) {
	l := newLanceSidecar(t, false)
	const path = "events"
	pinned := l.createFragments(path, 12000, 4)
	plan := l.plan(path, pinned, 2)

	t.Run("segment crash after build", func(t *testing.T) {
		l.t = t
		build := randID("b-")
		p0 := l.segParams(rpc.OpSegment, build, path, pinned, "idx_id", "id", "BTREE", nil)
		p0.Segment.FragmentIDs = plan.Segments[0]
		if res := l.mutate(p0); res.CompletionReason != rpc.CompletionSegmentWritten {
			t.Fatalf("SEGMENT %+v", res)
		}
		held := l.buildHeld(build)
		p := l.segParams(rpc.OpSegment, build, path, pinned, "idx_id", "id", "BTREE", nil)
		p.Segment.FragmentIDs, p.Fault = plan.Segments[1], "crash_after_build"
		res := l.mutate(p)
		if res.Phase != rpc.PhaseIndeterminate || res.Code != rpc.ReasonWorkerLost {
			t.Fatalf("crashed SEGMENT %+v", res)
		}
		if r := l.resolveLance(p.InvocationID, path, pinned); r.Outcome != rpc.OutcomeNotCommitted {
			t.Fatalf("resolve %+v", r)
		}
		if got := l.buildHeld(build); got != held {
			t.Fatalf("the crashed segment changed the build: %d tickets, had %d", got, held)
		}
		l.abandonBuild(build)
		l.nothingLeft(path)
	})

	for _, tc := range []struct {
		fault   string
		outcome string
	}{
		{"crash_before_commit", rpc.OutcomeNotCommitted},
		{"crash_after_commit", rpc.OutcomeCommitted},
	} {
		t.Run("commit "+tc.fault, func(t *testing.T) {
			l.t = t
			build := randID("b-")
			p := l.segParams(rpc.OpCommitSegments, build, path, pinned, "idx_id", "id", "BTREE", nil)
			p.Segment.Segments, p.Fault = l.btreeSegments(build, path, pinned, plan.Segments), tc.fault
			res := l.mutate(p)
			if res.Phase != rpc.PhaseIndeterminate {
				t.Fatalf("crashed COMMIT_SEGMENTS %+v", res)
			}
			r := l.resolveLance(p.InvocationID, path, pinned)
			if r.Outcome != tc.outcome {
				t.Fatalf("resolve %+v, want %s", r, tc.outcome)
			}
			// The build's rest (segment records) waits for the host once the commit was
			// undecided at its answer.
			l.abandonBuild(build)
			var segs lanceSegments
			l.ctl(&segs, "segments", l.uri(path), "idx_id")
			if want := map[string]int{rpc.OutcomeCommitted: 2}[tc.outcome]; segs.NumSegments != want {
				t.Fatalf("Lance describes %+v, want %d segments", segs, want)
			}
			if tc.outcome == rpc.OutcomeCommitted {
				pinned++
			}
			l.nothingLeft(path)
		})
	}
}
