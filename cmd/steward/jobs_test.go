package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/internal/boltfile/boltfiletest"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testetcd"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/hashicorp/go-hclog"
)

// lostSidecar answers every mutation with a lost connection, which leaves the job UNKNOWN with
// its slot held: the stuck job an operator force-releases.
type lostSidecar struct{ done chan struct{} }

func (lostSidecar) Epoch() string             { return "cli-test-epoch" }
func (s lostSidecar) Exited() <-chan struct{} { return s.done }
func (lostSidecar) Mutate(context.Context, rpc.MutateParams) (rpc.MutateResult, error) {
	return rpc.MutateResult{}, rpc.ErrConnectionLost
}
func (lostSidecar) Resolve(context.Context, rpc.ResolveParams) (rpc.ResolveResult, error) {
	return rpc.ResolveResult{}, rpc.ErrStorageUnavailable
}

// jobsStore writes a store with one UNKNOWN job and one PENDING job and returns its path and ids.
func jobsStore(t *testing.T) (path, unknown, pending string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "jobs.db")
	s, err := dispatch.OpenBolt(path, dispatch.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unknown, pending = fillJobs(t, s, nil)
	s.Close()
	return path, unknown, pending
}

// fillJobs writes one UNKNOWN job and one PENDING job into s through a dispatcher on clock now
// (nil: the wall clock) and returns their ids.
func fillJobs(t *testing.T, s dispatch.Store, now func() time.Time) (unknown, pending string) {
	t.Helper()
	d, err := dispatch.New(dispatch.Config{Store: s, Logger: hclog.NewNullLogger(), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	req := func(name string) dispatch.Request {
		return dispatch.Request{
			Dataset:         rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file:///data"}, Path: "warehouse/events"},
			AdmittedVersion: 3, Op: rpc.OpCreate,
			Index: rpc.IndexSpec{Name: name, Columns: []string{"id"}, Type: rpc.IndexBTree},
		}
	}
	ctx := context.Background()
	first := req("events_id")
	first.ID = "01a2-unknown" // fixed ids: the bbolt and etcd listings compare equal
	j, err := d.Submit(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	d.AddSidecar("node-1", lostSidecar{done: make(chan struct{})})
	for j.Result == nil {
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
		if j, err = d.Get(j.ID); err != nil {
			t.Fatal(err)
		}
	}
	d.RemoveSidecar("node-1")
	second := req("events_name")
	second.ID = "01a2-pending"
	p, err := d.Submit(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	return j.ID, p.ID
}

func runJ(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runJobs(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestJobsCLI(t *testing.T) {
	path, unknown, pending := jobsStore(t)
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
		wantErr  string
	}{
		{"list", []string{"list", "--store", path}, 0, []string{unknown + "  UNKNOWN", pending + "  PENDING", "2 job(s)", "warehouse/events"}, ""},
		{"list by state", []string{"list", "--store", path, "--state", "unknown"}, 0, []string{unknown, "1 job(s)"}, ""},
		{"list bad state", []string{"list", "--store", path, "--state", "DONE"}, 2, nil, "unknown state"},
		{"show", []string{"show", unknown, "--store", path}, 0, []string{"state             UNKNOWN", "slot              held", "node-1 epoch cli-test-epoch", "dispatch", "answer"}, ""},
		{"show missing", []string{"show", "--store", path, "nope"}, 1, nil, "not found"},
		{"release without reason", []string{"release", "--store", path, "--by", "alice", unknown}, 2, nil, "--reason"},
		{"release pending", []string{"release", "--store", path, "--by", "alice", "--reason", "x", pending}, 1, nil, "only an UNKNOWN job"},
		{"release", []string{"release", "--store", path, "--by", "alice", "--reason", "storage gone (OPS-7)", unknown}, 0, []string{"released job " + unknown}, ""},
		{"show released", []string{"show", "--store", path, unknown}, 0, []string{"force-released", "alice", "storage gone (OPS-7)"}, ""},
		{"release twice", []string{"release", "--store", path, "--by", "bob", "--reason", "again", unknown}, 1, nil, "only an UNKNOWN job"},
		{"cancel pending", []string{"cancel", "--store", path, "--by", "alice", "--reason", "wrong column", pending}, 0, []string{"cancelled job " + pending + " before any send: NOT_COMMITTED"}, ""},
		{"show cancelled", []string{"show", "--store", path, pending}, 0, []string{"state             NOT_COMMITTED", "by alice wrong column", "cancel", "cancelled before any send"}, ""},
		{"cancel twice", []string{"cancel", "--store", path, pending}, 0, []string{"is NOT_COMMITTED: a cancel by alice was journaled at"}, ""},
		{"cancel released", []string{"cancel", "--store", path, unknown}, 0, []string{"is UNKNOWN: nothing to cancel"}, ""},
		{"cancel missing", []string{"cancel", "--store", path, "nope"}, 1, nil, "not found"},
		{"no store", []string{"list"}, 2, nil, "--store is required"},
		{"missing store file", []string{"list", "--store", filepath.Join(t.TempDir(), "none.db")}, 1, nil, "open store"},
		{"two ids", []string{"show", "--store", path, "a", "b"}, 2, nil, "want 1 job id"},
		{"unknown command", []string{"purge"}, 2, nil, "unknown jobs command"},
		{"no args", nil, 2, nil, "usage:"},
		{"help", []string{"--help"}, 0, nil, "usage:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runJ(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Fatalf("output lacks %q:\n%s", w, out)
				}
			}
			if !strings.Contains(errOut, tc.wantErr) {
				t.Fatalf("stderr lacks %q:\n%s", tc.wantErr, errOut)
			}
		})
	}
}

// TestJobsListAligned checks that the table's columns line up.
func TestJobsListAligned(t *testing.T) {
	path, _, _ := jobsStore(t)
	_, out, _ := runJ(t, "list", "--store", path)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	col := func(line, word string) int { return strings.Index(line, word) }
	header := lines[0]
	for _, l := range lines[1:3] {
		for _, w := range []string{"STATE", "OP", "DATASET"} {
			fields := regexp.MustCompile(`\S+`).FindAllStringIndex(l, -1)
			found := false
			for _, f := range fields {
				found = found || f[0] == col(header, w)
			}
			if !found {
				t.Fatalf("column %s not aligned:\n%s", w, out)
			}
		}
	}
}

// TestJobsWhileDispatcherRuns: list and show work while a real dispatcher holds the store open
// and keeps committing to it (they used to fail with ErrStoreLocked); release, a write, still
// needs the lock and says so.
func TestJobsWhileDispatcherRuns(t *testing.T) {
	path, unknown, _ := jobsStore(t)
	s, err := dispatch.OpenBolt(path, dispatch.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := dispatch.New(dispatch.Config{Store: s, Logger: hclog.NewNullLogger(), Interval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.Run(ctx)
	var submitted atomic.Int64
	done := make(chan struct{})
	go func() { // commits while the CLI reads
		defer close(done)
		for n := 0; ctx.Err() == nil && n < 60; n++ {
			if _, err := d.Submit(ctx, dispatch.Request{
				Dataset:         rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file:///data"}, Path: fmt.Sprintf("warehouse/t%02d", n)},
				AdmittedVersion: 1, Op: rpc.OpCreate, Index: rpc.IndexSpec{Name: "id_idx", Columns: []string{"id"}, Type: rpc.IndexBTree},
			}); err != nil {
				t.Error(err)
				return
			}
			submitted.Add(1)
		}
	}()
	last, lists, during := 0, 0, 0
	for running := true; running || lists < 3; lists++ {
		select {
		case <-done:
			running = false
		default:
			during++
		}
		code, out, errOut := runJ(t, "list", "--store", path)
		if code != 0 {
			t.Fatalf("list while the dispatcher runs: exit %d: %s", code, errOut)
		}
		var n int
		if _, err := fmt.Sscanf(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:], "%d job(s)", &n); err != nil || n < last || n < 2 {
			t.Fatalf("list %d: %d jobs after %d (%v):\n%s", lists, n, last, err, out)
		}
		last = n
	}
	code, out, errOut := runJ(t, "show", "--store", path, unknown)
	if code != 0 || !strings.Contains(out, "UNKNOWN") {
		t.Fatalf("show while the dispatcher runs: exit %d: %s%s", code, out, errOut)
	}
	code, _, errOut = runJ(t, "release", "--store", path, "--by", "alice", "--reason", "x", unknown)
	if code != 1 || !strings.Contains(errOut, "locked by another process (a running dispatcher)") || !strings.Contains(errOut, "stop the dispatcher first") {
		t.Fatalf("release while the dispatcher runs: exit %d: %s", code, errOut)
	}
	<-done
	n := submitted.Load()
	code, out, _ = runJ(t, "list", "--store", path)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d job(s)", n+2)) {
		t.Fatalf("after %d submits: exit %d:\n%s", n, code, out)
	}
	if during == 0 {
		t.Fatal("no list ran while jobs were being submitted: the test proves nothing")
	}
	t.Logf("%d lists, %d of them while %d jobs were submitted", lists, during, n)
}

// TestJobsCorruptStore: a damaged store is refused by name with the way out, and quarantine
// takes it, audited.
func TestJobsCorruptStore(t *testing.T) {
	path, _, _ := jobsStore(t)
	boltfiletest.Damages()[3].Apply(t, path) // garbled
	code, _, errOut := runJ(t, "list", "--store", path)
	if code != 1 || !strings.Contains(errOut, "store "+path+" is corrupt") || !strings.Contains(errOut, "steward jobs quarantine --store "+path) {
		t.Fatalf("list of a damaged store: exit %d: %s", code, errOut)
	}
	code, _, errOut = runJ(t, "quarantine", "--store", path, "--by", "alice")
	if code != 2 || !strings.Contains(errOut, "--reason") {
		t.Fatalf("quarantine without a reason: exit %d: %s", code, errOut)
	}
	code, out, errOut := runJ(t, "quarantine", "--store", path, "--by", "alice", "--reason", "bad sector (OPS-3)")
	if code != 0 || !strings.Contains(out, "quarantined "+path+" as "+path+".corrupt-") || !strings.Contains(out, ".audit.json") {
		t.Fatalf("quarantine: exit %d: %s%s", code, out, errOut)
	}
	notes, _ := filepath.Glob(path + ".corrupt-*.audit.json")
	if len(notes) != 1 {
		t.Fatalf("audit records: %v", notes)
	}
	if b, _ := os.ReadFile(notes[0]); !strings.Contains(string(b), "bad sector (OPS-3)") {
		t.Fatalf("audit record:\n%s", b)
	}
	s, err := dispatch.OpenBolt(path, dispatch.BoltOptions{})
	if err != nil {
		t.Fatalf("a new store after quarantine: %v", err)
	}
	s.Close()
	code, _, errOut = runJ(t, "quarantine", "--store", path, "--by", "alice", "--reason", "again")
	if code != 1 || !strings.Contains(errOut, "not corrupt") {
		t.Fatalf("quarantine of a sound store: exit %d: %s", code, errOut)
	}
}

// TestJobsEtcd runs list, show and release on a shared journal in a real 3-member etcd cluster:
// the listing is the one the same jobs give on bbolt, and a release is seen by the next read.
func TestJobsEtcd(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return at }
	path := filepath.Join(t.TempDir(), "jobs.db")
	bs, err := dispatch.OpenBolt(path, dispatch.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fillJobs(t, bs, clock)
	bs.Close()

	c := testetcd.Start(t)
	endpoints := strings.Join(c.Endpoints, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	es, err := dispatch.OpenEtcd(ctx, dispatch.EtcdOptions{Endpoints: c.Endpoints, Prefix: "/cli-test", Node: "host-1"})
	if err != nil {
		t.Fatal(err)
	}
	unknown, pending := fillJobs(t, es, clock)
	es.Close()

	_, boltList, _ := runJ(t, "list", "--store", path)
	code, etcdList, errOut := runJ(t, "list", "--etcd", endpoints, "--etcd-prefix", "/cli-test")
	if code != 0 || etcdList != boltList {
		t.Fatalf("exit %d (%s); etcd listing:\n%s\nbbolt listing:\n%s", code, errOut, etcdList, boltList)
	}
	if code, out, _ := runJ(t, "list", "--etcd", endpoints); code != 0 || !strings.Contains(out, "0 job(s)") {
		t.Fatalf("another prefix: %d %s", code, out)
	}
	for _, tc := range []struct {
		args    []string
		code    int
		wantOut string
	}{
		{[]string{"show", "--etcd", endpoints, "--etcd-prefix", "/cli-test", unknown}, 0, "on node host-1"},
		{[]string{"release", "--etcd", endpoints, "--etcd-prefix", "/cli-test", "--by", "alice", "--reason", "x", pending}, 1, ""},
		{[]string{"release", "--etcd", endpoints, "--etcd-prefix", "/cli-test", "--by", "alice", "--reason", "OPS-9", unknown}, 0, "released job " + unknown},
		{[]string{"show", "--etcd", endpoints, "--etcd-prefix", "/cli-test", unknown}, 0, "force-released"},
		{[]string{"list", "--etcd", endpoints, "--store", path}, 2, ""},
	} {
		code, out, errOut := runJ(t, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.wantOut) {
			t.Fatalf("%v: exit %d, want %d\n%s%s", tc.args, code, tc.code, out, errOut)
		}
	}
}

// TestJobsCancelRunning cancels, from the CLI, a job that a dispatcher on another "node" (a
// shared etcd journal) runs on a real sidecar, held before its commit: the CLI journals the
// cancel, the dispatcher sends index.cancel, and --wait prints the job's answer.
func TestJobsCancelRunning(t *testing.T) {
	c := testetcd.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	es, err := dispatch.OpenEtcd(ctx, dispatch.EtcdOptions{Endpoints: c.Endpoints, Prefix: "/cli-cancel", Node: "host-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	held := make(chan string, 4)
	sc := testsidecar.Start(t, testsidecar.Options{OnNotify: func(method string, params json.RawMessage) {
		var p rpc.ProgressParams
		if method == rpc.NotifyProgress && json.Unmarshal(params, &p) == nil && strings.HasPrefix(p.Stage, "hold:") {
			held <- p.InvocationID
		}
	}})
	d, err := dispatch.New(dispatch.Config{Store: es, Logger: hclog.NewNullLogger(), Interval: 100 * time.Millisecond, ExecuteDeadline: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.AddSidecar("node-1", sc.Client); err != nil {
		t.Fatal(err)
	}
	go d.Run(ctx)

	root := testenv.GuestDir(t)
	st, err := storage.OpenStore(ctx, storage.StoreConfig{Kind: storage.KindLocal, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dataset.Create(ctx, st, "events", dataset.NewGenerator(20000, 7), dataset.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	j, err := d.Submit(ctx, dispatch.Request{Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + root}, Path: "events"},
		AdmittedVersion: 1, Op: rpc.OpCreate, Index: rpc.IndexSpec{Name: "by_name", Columns: []string{"name"}, Type: rpc.IndexBTree},
		Fault: workerproto.FaultHoldBeforeCommit})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the job never reached its hold")
	}
	code, out, errOut := runJ(t, "cancel", "--etcd", strings.Join(c.Endpoints, ","), "--etcd-prefix", "/cli-cancel",
		"--by", "alice", "--reason", "dropped the table", "--wait", "60s", j.ID)
	t.Logf("steward jobs cancel:\n%s", out)
	for _, w := range []string{"cancel of job " + j.ID + " journaled", "job " + j.ID + ": NOT_COMMITTED",
		"answer: PRE_INVOCATION_REJECTED code -9", "cancelled true", "cancel reply from node-1: CANCELLED, outcome NOT_COMMITTED"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Fatalf("exit %d, output lacks %q:\n%s%s", code, w, out, errOut)
		}
	}
}

// TestJobsShowSegmented: `jobs show` of a segmented job shows its segments done of total and
// lists its steps from the journal (state, sidecar, fragment range, peak memory of the answer);
// a step names its parent.
func TestJobsShowSegmented(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.db")
	s, err := dispatch.OpenBolt(path, dispatch.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rec := func(id string, st dispatch.State) dispatch.Job {
		return dispatch.Job{ID: id, Op: rpc.OpCreate, State: st, Refresh: dispatch.RefreshNotRequired, Created: now,
			Index:   rpc.IndexSpec{Name: "idx_id", Columns: []string{"id"}, Type: rpc.IndexBTree},
			History: []dispatch.Transition{{At: now, Event: dispatch.EventSubmit, To: st}}}
	}
	parent := rec("seg", dispatch.StateRunning)
	parent.SlotHeld = true
	parent.Segmented = &dispatch.SegmentedPlan{BuildID: "seg", Fragments: []uint64{0, 1, 2, 3, 4}, Runs: [][]uint64{{0, 1, 2}, {3, 4}},
		Sidecars: []string{"n1", "n2"}, Committer: "n1", Attempts: []int{1, 1}, Adopted: []string{"n2"}, Done: 1,
		Gone: []string{"n0"}, Stranded: []string{"n0"}}
	steps := []dispatch.Job{rec(dispatch.StepID("seg", rpc.OpSegment, 0, 1), dispatch.StateCommitted),
		rec(dispatch.StepID("seg", rpc.OpSegment, 1, 1), dispatch.StateRunning)}
	for i, run := range parent.Segmented.Runs {
		steps[i].Op, steps[i].Parent, steps[i].Sidecar = rpc.OpSegment, "seg", parent.Segmented.Sidecars[i]
		steps[i].Target = steps[i].Sidecar
		steps[i].Segment = &rpc.SegmentSpec{BuildID: "seg", FragmentIDs: run}
	}
	steps[0].Result = &dispatch.Result{Phase: rpc.PhaseNativeReturn, CompletionReason: rpc.CompletionSegmentWritten,
		IndexUUID: "0b5e6d3a-3c1b-4a55-9f3e-2f1f1f1f1f1f", PeakMemoryBytes: 7 << 20, WallMs: 812}
	err = s.Update(func(tx dispatch.Tx) error {
		for _, j := range append([]dispatch.Job{parent}, steps...) {
			if err := tx.Put(&j); err != nil {
				return err
			}
		}
		return nil
	})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runJ(t, "show", "--store", path, "seg")
	row := regexp.MustCompile(`(?m)^seg\.seg0\.a1\s+SEGMENT\s+COMMITTED\s+n1\s+0-2\s+7\.0\s+812\s+0b5e6d3a-`)
	if code != 0 || !row.MatchString(out) || !strings.Contains(out, "2 segments over 5 fragments, sidecars n1,n2, committer n1, adopted from n2") ||
		!regexp.MustCompile(`(?m)^seg\.seg1\.a1\s+SEGMENT\s+RUNNING\s+n2\s+3-4\s+-\s+-\s+-`).MatchString(out) || !strings.Contains(out, "2 step(s)") ||
		!regexp.MustCompile(`(?m)^segments done\s+1/2$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^sidecars gone\s+n0 \(no node announces them; taken over from storage: n0\)$`).MatchString(out) {
		t.Fatalf("exit %d (%s):\n%s", code, errOut, out)
	}
	if code, out, _ := runJ(t, "show", "--store", path, steps[1].ID); code != 0 || !regexp.MustCompile(`(?m)^step of\s+seg$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^fragments\s+3-4$`).MatchString(out) {
		t.Fatalf("show of a step: exit %d:\n%s", code, out)
	}
}
