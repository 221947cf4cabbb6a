package sidecar_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/slot"
)

// ledgerEnv is a real sidecar (stdio, real cgroups) with a private state dir, whose datasets and
// host objects live in a private prefix of a MinIO bucket.
type ledgerEnv struct {
	t     *testing.T
	c     *host.Client
	sc    *testsidecar.Sidecar
	minio *testminio.Server
	spec  rpc.StoreSpec     // the sidecar's view: s3://bucket/prefix @ endpoint
	store storage.Store     // the test's own view of the same prefix
	logs  *testsidecar.Logs // every sidecar's JSON log lines
}

func newLedgerEnv(t *testing.T, args ...string) *ledgerEnv {
	t.Helper()
	testenv.NeedRoot(t)
	srv := testminio.Shared(t)
	prefix := randID("lg")
	e := &ledgerEnv{t: t, minio: srv, spec: rpc.StoreSpec{URL: "s3://ledger-e2e/" + prefix, Endpoint: srv.Endpoint}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := storage.OpenStore(ctx, storage.StoreConfig{Kind: storage.KindS3, Endpoint: srv.Endpoint, Bucket: "ledger-e2e",
		Prefix: prefix, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	e.store = st
	// The sidecar's own S3 credentials (cleanup, recovery) come from a 0400 file, as in
	// production, and go only to the test's prefix; the state dir and cgroup parent are kept
	// across restarts, so leftovers are removed and the journal is adopted.
	e.sc = testsidecar.Start(t, testsidecar.Options{
		Args:        append([]string{"--state-dir", t.TempDir(), "--worker-memory", "536870912"}, args...),
		Credentials: &rpc.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey},
		AllowStores: []string{"s3://ledger-e2e/" + prefix + "@" + srv.Endpoint},
	})
	e.c, e.logs = e.sc.Client, e.sc.Logs
	return e
}

// start launches a new sidecar on the env's state dir and cgroup parent.
func (e *ledgerEnv) start() {
	e.t.Helper()
	e.sc.Restart()
	e.c = e.sc.Client
}

func (e *ledgerEnv) call(method string, params, result any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.c.Call(ctx, method, params, result)
}

func (e *ledgerEnv) must(method string, params, result any) {
	e.t.Helper()
	if err := e.call(method, params, result); err != nil {
		e.t.Fatalf("%s: %v", method, err)
	}
}

func (e *ledgerEnv) status(owner *rpc.ObjectOwner) rpc.ObjectsStatusResult {
	e.t.Helper()
	var r rpc.ObjectsStatusResult
	e.must(rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{Owner: owner, Tickets: owner != nil}, &r)
	return r
}

// waitUsed waits until the ledger holds want tickets and nothing is left to settle.
func (e *ledgerEnv) waitUsed(want int) rpc.LedgerFigures {
	e.t.Helper()
	return waitTickets(e.t, e.c, want)
}

// waitTickets waits until the sidecar's ledger holds want tickets and nothing is left to settle.
func waitTickets(t *testing.T, c *host.Client, want int) rpc.LedgerFigures {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var r rpc.ObjectsStatusResult
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := c.Call(ctx, rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{}, &r)
		cancel()
		if err != nil {
			t.Fatalf("objects.status: %v", err)
		}
		if f := r.Ledger; f.Used == want && f.PendingDelete == 0 && f.Unsettled == 0 {
			return f
		} else if time.Now().After(deadline) {
			t.Fatalf("ledger did not reach %d tickets: %+v", want, f)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *ledgerEnv) put(key string) {
	e.t.Helper()
	if err := e.store.Put(context.Background(), key, strings.NewReader("spill"), 5); err != nil {
		e.t.Fatal(err)
	}
}

func (e *ledgerEnv) exists(key string) bool {
	e.t.Helper()
	_, err := e.store.Stat(context.Background(), key)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		e.t.Fatal(err)
	}
	return err == nil
}

func (e *ledgerEnv) metric(name string) float64 {
	e.t.Helper()
	return metricOf(e.t, e.c, name)
}

// metricOf reads one unlabelled metric of the sidecar.
func metricOf(t *testing.T, c *host.Client, name string) float64 {
	t.Helper()
	text, err := c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

func txn(id string) rpc.ObjectOwner { return rpc.ObjectOwner{Kind: rpc.OwnerHostTxn, ID: id} }

func wantErr(t *testing.T, err error, class error, what string) {
	t.Helper()
	if !errors.Is(err, class) {
		t.Fatalf("%s: got %v, want %v", what, err, class)
	}
}

// TestObjectsOverJSONRPC drives objects.* as a host would: capacity exhaustion refuses the next
// reservation while owned work continues, ownership is enforced, abandoned objects are deleted
// from MinIO, and a transfer with a gap in its receipts moves only the acknowledged prefix.
func TestObjectsOverJSONRPC(t *testing.T) {
	e := newLedgerEnv(t, "--ledger-capacity", "4")
	info := e.c.Info()
	if !strings.Contains(strings.Join(info.Capabilities, ","), rpc.CapObjects) || info.Limits.LedgerCapacity != 4 {
		t.Fatalf("hello does not advertise the ledger: %v %+v", info.Capabilities, info.Limits)
	}
	a, b := txn(randID("a-")), txn(randID("b-"))
	reserve := func(o rpc.ObjectOwner, keys ...string) error {
		return e.call(rpc.MethodObjectsReserve, rpc.ObjectsReserveParams{Owner: o, Store: e.spec, Keys: keys}, &rpc.ObjectsReserveResult{})
	}

	// Capacity: reserve before upload, until the ledger is full.
	if err := reserve(a, "spill/a1", "spill/a2", "spill/a3"); err != nil {
		t.Fatal(err)
	}
	if err := reserve(b, "spill/b1"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"spill/a1", "spill/a2", "spill/a3", "spill/b1"} {
		e.put(k)
	}
	wantErr(t, reserve(b, "spill/b2"), rpc.ErrLedgerFull, "reservation past capacity")
	wantErr(t, reserve(b, "spill/a3"), rpc.ErrNameOwned, "reserving another owner's name")
	if f := e.status(nil).Ledger; f.Used != 4 || f.AdmissionFailures != 1 || f.HighWater != 4 {
		t.Fatalf("after the refusal: %+v", f)
	}
	// Owned work continues: a publishes a1 and abandons a2; cleanup deletes a2 in MinIO.
	var st rpc.ObjectsOwnerStatus
	e.must(rpc.MethodObjectsAccept, rpc.ObjectsReleaseParams{Owner: a, Store: &e.spec, Keys: []string{"spill/a1"}}, &st)
	e.must(rpc.MethodObjectsAbandon, rpc.ObjectsReleaseParams{Owner: a, Store: &e.spec, Keys: []string{"spill/a2"}}, &st)
	wantErr(t, e.call(rpc.MethodObjectsAccept, rpc.ObjectsReleaseParams{Owner: b, Store: &e.spec, Keys: []string{"spill/a3"}}, &st),
		rpc.ErrUnknownOwner, "accepting another owner's name")
	e.waitUsed(2)
	if e.exists("spill/a2") || !e.exists("spill/a1") {
		t.Fatalf("abandoned a2 must be deleted and accepted a1 kept (a2 %v, a1 %v)", e.exists("spill/a2"), e.exists("spill/a1"))
	}
	if err := reserve(b, "spill/b2"); err != nil {
		t.Fatalf("capacity freed by owned work, reservation still refused: %v", err)
	}
	e.must(rpc.MethodObjectsAccept, rpc.ObjectsReleaseParams{Owner: a, All: true}, &st)
	e.must(rpc.MethodObjectsAbandon, rpc.ObjectsReleaseParams{Owner: b, All: true}, &st)
	e.waitUsed(0)
	if e.exists("spill/b1") || !e.exists("spill/a3") {
		t.Fatal("abandon all must delete b1; accept all must keep a3")
	}

	// Invalid params are refused at the edge.
	wantErr(t, e.call(rpc.MethodObjectsReserve, rpc.ObjectsReserveParams{Owner: rpc.ObjectOwner{Kind: rpc.OwnerInvocation, ID: "x"},
		Store: e.spec, Keys: []string{"k"}}, nil), rpc.ErrInvalidParams, "a host reserving as an invocation")
	wantErr(t, e.call(rpc.MethodObjectsReserve, rpc.ObjectsReserveParams{Owner: a, Store: e.spec, Keys: make([]string, 1001)}, nil),
		rpc.ErrInvalidParams, "1001 keys")
	wantErr(t, e.call(rpc.MethodObjectsAbandon, rpc.ObjectsReleaseParams{Owner: a}, nil), rpc.ErrInvalidParams, "abandon without keys or all")
	wantErr(t, e.call(rpc.MethodObjectsReserve, rpc.ObjectsReserveParams{Owner: a, Store: e.spec, Keys: []string{"../x"}}, nil),
		rpc.ErrInvalidParams, "an invalid key")

	// Transfer with a gap: seq 1, 2 and 4 offered; a receipt up to 4 moves 1 and 2 only.
	p, q := txn(randID("producer-")), txn(randID("coordinator-"))
	if err := reserve(p, "x/1", "x/2", "x/4"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"x/1", "x/2", "x/4"} {
		e.put(k)
	}
	var tr rpc.ObjectsTransferResult
	e.must(rpc.MethodObjectsTransfer, rpc.ObjectsTransferParams{From: p, To: q, Store: e.spec,
		Items: []rpc.ObjectsTransferItem{{Seq: 1, Key: "x/1"}, {Seq: 2, Key: "x/2"}, {Seq: 4, Key: "x/4"}}}, &tr)
	var ack rpc.ObjectsAcknowledgeResult
	e.must(rpc.MethodObjectsAck, rpc.ObjectsAcknowledgeParams{From: p, To: q, UpTo: 4}, &ack)
	if ack.AckedUpTo != 2 || ack.From.Held != 1 || ack.From.Offered != 1 || ack.To.Held != 2 {
		t.Fatalf("receipt with a gap at 3: %+v", ack)
	}
	sp := e.status(&p)
	if len(sp.Tickets) != 1 || sp.Tickets[0].Key != "x/4" || sp.Tickets[0].OfferedTo == nil || *sp.Tickets[0].OfferedTo != q || sp.Tickets[0].Seq != 4 {
		t.Fatalf("the producer keeps exactly the unacknowledged offer: %+v", sp.Tickets)
	}
	wantErr(t, e.call(rpc.MethodObjectsTransfer, rpc.ObjectsTransferParams{From: p, To: q, Store: e.spec,
		Items: []rpc.ObjectsTransferItem{{Seq: 2, Key: "x/4"}}}, nil), rpc.ErrInvalidParams, "reusing an acknowledged seq")
	// The producer fills the gap; the coordinator now has everything.
	if err := reserve(p, "x/3"); err != nil {
		t.Fatal(err)
	}
	e.put("x/3")
	e.must(rpc.MethodObjectsTransfer, rpc.ObjectsTransferParams{From: p, To: q, Store: e.spec,
		Items: []rpc.ObjectsTransferItem{{Seq: 3, Key: "x/3"}}}, &tr)
	e.must(rpc.MethodObjectsAck, rpc.ObjectsAcknowledgeParams{From: p, To: q, UpTo: 4}, &ack)
	if ack.AckedUpTo != 4 || ack.From.Held != 0 || ack.To.Held != 4 {
		t.Fatalf("receipt after the gap is filled: %+v", ack)
	}
	e.must(rpc.MethodObjectsAbandon, rpc.ObjectsReleaseParams{Owner: q, All: true}, &st)
	e.waitUsed(0)
	for _, k := range []string{"x/1", "x/2", "x/3", "x/4"} {
		if e.exists(k) {
			t.Fatalf("%s survived the coordinator's abandon", k)
		}
	}

	for name, want := range map[string]float64{
		"steward_ledger_capacity": 4, "steward_ledger_tickets": 0, "steward_ledger_tickets_high_water": 4,
		"steward_ledger_admission_failures_total": 1, "steward_ledger_deleted_total": 7, // a2, b1, b2 (never uploaded: absent counts), x/1-4 "steward_ledger_pending_retry_tasks": 0,
	} {
		if got := e.metric(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// mutateParams is a CREATE on a dataset of the env's MinIO prefix, with per-call credentials.
func (e *ledgerEnv) mutateParams(path, fault string) rpc.MutateParams {
	return rpc.MutateParams{
		InvocationID: randID("inv-"), DeadlineUnixMs: time.Now().Add(90 * time.Second).UnixMilli(),
		Dataset: rpc.DatasetRef{Store: e.spec, Path: path}, PinnedVersion: 1, Op: rpc.OpCreate,
		Index:       rpc.IndexSpec{Name: "ix", Columns: []string{"id"}, Type: rpc.IndexBTree},
		Credentials: &rpc.Credentials{AccessKey: e.minio.AccessKey, SecretKey: e.minio.SecretKey},
		Fault:       fault,
	}
}

func (e *ledgerEnv) makeDataset(path string, rows int64) {
	e.t.Helper()
	_, _, err := dataset.Create(context.Background(), e.store, path, dataset.NewGenerator(rows, 11),
		dataset.WriteOptions{RowsPerFragment: int(rows/2 + 1), TempDir: e.t.TempDir()})
	if err != nil {
		e.t.Fatalf("create dataset %s: %v", path, err)
	}
}

// assertNoOrphans lists the dataset's prefix without the ledger and reads every manifest: each
// object must be a manifest, the sidecar's claim, or referenced by a manifest.
func (e *ledgerEnv) assertNoOrphans(path string) (objects int) {
	e.t.Helper()
	ctx := context.Background()
	all, err := storage.ListAll(ctx, e.store, path+"/")
	if err != nil {
		e.t.Fatal(err)
	}
	refs, err := dataset.Referenced(ctx, e.store, path)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, o := range all {
		if rel := strings.TrimPrefix(o.Key, path+"/"); dataset.IsManifestKey(rel) || slot.IsClaimKey(rel) {
			refs[o.Key] = true
		}
	}
	for _, o := range all {
		if !refs[o.Key] {
			e.t.Errorf("orphan in the bucket: %s (%d bytes), referenced by no manifest and owned by no ticket", o.Key, o.Size)
		}
	}
	return len(all)
}

// segments lists the index segment objects under a dataset.
func (e *ledgerEnv) segments(path string) []string {
	e.t.Helper()
	all, err := storage.ListAll(context.Background(), e.store, path+"/_indices/")
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, o := range all {
		out = append(out, o.Key)
	}
	return out
}

func (e *ledgerEnv) mutate(p rpc.MutateParams) rpc.MutateResult {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := e.c.Mutate(ctx, p)
	if err != nil {
		e.t.Fatalf("mutate %s: %v", p.InvocationID, err)
	}
	return res
}

func (e *ledgerEnv) resolve(p rpc.MutateParams) rpc.ResolveResult {
	e.t.Helper()
	var r rpc.ResolveResult
	e.must(rpc.MethodIndexResolve, rpc.ResolveParams{InvocationID: p.InvocationID, Dataset: p.Dataset,
		PinnedVersion: p.PinnedVersion, Credentials: p.Credentials}, &r)
	return r
}

// TestWorkerCustody runs real workers against MinIO: a commit leaves no ticket; a crash before
// the commit keeps the segment's ticket until index.resolve says NOT_COMMITTED, and cleanup then
// deletes it; a crash after the commit keeps it until COMMITTED, and the object stays.
func TestWorkerCustody(t *testing.T) {
	e := newLedgerEnv(t)
	cases := []struct {
		fault   string
		phase   string
		outcome string // index.resolve's answer; "" = not needed
		kept    bool   // the segment survives
	}{
		{fault: "", phase: rpc.PhaseNativeReturn, kept: true},
		{fault: "crash_after_build", phase: rpc.PhaseIndeterminate, outcome: rpc.OutcomeNotCommitted},
		{fault: "crash_before_commit", phase: rpc.PhaseIndeterminate, outcome: rpc.OutcomeNotCommitted},
		{fault: "crash_after_commit", phase: rpc.PhaseIndeterminate, outcome: rpc.OutcomeCommitted, kept: true},
	}
	for _, tc := range cases {
		t.Run("fault="+tc.fault, func(t *testing.T) {
			e.t = t
			path := randID("ds-")
			e.makeDataset(path, 20000)
			p := e.mutateParams(path, tc.fault)
			deletedBefore := e.status(nil).Ledger.Deleted
			res := e.mutate(p)
			if res.Phase != tc.phase {
				t.Fatalf("phase %s code %d (%s), want %s", res.Phase, res.Code, res.Message, tc.phase)
			}
			segs := e.segments(path)
			if len(segs) == 0 && !tc.kept {
				// The self-fence (started as the answer left) and the cleanup worker were faster
				// than this listing: the segment was uploaded, and is already deleted.
				e.waitUsed(0)
				if d := e.status(nil).Ledger.Deleted - deletedBefore; d != 1 {
					t.Fatalf("no segment listed and %d deleted by cleanup: the worker uploaded nothing?", d)
				}
				if r := e.resolve(p); r.Outcome != tc.outcome {
					t.Fatalf("resolve: %s (%s), want %s", r.Outcome, r.Reason, tc.outcome)
				}
				e.assertNoOrphans(path)
				return
			}
			if len(segs) != 1 {
				t.Fatalf("want one uploaded segment, got %v", segs)
			}
			inv := rpc.ObjectOwner{Kind: rpc.OwnerInvocation, ID: p.InvocationID}
			held := e.status(&inv)
			if tc.outcome == "" {
				if held.Ledger.Used != 0 || held.Owner.Held != 0 {
					t.Fatalf("a committed mutation must leave no ticket: %+v", held)
				}
			} else {
				// Held until settled: the sidecar fences the slot itself once the dead worker's
				// answer is out, so the ticket may already be gone; it must never be held by
				// anyone but this invocation, and index.resolve must agree with the self-fence.
				if held.Owner.Held > 1 || (len(held.Tickets) == 1 && held.Tickets[0].Key != segs[0]) {
					t.Fatalf("tickets of an indeterminate mutation: %+v (segments %v)", held, segs)
				}
				e.waitUsed(0) // settled by the self-fence, before and without index.resolve
				if got := e.exists(segs[0]); got != tc.kept {
					t.Fatalf("after the self-fence, segment %s exists=%v, want %v", segs[0], got, tc.kept)
				}
				if r := e.resolve(p); r.Outcome != tc.outcome || !r.Fenced && tc.outcome == rpc.OutcomeNotCommitted {
					t.Fatalf("resolve: %s (%s), want %s", r.Outcome, r.Reason, tc.outcome)
				}
			}
			e.waitUsed(0)
			if got := e.exists(segs[0]); got != tc.kept {
				t.Fatalf("segment %s exists=%v, want %v", segs[0], got, tc.kept)
			}
			e.assertNoOrphans(path)
		})
	}
}

// TestSidecarKilledWhileUploading SIGKILLs the sidecar while its workers upload index segments,
// with two more invocations left indeterminate by crashed workers (one before, one after its
// commit) and never resolved by the host (the killed sidecar's self-fences may or may not have
// settled them). A new sidecar on the same state dir must settle all of them by itself: afterwards the bucket holds no object that no manifest references and no
// ticket owns, the uncommitted segment is gone and the committed one is kept.
func TestSidecarKilledWhileUploading(t *testing.T) {
	e := newLedgerEnv(t, "--executors", "3")
	paths := []string{randID("big-"), randID("big-"), randID("big-"), randID("before-"), randID("after-")}
	var wg sync.WaitGroup
	for i, path := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.makeDataset(path, map[bool]int64{true: 600_000, false: 20_000}[i < 3])
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// The crashed workers' segments: the one whose manifest never went through its gateway is
	// abandoned at once (NOT_COMMITTED by the gateway's record, nothing to resolve) and may be
	// deleted already; the committed one is kept.
	crashed := map[string]string{}
	for _, c := range []struct{ path, fault string }{{paths[3], "crash_before_commit"}, {paths[4], "crash_after_commit"}} {
		if res := e.mutate(e.mutateParams(c.path, c.fault)); res.Phase != rpc.PhaseIndeterminate {
			t.Fatalf("%s: %s %d %s", c.fault, res.Phase, res.Code, res.Message)
		}
		segs := e.segments(c.path)
		if len(segs) > 1 || len(segs) == 0 && c.fault == "crash_after_commit" {
			t.Fatalf("%s: segments %v", c.fault, segs)
		}
		if len(segs) == 1 {
			crashed[c.fault] = segs[0]
		}
	}
	errs := make(chan error, 3)
	var big []rpc.ObjectOwner
	for _, path := range paths[:3] {
		p := e.mutateParams(path, "")
		big = append(big, rpc.ObjectOwner{Kind: rpc.OwnerInvocation, ID: p.InvocationID})
		go func() {
			_, err := e.c.Mutate(context.Background(), p)
			errs <- err
		}()
	}
	// Kill as soon as a big one holds a reservation: its segment is streaming to MinIO. (Not
	// "the ledger holds more than the crashed two": this sidecar's self-fences settle those
	// meanwhile, and three fast builds need not overlap.)
	reserving := func() bool {
		for i := range big {
			if e.status(&big[i]).Owner.Held > 0 {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(60 * time.Second)
	for !reserving() {
		if time.Now().After(deadline) {
			t.Fatal("no worker reserved anything within 60s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	// status counts a reservation from the moment it is taken, before its journal commit; give
	// the commit and the upload behind it a moment.
	time.Sleep(20 * time.Millisecond)
	sigkill(t, e.c)
	answered := 0
	for range paths[:3] {
		if err := <-errs; err == nil {
			answered++
		}
	}
	e.c.Close()

	e.start() // same state dir, same cgroup parent: leftover workers are killed before recovery
	f := e.waitUsed(0)
	if f.HighWater < 1 {
		// The crashed workers' two may be settled already (the killed sidecar's self-fences);
		// the reservation of the upload it was killed in cannot be.
		t.Fatalf("the restarted sidecar found %d tickets, want at least the killed upload's", f.HighWater)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(e.logs.String(), `"recovery pass"`); {
		if time.Now().After(deadline) { // log lines arrive through the sidecar's stderr, asynchronously
			t.Fatalf("the restarted sidecar logged no recovery pass (figures %+v)", f)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if before := crashed["crash_before_commit"]; before != "" && e.exists(before) || !e.exists(crashed["crash_after_commit"]) {
		t.Fatalf("recovery must delete the uncommitted segment and keep the committed one")
	}
	total := 0
	for _, path := range paths {
		total += e.assertNoOrphans(path)
	}
	t.Logf("answered before the kill: %d of 3; tickets found at restart: %d; after recovery: %d objects, all referenced; ledger %+v", answered, f.HighWater, total, f)
}
