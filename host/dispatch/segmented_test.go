package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testetcd"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
)

// Segmented jobs through real sidecars with the real Lance engine: the dispatcher plans with
// index.plan, spreads the SEGMENT steps over the sidecars, has the committing sidecar adopt the
// others' custody, commits, and Lance's own library reads the index back.

// lanceRig is a local store and the Lance engine's tools.
type lanceRig struct {
	t        *testing.T
	py, dir  string
	root     string
	tmp      string
	lanceArg []string
}

func newLanceRig(t *testing.T) *lanceRig {
	t.Helper()
	testenv.NeedRoot(t)
	py, dir, err := testbin.LanceTools()
	if err != nil {
		testenv.Unavailable(t, "Lance engine not installed: "+err.Error())
	}
	return &lanceRig{t: t, py: py, dir: dir, root: testenv.GuestDir(t), tmp: testenv.GuestDir(t),
		lanceArg: []string{"--engine", "lance=" + py + " -B -s -E " + filepath.Join(dir, "engine.py")}}
}

// sidecar starts a real sidecar with the Lance engine registered, and extra serve flags; its
// sends are counted.
func (r *lanceRig) sidecar(extra ...string) *counted {
	sc := testsidecar.Start(r.t, testsidecar.Options{Env: append(os.Environ(), "TMPDIR="+r.tmp), Args: append(slices.Clone(r.lanceArg), extra...)})
	return &counted{Client: sc.Client}
}

// ctl runs lancectl.py (Lance's own library, outside steward) and decodes its answer into out.
func (r *lanceRig) ctl(out any, args ...string) {
	r.t.Helper()
	cmd := exec.Command(r.py, append([]string{"-B", filepath.Join(r.dir, "lancectl.py")}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + r.t.TempDir()}
	b, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		r.t.Fatalf("lancectl %v: %v\n%s", args, err, stderr)
	}
	testenv.GuestOwn(r.t, r.root) // pylance wrote as root; the engine's guest writes next
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			r.t.Fatalf("lancectl %v: %v: %s", args, err, b)
		}
	}
}

// create makes dataset path of rows in frags fragments (no vector column) and returns its ref and
// version.
func (r *lanceRig) create(path string, rows, frags int) (rpc.DatasetRef, int64) {
	var created struct {
		Version int64 `json:"version"`
	}
	r.ctl(&created, "create", filepath.Join(r.root, path), "--rows", strconv.Itoa(rows), "--fragments", strconv.Itoa(frags), "--dim", "0")
	return rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + r.root}, Path: path}, created.Version
}

// latestVersion is the version Lance's own library reads as the latest of path.
func (r *lanceRig) latestVersion(path string) int64 {
	var desc struct {
		Version int64 `json:"version"`
	}
	r.ctl(&desc, "describe", filepath.Join(r.root, path))
	return desc.Version
}

type lanceIndexSegments struct {
	NumSegments   int            `json:"num_segments"`
	UnindexedRows int64          `json:"unindexed_rows"`
	IndexedRows   int64          `json:"indexed_rows"`
	Segments      []lanceSegment `json:"segments"`
}

type lanceSegment struct {
	UUID        string   `json:"uuid"`
	FragmentIDs []uint64 `json:"fragment_ids"`
}

// held is the number of tickets build b holds on sc.
func buildHeld(t *testing.T, sc *counted, b string) int {
	t.Helper()
	owner := rpc.ObjectOwner{Kind: rpc.OwnerHostTxn, ID: rpc.BuildOwner(b)}
	var st rpc.ObjectsStatusResult
	if err := sc.Call(context.Background(), rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{Owner: &owner}, &st); err != nil {
		t.Fatal(err)
	}
	if st.Owner == nil {
		return 0
	}
	return st.Owner.Held
}

// boltSegmented is a dispatcher on a fresh bbolt journal driving sidecars as n1, n2, …, one send
// in flight per sidecar (so that segments spread).
func boltSegmented(t *testing.T, refresh func(context.Context, Job) error, sidecars ...Sidecar) (*Dispatcher, Store) {
	t.Helper()
	return boltSegmentedWith(t, func(c *Config) { c.Refresh = refresh }, sidecars...)
}

// boltSegmentedWith is boltSegmented with the dispatcher's config set by with.
func boltSegmentedWith(t *testing.T, with func(*Config), sidecars ...Sidecar) (*Dispatcher, Store) {
	t.Helper()
	store, err := OpenBolt(filepath.Join(t.TempDir(), "jobs.db"), BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := Config{Store: store, Interval: 50 * time.Millisecond, MaxInFlightPerSidecar: 1,
		ExecuteDeadline: 2 * time.Minute, Logger: quietLog()}
	with(&cfg)
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	for i, sc := range sidecars {
		if err := d.AddSidecar("n"+strconv.Itoa(i+1), sc); err != nil {
			t.Fatal(err)
		}
	}
	return d, store
}

// runSegmented submits req, waits for its outcome, and returns the job and its steps.
func runSegmented(ctx context.Context, t *testing.T, d *Dispatcher, store Store, req SegmentedRequest) (Job, []Job) {
	t.Helper()
	j, err := d.SubmitSegmented(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if j, err = d.Wait(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	steps, err := Steps(store, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	return j, steps
}

// readBack checks with Lance's own library that index name of path has k segments and leaves no
// row unindexed, and that no sidecar holds anything of job j's build any more.
func (r *lanceRig) readBack(path, name string, k int, j Job, sidecars ...*counted) lanceIndexSegments {
	r.t.Helper()
	var segs lanceIndexSegments
	r.ctl(&segs, "segments", filepath.Join(r.root, path), name)
	if segs.NumSegments != k || segs.UnindexedRows != 0 {
		r.t.Fatalf("Lance describes %+v", segs)
	}
	for _, sc := range sidecars {
		if n := buildHeld(r.t, sc, j.Segmented.BuildID); n != 0 {
			r.t.Fatalf("build %s still holds %d tickets on a sidecar", j.Segmented.BuildID, n)
		}
	}
	return segs
}

// submitBTree makes dataset path of rows in k fragments, runs d for at most 50 s (the context
// returned) and submits a segmented BTREE of k segments over it.
func (r *lanceRig) submitBTree(d *Dispatcher, path string, rows, k int) (context.Context, rpc.DatasetRef, int64, Job) {
	r.t.Helper()
	ref, pinned := r.create(path, rows, k)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	r.t.Cleanup(cancel)
	go d.Run(ctx)
	j, err := d.SubmitSegmented(ctx, segmentedReq(ref, pinned, k))
	if err != nil {
		r.t.Fatal(err)
	}
	return ctx, ref, pinned, j
}

func segmentedReq(ref rpc.DatasetRef, v int64, k int) SegmentedRequest {
	return SegmentedRequest{Segments: k, Request: Request{Dataset: ref, AdmittedVersion: v, Op: rpc.OpCreate, Engine: "lance",
		Index: rpc.IndexSpec{Name: "idx_id", Columns: []string{"id"}, Type: rpc.IndexBTree}}}
}

// checkSegmented checks a COMMITTED segmented job of k runs: each run written by exactly one
// step sent once, spread over both sidecars, the index read back by Lance over every fragment.
func checkSegmented(t *testing.T, r *lanceRig, s Store, j Job, path string, pinned int64, k int, sidecars ...*counted) {
	t.Helper()
	if j.State != StateCommitted || j.Result == nil || j.Result.CommittedVersion != pinned+1 || j.SlotHeld {
		t.Fatalf("segmented job %s: %+v", j.State, j.Result)
	}
	steps, err := Steps(s, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]int{}
	var sent int64
	for _, st := range steps {
		n := 0
		for _, h := range st.History {
			if h.Event == EventDispatch {
				n++
			}
		}
		if n != 1 || st.State != StateCommitted {
			t.Fatalf("step %s: %s after %d sends: %s", st.ID, st.State, n, historyEvents(st))
		}
		if st.Op == rpc.OpSegment {
			on[st.Sidecar]++
		}
		sent++
	}
	var total int64
	for _, sc := range sidecars {
		total += sc.sends.Load()
	}
	if len(on) != 2 || total != sent || len(steps) != k+1 {
		t.Fatalf("%d steps, segments per sidecar %v, %d sends for %d journaled", len(steps), on, total, sent)
	}
	var segs lanceIndexSegments
	r.ctl(&segs, "segments", filepath.Join(r.root, path), "idx_id")
	if segs.NumSegments != k || segs.UnindexedRows != 0 {
		t.Fatalf("Lance describes %+v", segs)
	}
	for _, sc := range sidecars {
		if n := buildHeld(t, sc, j.Segmented.BuildID); n != 0 {
			t.Fatalf("build %s still holds %d tickets on a sidecar", j.Segmented.BuildID, n)
		}
	}
	t.Logf("segmented BTREE: %d segments over sidecars %v, adopted %v, committed v%d; Lance: num_segments=%d, %d indexed, 0 unindexed rows",
		k, on, j.Segmented.Adopted, pinned+1, segs.NumSegments, segs.IndexedRows)
}

// TestSegmentedLanceAcrossSidecars: a segmented BTREE over 2 sidecars on a bbolt journal: 4
// SEGMENT steps spread over both, the committing sidecar adopts the other's segments, one
// COMMIT_SEGMENTS publishes them, Lance reads 4 segments and no unindexed row.
func TestSegmentedLanceAcrossSidecars(t *testing.T) {
	r := newLanceRig(t)
	a, b := r.sidecar(), r.sidecar()
	var refreshed sync.Map // job id → refreshes
	d, store := boltSegmented(t, func(_ context.Context, j Job) error {
		n, _ := refreshed.LoadOrStore(j.ID, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		return nil
	}, a, b)
	const path, k = "events", 4
	ctx, ref, pinned, j := r.submitBTree(d, path, 8000, k)
	var err error
	if len(j.Segmented.Runs) != k || !slices.Equal(j.Segmented.Sidecars, []string{"n1", "n2"}) {
		t.Fatalf("plan %+v", j.Segmented)
	}
	if j, err = d.Wait(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	checkSegmented(t, r, store, j, path, pinned, k, a, b)
	// The refresh runs once for the job, never for a step (a SEGMENT publishes nothing).
	changed, err := store.Watch(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if j, err = d.Get(j.ID); err != nil || !j.Refresh.pending() {
			break
		}
		if _, ok := <-changed; !ok {
			t.Fatalf("refresh still %s: %v", j.Refresh, ctx.Err())
		}
	}
	var refreshes []string
	refreshed.Range(func(id, n any) bool {
		refreshes = append(refreshes, fmt.Sprintf("%s×%d", id, n.(*atomic.Int64).Load()))
		return true
	})
	if err != nil || j.Refresh != RefreshDone || len(refreshes) != 1 || refreshes[0] != j.ID+"×1" {
		t.Fatalf("refresh %s (%v): hook ran for %v", j.Refresh, err, refreshes)
	}
	if _, err := d.Submit(ctx, createReq(ref, pinned+1, "idx_id", "id")); err != nil {
		t.Fatalf("the name is free again after the segmented job: %v", err)
	}
}

// sendLog is a real sidecar that counts the sends of each invocation id (the sidecar sees one
// index.mutate per send): the proof that no step is sent twice, whichever node sends it.
type sendLog struct {
	*counted
	mu    sync.Mutex
	sends map[string]int
}

func (s *sendLog) Mutate(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
	s.mu.Lock()
	s.sends[p.InvocationID]++
	s.mu.Unlock()
	return s.counted.Mutate(ctx, p)
}

// TestSegmentedLanceFailover: on a shared etcd journal, node A plans a segmented BTREE, builds
// two of its four segments, sends the other two and dies (Close, store closed: its lease goes)
// with both unanswered; node B, driving the same sidecars, resolves the two unanswered steps
// (index.resolve, never a resend), builds them again as new steps, adopts, commits, and Lance
// reads the index back. Every invocation reached a sidecar exactly once.
func TestSegmentedLanceFailover(t *testing.T) {
	r := newLanceRig(t)
	c := testetcd.Shared(t)
	prefix := testetcd.Prefix(t)
	logs := map[string]*sendLog{}
	for _, n := range []string{"n1", "n2"} {
		logs[n] = &sendLog{counted: r.sidecar(), sends: map[string]int{}}
	}
	node := func(name string, s *EtcdStore) *Dispatcher {
		d, err := New(Config{Store: s, Interval: 50 * time.Millisecond, MaxInFlightPerSidecar: 1, ExecuteDeadline: 8 * time.Second,
			ResolveRetryInterval: 200 * time.Millisecond, Logger: quietLog()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		for _, n := range []string{"n1", "n2"} {
			if err := d.AddSidecar(n, logs[n]); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	storeA := openEtcdStore(t, c, prefix, "node-a")
	a := node("node-a", storeA)
	const path, k = "events", 4
	ref, pinned := r.create(path, 8000, k)
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	j, err := a.SubmitSegmented(ctx, segmentedReq(ref, pinned, k))
	if err != nil {
		t.Fatal(err)
	}
	round := func(d *Dispatcher) {
		t.Helper()
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Node A: the first round sends segments 0 and 1 (one per sidecar, the cap); once both are
	// answered the next round sends 2 and 3, and A dies before their answers.
	round(a)
	waitFirstTwo(ctx, t, a, j.ID)
	round(a)
	inFlight := a.InFlight()
	a.Close()
	storeA.Close()
	if inFlight["n1"] != 1 || inFlight["n2"] != 1 {
		t.Fatalf("node A died with %v in flight, want one per sidecar", inFlight)
	}
	// Node B continues from the journal alone.
	b := node("node-b", openEtcdStore(t, c, prefix, "node-b"))
	go b.Run(ctx)
	if j, err = b.Wait(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	steps, err := Steps(b.store, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	var resolved, rebuilt, committed int
	for _, s := range steps {
		switch {
		case s.Resolution != nil && s.Node == "node-a":
			resolved++
		case strings.HasSuffix(s.ID, ".a2") && s.Node == "node-b":
			rebuilt++
		}
		if s.State == StateCommitted && s.Op == rpc.OpSegment {
			committed++
		}
		for _, l := range logs {
			l.mu.Lock()
			n := l.sends[s.InvocationID]
			l.mu.Unlock()
			if n > 1 {
				t.Fatalf("step %s invocation %s reached a sidecar %d times", s.ID, s.InvocationID, n)
			}
		}
	}
	if j.State != StateCommitted || j.Result.CommittedVersion != pinned+1 || resolved != 2 || rebuilt != 2 || committed != k {
		t.Fatalf("job %s; %d steps: %d of node A resolved, %d rebuilt by node B, %d segments written", j.State, len(steps), resolved, rebuilt, committed)
	}
	var segs lanceIndexSegments
	r.ctl(&segs, "segments", filepath.Join(r.root, path), "idx_id")
	if segs.NumSegments != k || segs.UnindexedRows != 0 {
		t.Fatalf("Lance describes %+v", segs)
	}
	total := 0
	for _, l := range logs {
		l.mu.Lock()
		for _, n := range l.sends {
			total += n
		}
		l.mu.Unlock()
		if n := buildHeld(t, l.counted, j.Segmented.BuildID); n != 0 {
			t.Fatalf("build %s still holds %d tickets on a sidecar", j.Segmented.BuildID, n)
		}
	}
	t.Logf("node A built 2 segments and died with 2 sent; node B resolved them (NOT_COMMITTED), rebuilt them, adopted %v, committed v%d; %d steps, %d sends; Lance: num_segments=%d, 0 unindexed rows",
		j.Segmented.Adopted, pinned+1, len(steps), total, segs.NumSegments)
}

// TestSegmentedLanceSegmentFails: a SEGMENT the engine fails (an index on a column the dataset
// lacks) fails the job NOT_COMMITTED: no further step is created, the build's custody is
// abandoned (objects.abandon of build:<id>), nothing is committed and the name is free again.
func TestSegmentedLanceSegmentFails(t *testing.T) {
	r := newLanceRig(t)
	sc := r.sidecar()
	d, store := boltSegmented(t, nil, sc)
	const path = "events"
	ref, pinned := r.create(path, 4000, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	go d.Run(ctx)
	req := segmentedReq(ref, pinned, 2)
	req.Index.Columns = []string{"no_such_column"}
	j, steps := runSegmented(ctx, t, d, store, req)
	failed := 0
	for _, s := range steps {
		if s.Op != rpc.OpSegment {
			t.Fatalf("step %s (%s) created after a segment failed", s.ID, s.Op)
		}
		if classifyStep(s) == stepFailed {
			failed++
		}
	}
	if j.State != StateNotCommitted || j.SlotHeld || failed == 0 || j.Segmented.Failed == "" || !j.hasEvent(EventStep) {
		t.Fatalf("job %s (slot held %t), %d failed steps of %d, failed %q: %s", j.State, j.SlotHeld, failed, len(steps), j.Segmented.Failed, historyEvents(j))
	}
	if v := r.latestVersion(path); v != pinned {
		t.Fatalf("dataset at v%d after a failed build pinned at v%d", v, pinned)
	}
	if n := buildHeld(t, sc, j.Segmented.BuildID); n != 0 {
		t.Fatalf("build holds %d tickets after the job failed", n)
	}
	if _, err := d.Submit(ctx, createReq(ref, pinned, "idx_id", "id")); err != nil {
		t.Fatalf("the name is free again after the failed job: %v", err)
	}
	t.Logf("segment failed (%s): job NOT_COMMITTED after %d steps, build abandoned, dataset still v%d", j.Segmented.Failed, len(steps), pinned)
}

// TestSegmentedLanceCancel: a segmented job cancelled after its first steps were sent creates no
// further step, journals a cancel of every unsettled step (index.cancel for the sent one),
// abandons the build and ends NOT_COMMITTED with nothing committed and nothing held.
func TestSegmentedLanceCancel(t *testing.T) {
	r := newLanceRig(t)
	sc := r.sidecar()
	d, store := boltSegmented(t, nil, sc)
	const path = "events"
	ref, pinned := r.create(path, 4000, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	j, err := d.SubmitSegmented(ctx, segmentedReq(ref, pinned, 3))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := d.Round(ctx); err != nil || st.Dispatched != 1 {
		t.Fatalf("first round: %+v, %v", st, err)
	}
	if _, err := d.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	go d.Run(ctx)
	if j, err = d.Wait(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	steps, err := Steps(store, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for _, s := range steps {
		if s.InvocationID != "" {
			sent++
		}
		if s.Cancel == nil && s.State != StateCommitted {
			t.Fatalf("step %s %s without a cancel", s.ID, s.State)
		}
	}
	if j.State != StateNotCommitted || len(steps) != 3 || sent != 1 || sc.sends.Load() != 1 {
		t.Fatalf("job %s: %d steps, %d sent (%d sends): %s", j.State, len(steps), sent, sc.sends.Load(), historyEvents(j))
	}
	if v := r.latestVersion(path); v != pinned {
		t.Fatalf("dataset at v%d after a cancelled build pinned at v%d", v, pinned)
	}
	if n := buildHeld(t, sc, j.Segmented.BuildID); n != 0 {
		t.Fatalf("build holds %d tickets after the job was cancelled", n)
	}
	t.Logf("cancelled after 1 of 3 segments was sent: NOT_COMMITTED (%s), 1 send, build abandoned", j.Segmented.Failed)
}

// TestSegmentedLanceIVFPQ: a segmented IVF_PQ over 2 sidecars: one TRAIN on the committing
// sidecar, 3 SEGMENTs sharing its centroids and codebook, adoption, one commit; Lance reads 3
// segments and no unindexed row.
func TestSegmentedLanceIVFPQ(t *testing.T) {
	r := newLanceRig(t)
	a, b := r.sidecar(), r.sidecar()
	const k = 3
	j, steps, pinned := r.runIVFPQ(k, a, b)
	if j.State != StateCommitted || len(steps) != k+2 || steps[len(steps)-1].Op != rpc.OpTrain {
		logSteps(t, steps)
		t.Fatalf("job %s (%s): %d steps", j.State, j.Segmented.Failed, len(steps))
	}
	segs := r.readBack("vectors", "idx_vec", k, j, a, b)
	t.Logf("IVF_PQ: TRAIN + %d segments over 2 sidecars, adopted %v, committed v%d; Lance: num_segments=%d, 0 unindexed rows",
		k, j.Segmented.Adopted, pinned+1, segs.NumSegments)
}

// runIVFPQ runs a segmented IVF_PQ job of k segments over a new 6-fragment dataset "vectors" on
// sidecars a and b, and returns the settled job, its steps and its pinned version.
func (r *lanceRig) runIVFPQ(k int, a, b Sidecar) (Job, []Job, int64) {
	t := r.t
	t.Helper()
	d, store := boltSegmented(t, nil, a, b)
	const path = "vectors"
	var created struct {
		Version int64 `json:"version"`
	}
	r.ctl(&created, "create", filepath.Join(r.root, path), "--rows", "12000", "--fragments", "6")
	ref := rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + r.root}, Path: path}
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	go d.Run(ctx)
	req := segmentedReq(ref, created.Version, k)
	req.Index = rpc.IndexSpec{Name: "idx_vec", Columns: []string{"vec"}, Type: "IVF_PQ",
		Params: map[string]string{"num_partitions": "4", "num_sub_vectors": "16", "sample_rate": "16"}}
	j, steps := runSegmented(ctx, t, d, store, req)
	return j, steps, created.Version
}

func logSteps(t *testing.T, steps []Job) {
	for _, s := range steps {
		t.Logf("step %s %s %s: %s", s.ID, s.Op, s.State, stepWhy(s))
	}
}

// trainCrash is a real sidecar whose first TRAIN is sent with the engine's test fault
// crash_after_build: it dies right after writing its training.
type trainCrash struct {
	*counted
	crashed atomic.Bool
}

func (c *trainCrash) Mutate(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
	if p.Op == rpc.OpTrain && c.crashed.CompareAndSwap(false, true) {
		p.Fault = "crash_after_build"
	}
	return c.counted.Mutate(ctx, p)
}

// TestSegmentedLanceTrainRebuilt: a TRAIN that dies after writing its training (INDETERMINATE)
// is settled by index.resolve (NOT_COMMITTED: custody deletes the training) and sent again as a
// new step, "<job>.train.a2"; its models serve every segment and the job commits. (An OOM-killed
// TRAIN is not retried: TestClassifyStep.)
func TestSegmentedLanceTrainRebuilt(t *testing.T) {
	r := newLanceRig(t)
	a, b := &trainCrash{counted: r.sidecar()}, r.sidecar()
	const k = 2
	j, steps, pinned := r.runIVFPQ(k, a, b)
	byID := map[string]Job{}
	for _, s := range steps {
		byID[s.ID] = s
	}
	first, again := byID[StepID(j.ID, stepTrain, 0, 1)], byID[StepID(j.ID, stepTrain, 0, 2)]
	if j.State != StateCommitted || len(steps) != k+3 || j.Segmented.TrainAttempts != 2 ||
		first.State != StateNotCommitted || first.Resolution == nil || first.Result == nil || first.Result.Phase != rpc.PhaseIndeterminate ||
		again.State != StateCommitted || again.Result == nil || again.Result.IndexUUID == "" {
		logSteps(t, steps)
		t.Fatalf("job %s (%s): %d steps, %d TRAIN attempts", j.State, j.Segmented.Failed, len(steps), j.Segmented.TrainAttempts)
	}
	for _, s := range steps {
		if s.Op == rpc.OpSegment && s.Segment.TrainUUID != again.Result.IndexUUID {
			t.Fatalf("segment %s used training %s, not the rebuilt %s", s.ID, s.Segment.TrainUUID, again.Result.IndexUUID)
		}
	}
	segs := r.readBack("vectors", "idx_vec", k, j, a.counted, b)
	t.Logf("TRAIN crashed after writing its training, resolved NOT_COMMITTED, trained again as %s; committed v%d, Lance: num_segments=%d",
		again.ID, pinned+1, segs.NumSegments)
}

// TestSegmentedLanceIndeterminateRebuilt: every segment's first build crashes right after Lance
// wrote it (test fault crash_after_build: INDETERMINATE); each is settled by index.resolve
// (NOT_COMMITTED), built again as a new step with a new uuid, and the job commits. Its progress
// (Config.Progress, SegmentedPlan.Done) counts the written segments only: rising to 3/3 through
// the crashes and rebuilds, each report journaled before it is made, all before the outcome.
func TestSegmentedLanceIndeterminateRebuilt(t *testing.T) {
	r := newLanceRig(t)
	a, b := r.sidecar(), r.sidecar()
	var mu sync.Mutex
	var reports []JobProgress
	var store Store
	d, store := boltSegmentedWith(t, func(c *Config) {
		c.Progress = func(p JobProgress) {
			j, err := Get(store, p.Job) // durable before it is reported; the job not settled yet
			mu.Lock()
			defer mu.Unlock()
			if err != nil || j.Segmented.Done != p.Done || j.State.Settled() {
				t.Errorf("progress %+v reported with the job %s, journaled done %d (%v)", p, j.State, j.Segmented.Done, err)
			}
			reports = append(reports, p)
		}
	}, a, b)
	const path, k = "events", 3
	ref, pinned := r.create(path, 4000, k)
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	go d.Run(ctx)
	req := segmentedReq(ref, pinned, k)
	req.Fault = "crash_after_build"
	j, steps := runSegmented(ctx, t, d, store, req)
	uuids := map[string]bool{}
	var crashed, rebuilt int
	for _, s := range steps {
		if s.Op != rpc.OpSegment {
			continue
		}
		switch {
		case strings.HasSuffix(s.ID, ".a1") && s.Result != nil && s.Result.Phase == rpc.PhaseIndeterminate && s.Resolution != nil &&
			s.State == StateNotCommitted:
			crashed++
		case strings.HasSuffix(s.ID, ".a2") && s.State == StateCommitted && s.Result.IndexUUID != "" && !uuids[s.Result.IndexUUID]:
			rebuilt++
			uuids[s.Result.IndexUUID] = true
		default:
			t.Fatalf("step %s: %s %s", s.ID, s.State, stepWhy(s))
		}
	}
	if j.State != StateCommitted || crashed != k || rebuilt != k {
		t.Fatalf("job %s (%s): %d crashed, %d rebuilt", j.State, j.Segmented.Failed, crashed, rebuilt)
	}
	segs := r.readBack(path, "idx_id", k, j, a, b)
	mu.Lock()
	defer mu.Unlock()
	for i, p := range reports {
		if p.Job != j.ID || p.Total != k || p.Done < 1 || (i > 0 && p.Done <= reports[i-1].Done) {
			t.Fatalf("progress %+v: not rising to %d/%d", reports, k, k)
		}
	}
	if len(reports) == 0 || reports[len(reports)-1].Done != k || j.Segmented.Done != k {
		t.Fatalf("progress %+v, journaled done %d: want it to end at %d/%d", reports, j.Segmented.Done, k, k)
	}
	t.Logf("%d segments crashed after Lance wrote them (INDETERMINATE), resolved NOT_COMMITTED, rebuilt with new uuids; committed v%d, Lance: num_segments=%d, 0 unindexed rows; progress %v",
		crashed, pinned+1, segs.NumSegments, reports)
}

// abandonGate is a real sidecar whose objects.abandon fails while the gate is shut: a plan
// sidecar that cannot be reached when the build is to be ended (restarting, say).
type abandonGate struct {
	*counted
	open    atomic.Bool
	refused atomic.Int64
}

func (g *abandonGate) Call(ctx context.Context, method string, params, result any) error {
	if method == rpc.MethodObjectsAbandon && !g.open.Load() {
		g.refused.Add(1)
		return fmt.Errorf("%w: objects.abandon refused by the test's gate", ErrNoSidecar)
	}
	return g.counted.Call(ctx, method, params, result)
}

// TestSegmentedLanceCommittedEndsBuildFirst: a COMMITTED commit settles its job only once every
// plan sidecar has ended the build's custody (objects.abandon): while one cannot, the job stays
// RUNNING and the abandon is retried each round; once it can, the job is COMMITTED and no sidecar
// holds anything of the build. (Settled at once, a build whose commit was resolved kept its
// custody for good on a sidecar restarting at that moment: found by the segment campaign.)
func TestSegmentedLanceCommittedEndsBuildFirst(t *testing.T) {
	r := newLanceRig(t)
	a := r.sidecar()
	b := &abandonGate{counted: r.sidecar()}
	d, store := boltSegmented(t, nil, a, b)
	const path, k = "events", 2
	ctx, _, pinned, j := r.submitBTree(d, path, 4000, k)
	var err error
	for b.refused.Load() < 3 { // three rounds found the commit done and could not end the build
		if err := ctx.Err(); err != nil {
			t.Fatalf("objects.abandon refused %d times: %v", b.refused.Load(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if j, err = d.Get(j.ID); err != nil || j.State.Settled() {
		t.Fatalf("job %s (%v) while its build could not be ended on n2", j.State, err)
	}
	steps, err := Steps(store, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c := steps[slices.IndexFunc(steps, func(s Job) bool { return s.Op == rpc.OpCommitSegments })]; c.State != StateCommitted {
		t.Fatalf("commit step %s", c.State)
	}
	b.open.Store(true)
	if j, err = d.Wait(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	checkSegmented(t, r, store, j, path, pinned, k, a, b.counted)
	t.Logf("commit COMMITTED; job RUNNING through %d refused abandons, COMMITTED once n2 answered", b.refused.Load())
}

// waitFirstTwo waits until node a's first two segments of job id are written and its sends have
// ended (an answer is journaled before its sender frees its sidecar's slot).
func waitFirstTwo(ctx context.Context, t *testing.T, a *Dispatcher, id string) {
	t.Helper()
	for i := range 2 {
		if s, err := a.Wait(ctx, StepID(id, rpc.OpSegment, i, 1)); err != nil || s.State != StateCommitted {
			t.Fatalf("segment %d on node A: %s %v", i, s.State, err)
		}
	}
	for len(a.InFlight()) > 0 { // an answer is journaled before its sender frees its sidecar's slot
		select {
		case <-ctx.Done():
			t.Fatalf("node A's sends never ended: %v", a.InFlight())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
