package sidecar_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/google/uuid"
)

func expect(t *testing.T, res rpc.MutateResult, phase string, code int) {
	t.Helper()
	if res.Phase != phase || res.Code != code {
		t.Fatalf("want %s/%d, got %s/%d (%s)", phase, code, res.Phase, res.Code, res.Message)
	}
}

func TestMutateCreateReplaceDrop(t *testing.T) {
	e := newSidecar(t)
	e.makeDataset("events", 20000)
	steps := []struct {
		name    string
		pinned  int64
		edit    func(*rpc.MutateParams)
		op      string
		index   string
		column  string
		typ     string
		phase   string
		code    int
		reason  string
		version int64 // committed version, 0 = none
	}{
		{name: "create bitmap", pinned: 1, op: rpc.OpCreate, index: "By_Cat", column: "category", typ: rpc.IndexBitmap, phase: rpc.PhaseNativeReturn, code: rpc.NativeOK, reason: rpc.CompletionCommitted, version: 2},
		{name: "create existing name", pinned: 2, op: rpc.OpCreate, index: "by_cat", column: "category", typ: rpc.IndexBitmap, phase: rpc.PhaseNativeReturn, code: rpc.NativeAlreadyExists},
		{name: "create if not exists", pinned: 2, op: rpc.OpCreate, index: "BY_CAT", column: "category", typ: rpc.IndexBitmap, edit: func(p *rpc.MutateParams) { p.IfNotExists = true }, phase: rpc.PhaseNativeReturn, code: rpc.NativeOK, reason: rpc.CompletionIfNotExistsNoop},
		{name: "create btree", pinned: 2, op: rpc.OpCreate, index: "by_id", column: "id", typ: rpc.IndexBTree, phase: rpc.PhaseNativeReturn, code: rpc.NativeOK, reason: rpc.CompletionCommitted, version: 3},
		{name: "replace", pinned: 3, op: rpc.OpReplace, index: "by_cat", column: "category", typ: rpc.IndexBitmap, phase: rpc.PhaseNativeReturn, code: rpc.NativeOK, reason: rpc.CompletionCommitted, version: 4},
		{name: "schema contract mismatch", pinned: 4, op: rpc.OpCreate, index: "by_price", column: "price", typ: rpc.IndexBTree,
			edit: func(p *rpc.MutateParams) { p.Schema = []rpc.FieldContract{{Name: "price", Type: "string"}} }, phase: rpc.PhasePreInvocationRejected, code: rpc.ReasonSchemaMismatch},
		{name: "schema contract match", pinned: 4, op: rpc.OpCreate, index: "by_price", column: "price", typ: rpc.IndexBTree,
			edit: func(p *rpc.MutateParams) { p.Schema = []rpc.FieldContract{{Name: "price", Type: "float64"}} }, phase: rpc.PhaseNativeReturn, code: rpc.NativeOK, reason: rpc.CompletionCommitted, version: 5},
		{name: "stale pinned version commits nothing", pinned: 4, op: rpc.OpCreate, index: "by_name", column: "name", typ: rpc.IndexBTree, phase: rpc.PhaseNativeReturn, code: rpc.NativeCommitConflict},
		{name: "drop by other spelling", pinned: 5, op: rpc.OpDrop, index: "BY_ID", phase: rpc.PhaseNativeReturn, code: rpc.NativeOK, reason: rpc.CompletionCommitted, version: 6},
		{name: "drop missing", pinned: 6, op: rpc.OpDrop, index: "by_id", phase: rpc.PhaseNativeReturn, code: rpc.NativeNotFound},
		{name: "drop if exists", pinned: 6, op: rpc.OpDrop, index: "by_id", edit: func(p *rpc.MutateParams) { p.IfExists = true }, phase: rpc.PhaseNativeReturn, code: rpc.NativeOK, reason: rpc.CompletionIfExistsNoop},
	}
	for i, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			e.t = t
			p := e.params(randID("inv-"), "events", s.pinned, s.op, s.index, s.column, s.typ)
			if s.edit != nil {
				s.edit(&p)
			}
			res := e.mutate(p)
			expect(t, res, s.phase, s.code)
			if res.CommittedVersion != s.version || res.CompletionReason != s.reason {
				t.Fatalf("step %d: committed %d reason %q, want %d %q (%s)", i, res.CommittedVersion, res.CompletionReason, s.version, s.reason, res.Message)
			}
			if res.ObservedLatestVersion != e.latest("events") {
				t.Fatalf("observed latest %d, dataset is at %d", res.ObservedLatestVersion, e.latest("events"))
			}
		})
	}
	e.t = t
	// The committed chain holds exactly what the answers said.
	d, err := dataset.Open(context.Background(), e.store, "events", 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ix := range d.Manifest().Indices {
		names = append(names, ix.Name)
	}
	if strings.Join(names, ",") != "by_cat,by_price" {
		t.Fatalf("indices at latest: %v", names)
	}
	e.mu.Lock()
	n := len(e.progress)
	e.mu.Unlock()
	if n == 0 {
		t.Fatal("no $/progress notification arrived during the builds")
	}
}

func TestMutateStaleAdmissionAndAmbiguousDrop(t *testing.T) {
	e := newSidecar(t)
	ctx := context.Background()
	e.makeDataset("ds", 5000)
	expect(t, e.mutate(e.params(randID("inv-"), "ds", 1, rpc.OpCreate, "idx", "category", rpc.IndexBitmap)), rpc.PhaseNativeReturn, rpc.NativeOK)

	// Write version 3 by hand with a second index whose name differs only in case: an ambiguity a
	// careless writer can leave behind, which DROP must refuse to guess about.
	raw, err := storage.ReadAll(ctx, e.store, "ds/"+dataset.VersionKey(2), dataset.MaxManifestSize)
	if err != nil {
		t.Fatal(err)
	}
	m, err := dataset.DecodeManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	twin := m.Indices[0]
	twin.UUID, twin.Name = uuid.NewString(), "IDX"
	twin.Files = append([]dataset.IndexFile(nil), twin.Files...)
	for i := range twin.Files {
		twin.Files[i].Path = strings.Replace(twin.Files[i].Path, m.Indices[0].UUID, twin.UUID, 1)
	}
	m.Indices = append(m.Indices, twin)
	m.Version = 3
	m.Transaction = dataset.Transaction{Op: "CREATE_INDEX", ReadVersion: 2, Index: "IDX"}
	b, err := dataset.EncodeManifest(m)
	if err != nil {
		t.Fatalf("encode hand-made manifest: %v", err)
	}
	if err := e.store.PutIfAbsent(ctx, "ds/"+dataset.VersionKey(3), strings.NewReader(string(b)), int64(len(b))); err != nil {
		t.Fatal(err)
	}
	res := e.mutate(e.params(randID("inv-"), "ds", 3, rpc.OpDrop, "Idx", "", ""))
	expect(t, res, rpc.PhasePreInvocationRejected, rpc.ReasonAmbiguousName)

	// Version 1 vanishes (retention removed it) while newer versions exist: stale admission.
	if err := os.Remove(filepath.Join(e.root, "ds", dataset.VersionKey(1))); err != nil {
		t.Fatal(err)
	}
	res = e.mutate(e.params(randID("inv-"), "ds", 1, rpc.OpCreate, "other", "id", rpc.IndexBTree))
	expect(t, res, rpc.PhasePreInvocationRejected, rpc.ReasonStaleAdmission)
	if res.ObservedLatestVersion != 3 {
		t.Fatalf("stale admission observed latest %d, want 3", res.ObservedLatestVersion)
	}
}

func TestMutateFaultsAreClassifiedAndCleanedUp(t *testing.T) {
	e := newSidecar(t)
	cases := []struct {
		fault    string
		deadline time.Duration
		phase    string
		code     int
		oom      bool
		resolved string // outcome of index.resolve afterwards, "" = not resolved here
		// orCode is a second true answer: a fork bomb whose own Go runtime cannot make a thread
		// under pids.max dies (exit 2, -21 worker lost) before its deadline (-22) comes.
		orCode int
	}{
		{fault: "hang", deadline: 5 * time.Second, phase: rpc.PhaseIndeterminate, code: rpc.ReasonDeadline, resolved: rpc.OutcomeNotCommitted},
		{fault: "ignore_sigterm", deadline: 5 * time.Second, phase: rpc.PhaseIndeterminate, code: rpc.ReasonDeadline},
		{fault: "skip_result", phase: rpc.PhaseIndeterminate, code: rpc.ReasonWorkerLost},
		{fault: "garbage", phase: rpc.PhaseIndeterminate, code: rpc.ReasonWorkerLost},
		{fault: "flood", phase: rpc.PhaseIndeterminate, code: rpc.ReasonWorkerLost},
		{fault: "crash_after_build", phase: rpc.PhaseIndeterminate, code: rpc.ReasonWorkerLost, resolved: rpc.OutcomeNotCommitted},
		{fault: "crash_before_commit", phase: rpc.PhaseIndeterminate, code: rpc.ReasonWorkerLost, resolved: rpc.OutcomeNotCommitted},
		{fault: "crash_after_commit", phase: rpc.PhaseIndeterminate, code: rpc.ReasonWorkerLost, resolved: rpc.OutcomeCommitted},
		{fault: "oom", phase: rpc.PhaseIndeterminate, code: rpc.ReasonWorkerLost, oom: true},
		{fault: "fork_bomb", deadline: 5 * time.Second, phase: rpc.PhaseIndeterminate, code: rpc.ReasonDeadline, orCode: rpc.ReasonWorkerLost},
		// The worker exits while its children still run and hold its pipe: it is answered as
		// lost (not left to the 30 s deadline), and the children are killed and reaped with the
		// domain before the answer (the harness checks the domain is gone).
		{fault: "exit_with_children", phase: rpc.PhaseIndeterminate, code: rpc.ReasonWorkerLost},
		// The engine claims a commit it never made: the sidecar reads the slot before the answer
		// leaves and answers indeterminate; the slot is fenced.
		{fault: "claim_commit", phase: rpc.PhaseIndeterminate, code: rpc.ReasonUnconfirmedCommit, resolved: rpc.OutcomeNotCommitted},
	}
	for _, tc := range cases {
		t.Run(tc.fault, func(t *testing.T) {
			e.t = t
			path := "f-" + tc.fault
			e.makeDataset(path, 20000)
			p := e.params(randID("inv-"), path, 1, rpc.OpCreate, "ix", "name", rpc.IndexBTree)
			p.Fault = tc.fault
			if tc.deadline > 0 {
				p.DeadlineUnixMs = time.Now().Add(tc.deadline).UnixMilli()
			}
			res := e.mutate(p)
			if tc.orCode != 0 && res.Code == tc.orCode && strings.Contains(res.Message, "exited with code 2") {
				expect(t, res, tc.phase, tc.orCode)
			} else {
				expect(t, res, tc.phase, tc.code)
			}
			if res.OOMKilled != tc.oom {
				t.Fatalf("oom_killed %v, want %v (%s)", res.OOMKilled, tc.oom, res.Message)
			}
			if tc.fault == "ignore_sigterm" && res.Signal != "SIGKILL" {
				t.Fatalf("a worker ignoring SIGTERM must end by SIGKILL, got %q", res.Signal)
			}
			if tc.resolved == "" {
				return
			}
			r := e.resolve(p.InvocationID, path, 1)
			if r.Outcome != tc.resolved {
				t.Fatalf("resolve: %s (%s), want %s", r.Outcome, r.Reason, tc.resolved)
			}
			again := e.resolve(p.InvocationID, path, 1)
			if again.Outcome != r.Outcome {
				t.Fatalf("resolve is not stable: %s then %s", r.Outcome, again.Outcome)
			}
		})
	}
}

func TestAdmissionRules(t *testing.T) {
	e := newSidecar(t, "--executors", "1", "--queue", "1")
	e.makeDataset("adm", 1000)
	ctx := context.Background()

	// Unfundable: 2 s cannot fund 100 ms skew + 500 ms grace + 3 s reap bound + 300 ms window.
	p := e.params(randID("inv-"), "adm", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
	p.DeadlineUnixMs = time.Now().Add(2 * time.Second).UnixMilli()
	if _, err := e.c.Mutate(ctx, p); !errors.Is(err, rpc.ErrDeadlineUnfundable) {
		t.Fatalf("unfundable deadline: want ErrDeadlineUnfundable, got %v", err)
	}
	// An id refused at receive is not remembered: the same id is admitted afterwards.
	unfunded := p.InvocationID

	hang := e.params(unfunded, "adm", 1, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
	hang.Fault, hang.DeadlineUnixMs = "hang", time.Now().Add(6*time.Second).UnixMilli()
	queued := e.params(randID("inv-"), "adm", 1, rpc.OpCreate, "ix2", "id", rpc.IndexBTree)
	queued.DeadlineUnixMs = time.Now().Add(4500 * time.Millisecond).UnixMilli()

	var wg sync.WaitGroup
	results := make([]rpc.MutateResult, 2)
	errs := make([]error, 2)
	for i, q := range []rpc.MutateParams{hang, queued} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = e.c.Mutate(ctx, q)
		}()
		waitFor(t, func() bool {
			return metric(t, e, "steward_mutate_workers_in_flight") == 1 && (i == 0 || metric(t, e, "steward_mutate_queue_depth") == 1)
		})
	}
	// The executor is busy and the queue (capacity 1) holds `queued`: the next one is refused.
	full := e.params(randID("inv-"), "adm", 1, rpc.OpCreate, "ix3", "id", rpc.IndexBTree)
	if _, err := e.c.Mutate(ctx, full); !errors.Is(err, rpc.ErrOverloaded) {
		t.Fatalf("full queue: want ErrOverloaded, got %v", err)
	}
	// A resend of the running invocation is not executed, and not an error either.
	dup, err := e.c.Mutate(ctx, hang)
	if err != nil {
		t.Fatalf("duplicate: %v", err)
	}
	expect(t, dup, rpc.PhaseIndeterminate, rpc.ReasonDuplicate)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	expect(t, results[0], rpc.PhaseIndeterminate, rpc.ReasonDeadline)
	// `queued` waited behind the hang past deadline − kill budget: rejected at dequeue.
	expect(t, results[1], rpc.PhasePreInvocationRejected, rpc.ReasonDeadlineLapsed)
	e.assertDomainGone(hang.InvocationID, results[0])
	if !strings.Contains(e.logs.String(), "protocol violation: duplicate invocation id") {
		t.Fatal("the duplicate was not logged as a protocol violation")
	}
}

func TestConcurrentMutationsOneCommits(t *testing.T) {
	e := newSidecar(t)
	e.makeDataset("race", 50000)
	var wg sync.WaitGroup
	results := make([]rpc.MutateResult, 2)
	for i, name := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = e.mutate(e.params(randID("inv-"), "race", 1, rpc.OpCreate, name, "category", rpc.IndexBitmap))
		}()
	}
	wg.Wait()
	e.t = t
	won, lost := results[0], results[1]
	if won.Code != rpc.NativeOK {
		won, lost = lost, won
	}
	expect(t, won, rpc.PhaseNativeReturn, rpc.NativeOK)
	expect(t, lost, rpc.PhaseNativeReturn, rpc.NativeCommitConflict)
	if won.CommittedVersion != 2 || lost.ObservedLatestVersion != 2 || lost.CommittedVersion != 0 {
		t.Fatalf("winner %+v, loser %+v", won, lost)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
