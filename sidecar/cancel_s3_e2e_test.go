package sidecar_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

// TestCancelWhileStorageIsDown: the one case where a cancel's answer is indeterminate. MinIO
// stops while the worker holds at its commit; the cancel kills it. Held after its commit landed,
// the slot can only be read back from storage: INDETERMINATE -24, reply outcome UNKNOWN, and once
// MinIO is back index.resolve says COMMITTED. Held before its commit, the gateway's record alone
// says no manifest was offered: NOT_COMMITTED -9 all the same, and index.resolve writes the
// fence the cancel could not.
func TestCancelWhileStorageIsDown(t *testing.T) {
	t.Run(workerproto.FaultHoldAfterCommit, func(t *testing.T) {
		cancelStorageDown(t, workerproto.FaultHoldAfterCommit, rpc.PhaseIndeterminate, rpc.ReasonCancelUnsettled, rpc.OutcomeUnknown, rpc.OutcomeCommitted)
	})
	t.Run(workerproto.FaultHoldBeforeCommit, func(t *testing.T) {
		cancelStorageDown(t, workerproto.FaultHoldBeforeCommit, rpc.PhasePreInvocationRejected, rpc.ReasonCancelled, rpc.OutcomeNotCommitted, rpc.OutcomeNotCommitted)
	})
}

// cancelStorageDown holds a build on an S3 dataset with fault, stops MinIO, cancels, checks the
// answer (phase, code) and the reply's outcome, starts MinIO again and checks index.resolve.
func cancelStorageDown(t *testing.T, fault, phase string, code int, outcome, resolved string) {
	srv := testminio.Dedicated(t)
	bucket, _ := s3Dataset(t, srv, "cancel-", 20000)
	// A state dir of its own: the abandoned names of the second case cannot be deleted once the
	// call's keys are gone, and must not be handed to the next test's sidecar.
	e := newSidecar(t, "--state-dir", filepath.Join(t.TempDir(), "state"))
	keys := &rpc.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	p := rpc.MutateParams{InvocationID: randID("inv-"), DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(),
		Dataset:       rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://" + bucket, Endpoint: srv.Endpoint}, Path: "tbl"},
		PinnedVersion: 1, Op: rpc.OpCreate, Credentials: keys, Fault: fault,
		Index: rpc.IndexSpec{Name: "ix", Columns: []string{"name"}, Type: rpc.IndexBTree}}
	c := e.start(p)
	e.waitStage(t, p.InvocationID, workerproto.HoldStage(fault))
	srv.Stop()
	cr, res, took := e.mustCancel(t, c)
	t.Logf("storage down, %s: answer %s %d %q; cancel %s %s; cancel→answer %v", fault, res.Phase, res.Code, res.Message, cr.State, cr.Outcome, took)
	expect(t, res, phase, code)
	if !res.Cancelled || cr.State != rpc.CancelCancelled || cr.Outcome != outcome {
		t.Fatalf("answer %+v, reply %+v", res, cr)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := e.c.Resolve(ctx, rpc.ResolveParams{InvocationID: p.InvocationID, Dataset: p.Dataset, PinnedVersion: 1, Credentials: keys})
	if err != nil || r.Outcome != resolved {
		t.Fatalf("resolve once storage is back: %+v %v", r, err)
	}
}
