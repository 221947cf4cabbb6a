package dispatch

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testetcd"
	"github.com/cba1309c/steward/rpc"
)

// ownNode is a dispatcher on a shared etcd journal driving one sidecar of its own.
func ownNode(t *testing.T, s *EtcdStore, name string, sc Sidecar) *Dispatcher {
	t.Helper()
	d, err := New(Config{Store: s, Interval: 50 * time.Millisecond, MaxInFlightPerSidecar: 2, ExecuteDeadline: 8 * time.Second,
		ResolveRetryInterval: 200 * time.Millisecond, SidecarGoneAfter: 500 * time.Millisecond, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.AddSidecar(name, sc); err != nil {
		t.Fatal(err)
	}
	return d
}

// deadNodeA runs node A of TestSegmentedLanceOwnSidecarsCancelled in this process: it plans a
// segmented BTREE of ownK segments over its own sidecar sa, builds two, sends the other two and
// dies with sa (its journal claim given up, sa SIGKILLed) before their answers. It returns the job
// and node B, which never drove sa.
type deadNodeA struct {
	r      *lanceRig
	sa, sb *sendLog
	b      *Dispatcher
	j      Job
	pinned int64
	ledger string // sa's ledger file
}

const ownPath, ownK = "events", 4

func runDeadNodeA(ctx context.Context, t *testing.T) deadNodeA {
	t.Helper()
	r := newLanceRig(t)
	c := testetcd.Shared(t)
	prefix := testetcd.Prefix(t)
	ledger := filepath.Join(t.TempDir(), "sa-ledger.db") // sa's successor starts on it
	sa := &sendLog{counted: r.sidecar("--ledger-path", ledger), sends: map[string]int{}}
	sb := &sendLog{counted: r.sidecar(), sends: map[string]int{}}
	storeA := openEtcdStore(t, c, prefix, "node-a")
	a := ownNode(t, storeA, "sa", sa)
	ref, pinned := r.create(ownPath, 8000, ownK)
	j, err := a.SubmitSegmented(ctx, segmentedReq(ref, pinned, ownK))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(j.Segmented.Sidecars, []string{"sa"}) || j.Segmented.Committer != "sa" {
		t.Fatalf("node A planned over %v, committer %s", j.Segmented.Sidecars, j.Segmented.Committer)
	}
	round := func() {
		t.Helper()
		if _, err := a.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	round() // segments 0 and 1 to sa (its cap of 2)
	waitFirstTwo(ctx, t, a, j.ID)
	round() // segments 2 and 3 to sa; node A and sa die before their answers
	if n := a.InFlight()["sa"]; n != 2 {
		t.Fatalf("node A has %d sends in flight to sa, want 2", n)
	}
	a.Close()
	storeA.Close()
	if err := syscall.Kill(sa.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-sa.Exited()
	b := ownNode(t, openEtcdStore(t, c, prefix, "node-b"), "sb", sb)
	return deadNodeA{r: r, sa: sa, sb: sb, b: b, j: j, pinned: pinned, ledger: ledger}
}

// TestSegmentedLanceNodeKilled: each node drives its own sidecar, as go-plugin hosts do. Node A
// is a host process with its own Lance sidecar sa (its child); it plans a segmented BTREE of 4
// segments over sa, and is SIGKILLed as its third send leaves (sa dies with it: its host's pipe
// closes). Node B, in this process with its own sidecar sb, never drove sa: once A's lease has
// expired it finds sa announced by no node, moves the plan to sb (sa gone, committer sa → sb),
// resolves A's unanswered steps through sb (never a resend), builds them again on sb, takes the
// segments sa wrote over from storage (prefix tickets on sb), commits, and Lance reads them all.
// sa's answered segments are published, not rebuilt; nothing of the build is left in storage or
// in sb's ledger; no invocation reached a sidecar twice.
func TestSegmentedLanceNodeKilled(t *testing.T) {
	r := newLanceRig(t)
	c := testetcd.Shared(t)
	prefix := testetcd.Prefix(t)
	const path, k = ownPath, ownK
	ref, pinned := r.create(path, 8000, k)
	req, _ := json.Marshal(segmentedReq(ref, pinned, k))
	args, _ := json.Marshal(r.lanceArg)
	a := startClusterNode(t, c, prefix, "node-a", "TMPDIR="+r.tmp, clusterSidecarName+"=sa",
		clusterSidecarArgs+"="+string(args), clusterSegmented+"="+string(req))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var id string
	select {
	case id = <-a.job:
	case <-ctx.Done():
		t.Fatal("node A never submitted its job")
	}
	for len(a.sent()) < 3 {
		select {
		case <-ctx.Done():
			t.Fatalf("node A sent %v", a.sent())
		case <-time.After(2 * time.Millisecond):
		}
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	sb := &sendLog{counted: r.sidecar(), sends: map[string]int{}}
	b := ownNode(t, openEtcdStore(t, c, prefix, "node-b"), "sb", sb)
	go b.Run(ctx)
	j, err := b.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	steps, err := Steps(b.store, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	logSteps(t, steps)
	sentByA := a.sent() // complete: the reader has seen the dead process's last line by now
	sends := map[string]int{}
	for _, inv := range sentByA {
		sends[inv]++
	}
	sb.mu.Lock()
	for inv, n := range sb.sends {
		sends[inv] += n
	}
	sb.mu.Unlock()
	fromA, resolved := checkTakenOver(t, r, sb.counted, j, steps, sends)
	if resolved == 0 || fromA == 0 || len(sentByA) < 3 {
		t.Fatalf("node A sent %d, answered %d segments, %d of its steps resolved: not the death this test is for", len(sentByA), fromA, resolved)
	}
	t.Logf("node A (a process) sent %d steps and was SIGKILLed with its sidecar sa; node B found sa gone (committer sa → sb), resolved %d (NOT_COMMITTED), took sa's %d segment(s) over from storage, committed v%d",
		len(sentByA), resolved, fromA, pinned+1)
}

// checkTakenOver checks a job that node B finished after node A died with sa: COMMITTED at
// pinned+1, sa gone and sb the committer, sa's steps sent and unanswered resolved NOT_COMMITTED,
// no invocation sent twice (sends: per invocation, over both nodes), Lance reading exactly the
// answered segments with sa's among them, and nothing of the build left in storage or on sb. It
// returns the number of segments sa wrote that were published and of sa's steps resolved.
func checkTakenOver(t *testing.T, r *lanceRig, sb *counted, j Job, steps []Job, sends map[string]int) (fromA, resolved int) {
	t.Helper()
	pinned := j.AdmittedVersion
	if j.State != StateCommitted || j.Result == nil || j.Result.CommittedVersion != pinned+1 {
		t.Fatalf("job %s %+v: %s", j.State, j.Result, historyEvents(j))
	}
	sp := j.Segmented
	if !slices.Equal(sp.Gone, []string{"sa"}) || sp.Committer != "sb" || !slices.Contains(sp.Stranded, "sa") || !j.hasEvent(EventSidecarGone) {
		t.Fatalf("plan after node A died: gone %v, committer %s, stranded %v, adopted %v: %s", sp.Gone, sp.Committer, sp.Stranded, sp.Adopted, historyEvents(j))
	}
	written := map[string]string{} // uuid → the sidecar that wrote it
	for _, s := range steps {
		if s.Resolution != nil && s.Sidecar == "sa" {
			if s.Resolution.Outcome != rpc.OutcomeNotCommitted {
				t.Fatalf("step %s of the dead node resolved %s", s.ID, s.Resolution.Outcome)
			}
			resolved++
		}
		if s.Op == rpc.OpSegment && classifyStep(s) == stepDone {
			written[s.Result.IndexUUID] = s.Sidecar
		}
		if s.InvocationID != "" && sends[s.InvocationID] > 1 {
			t.Fatalf("step %s invocation %s reached a sidecar %d times", s.ID, s.InvocationID, sends[s.InvocationID])
		}
	}
	var segs lanceIndexSegments
	r.ctl(&segs, "segments", filepath.Join(r.root, ownPath), "idx_id")
	for _, s := range segs.Segments {
		by, ok := written[s.UUID]
		if !ok {
			t.Fatalf("Lance reads segment %s, which no answered step wrote", s.UUID)
		}
		if by == "sa" {
			fromA++
		}
	}
	if segs.NumSegments != ownK || len(written) != ownK || segs.UnindexedRows != 0 || (fromA > 0) != slices.Contains(sp.Adopted, "sa") {
		t.Fatalf("Lance describes %+v; %d answered segments, %d of the published written by sa, adopted %v", segs, len(written), fromA, sp.Adopted)
	}
	if n := buildHeld(t, sb, sp.BuildID); n != 0 {
		t.Fatalf("build %s still holds %d tickets on sb", sp.BuildID, n)
	}
	area := filepath.Join(r.root, ownPath, rpc.BuildArea(sp.BuildID))
	if left, err := os.ReadDir(area); err == nil && len(left) > 0 {
		t.Fatalf("the build's area %s still holds %d entries", area, len(left))
	}
	// A step killed with sa may have written a folder whose uuid only sa's ledger knew: it is
	// left to objects.sweep. No folder an answer named is left unpublished.
	dirs, err := os.ReadDir(filepath.Join(r.root, ownPath, "_indices"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range dirs {
		if _, ok := written[e.Name()]; ok && !slices.ContainsFunc(segs.Segments, func(s lanceSegment) bool { return s.UUID == e.Name() }) {
			t.Fatalf("segment folder %s was answered and is neither published nor deleted", e.Name())
		}
	}
	return fromA, resolved
}

// TestSegmentedLanceOwnSidecarsCancelled: node A dies with sa (runDeadNodeA), then node B cancels
// the job. Node B finds sa gone, waits for the two unanswered steps to be resolved through sb,
// takes what sa held over from storage (the build's area and the two segments sa wrote) and
// abandons it on sb: the job ends NOT_COMMITTED with no new version, no object of the build in
// storage and nothing held on sb. sa comes back on its ledger meanwhile, added under its name:
// it still records the build's objects, and the job's end releases them there.
func TestSegmentedLanceOwnSidecarsCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 75*time.Second)
	defer cancel()
	x := runDeadNodeA(ctx, t)
	if _, err := x.b.Cancel(ctx, x.j.ID); err != nil {
		t.Fatal(err)
	}
	go x.b.Run(ctx)
	// Once node B has found sa gone, sa comes back on its ledger and node B drives it under its
	// name: the job's end releases what it still records of the build (never deletes it).
	for {
		p, err := x.b.Get(x.j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(p.Segmented.Gone, "sa") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("node B never found sa gone: %s", historyEvents(p))
		case <-time.After(20 * time.Millisecond):
		}
	}
	back := x.r.sidecar("--ledger-path", x.ledger)
	heldBack := buildHeld(t, back, x.j.Segmented.BuildID)
	if err := x.b.AddSidecar("sa", back); err != nil {
		t.Fatal(err)
	}
	j, err := x.b.Wait(ctx, x.j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n := buildHeld(t, back, j.Segmented.BuildID); heldBack == 0 || n != 0 {
		t.Fatalf("sa came back holding %d tickets of the build, and holds %d after the job", heldBack, n)
	}
	steps, err := Steps(x.b.store, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	logSteps(t, steps)
	sp := j.Segmented
	if j.State != StateNotCommitted || !slices.Equal(sp.Gone, []string{"sa"}) || !strings.HasPrefix(sp.Failed, "cancelled") {
		t.Fatalf("job %s, gone %v, failed %q: %s", j.State, sp.Gone, sp.Failed, historyEvents(j))
	}
	if v := x.r.latestVersion(ownPath); v != x.pinned {
		t.Fatalf("a cancelled job left version %d (pinned %d)", v, x.pinned)
	}
	written := builtBy(steps, "sa")
	if len(written) != 2 {
		t.Fatalf("sa wrote %d segments before it died, want 2", len(written))
	}
	for _, u := range written {
		if _, err := os.Stat(filepath.Join(x.r.root, ownPath, "_indices", u)); !os.IsNotExist(err) {
			t.Fatalf("segment %s that sa wrote is still in storage (%v)", u, err)
		}
	}
	area := filepath.Join(x.r.root, ownPath, rpc.BuildArea(sp.BuildID))
	if left, err := os.ReadDir(area); err == nil && len(left) > 0 {
		t.Fatalf("the build's area %s still holds %d entries", area, len(left))
	}
	if n := buildHeld(t, x.sb.counted, sp.BuildID); n != 0 {
		t.Fatalf("build %s still holds %d tickets on sb", sp.BuildID, n)
	}
	t.Logf("cancelled after sa died: NOT_COMMITTED, sa's 2 segments and the build's area taken over by sb and deleted, version still %d; sa came back holding %d tickets of the build and released them",
		x.pinned, heldBack)
}
