package dispatch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testetcd"
	"github.com/cba1309c/steward/rpc"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdNode is one dispatcher of a shared etcd journal, with its own clock.
type etcdNode struct {
	store *EtcdStore
	d     *Dispatcher
	clock *testClock
}

func newEtcdNode(t *testing.T, c *testetcd.Cluster, prefix, node string) *etcdNode {
	t.Helper()
	n := &etcdNode{store: openEtcdStore(t, c, prefix, node), clock: &testClock{}}
	d, err := New(Config{Store: n.store, ExecuteDeadline: time.Minute, ResolveRetryInterval: time.Nanosecond,
		Logger: quietLog(), Now: n.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	n.d = d
	return n
}

func (n *etcdNode) round(t *testing.T) RoundStats {
	t.Helper()
	st, err := n.d.Round(context.Background())
	if err != nil {
		t.Fatalf("round: %v", err)
	}
	return st
}

func getKey(t *testing.T, cli *clientv3.Client, key string) []byte {
	t.Helper()
	r, err := cli.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return nil
	}
	return r.Kvs[0].Value
}

// TestEtcdLayoutAndFormat checks the documented key layout: a live job under active/, a settled
// one moved to done/ in the same transaction, values with a format version, and a version this
// build does not know refused as ErrFormat.
func TestEtcdLayoutAndFormat(t *testing.T) {
	c := testetcd.Shared(t)
	prefix := testetcd.Prefix(t)
	n := newEtcdNode(t, c, prefix, "node-a")
	cli := n.store.Client()
	j, err := n.d.Submit(context.Background(), fakeRequest("idx"))
	if err != nil {
		t.Fatal(err)
	}
	active, done := prefix+"/v1/active/"+j.ID, prefix+"/v1/done/"+j.ID
	if v := getKey(t, cli, active); v == nil || getKey(t, cli, done) != nil {
		t.Fatalf("after submit: active %q, done present %t", v, getKey(t, cli, done) != nil)
	}
	if err := n.d.AddSidecar("s1", newFake()); err != nil {
		t.Fatal(err)
	}
	if v := getKey(t, cli, prefix+"/v1/nodes/node-a"); v == nil {
		t.Fatal("no node claim key")
	}
	for n.round(t); ; n.round(t) {
		if got, _ := n.d.Get(j.ID); got.State == StateCommitted && !got.SlotHeld {
			if got.Node != "node-a" || got.Claim == 0 {
				t.Fatalf("send journaled without its node claim: %q %x", got.Node, got.Claim)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	v := getKey(t, cli, done)
	if v == nil || getKey(t, cli, active) != nil {
		t.Fatalf("after settling: done %q, active present %t", v, getKey(t, cli, active) != nil)
	}
	if _, err := decodeJob(done, v); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(context.Background(), done, `{"format":2,"job":{"id":"x"}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := n.d.Get(j.ID); !errors.Is(err, ErrFormat) {
		t.Fatalf("a format-2 record: %v", err)
	}
}

// TestEtcdClaim: a send journaled under a claim the node no longer holds (its lease revoked, as
// an expiry would) is refused with ErrClaimLost and writes nothing; a second live process cannot
// take the same node name; the store takes a new claim by itself.
func TestEtcdClaim(t *testing.T) {
	c := testetcd.Shared(t)
	prefix := testetcd.Prefix(t)
	n := newEtcdNode(t, c, prefix, "node-a")
	j, err := n.d.Submit(context.Background(), fakeRequest("idx"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := OpenEtcd(ctx, EtcdOptions{Endpoints: c.Endpoints, Prefix: prefix, Node: "node-a", LeaseTTL: time.Second, ClaimWait: time.Second}); !errors.Is(err, ErrNodeClaimed) {
		t.Fatalf("a second process as node-a: %v", err)
	}
	node, old := n.store.Node()
	if _, err := n.store.Client().Revoke(context.Background(), clientv3.LeaseID(old)); err != nil {
		t.Fatal(err)
	}
	err = n.store.Update(func(tx Tx) error {
		x, err := tx.Get(j.ID)
		if err != nil {
			return err
		}
		x.State, x.InvocationID, x.Node, x.Claim = StateRunning, "inv-1", node, old
		return tx.Put(&x)
	})
	if !errors.Is(err, ErrClaimLost) {
		t.Fatalf("journal a send under a revoked claim: %v", err)
	}
	if got, _ := n.d.Get(j.ID); got.State != StatePending {
		t.Fatalf("after the refusal: %s", got.State)
	}

	deadline := time.Now().Add(10 * time.Second)
	for _, claim := n.store.Node(); claim == old || claim == 0; _, claim = n.store.Node() {
		if time.Now().After(deadline) {
			t.Fatal("no new claim")
		}
		time.Sleep(10 * time.Millisecond)
	}
	f := newFake()
	if err := n.d.AddSidecar("s1", f); err != nil {
		t.Fatal(err)
	}
	if st := n.round(t); st.Dispatched != 1 || f.sent() != 1 {
		t.Fatalf("under the new claim: %+v, %d sends", st, f.sent())
	}
}

// TestEtcdVanishedNode: node A sends a job and dies (its lease ends, taking its epoch
// announcement). Node B never sends it: B's deadline sweep makes it UNKNOWN, B settles it by
// index.resolve through its own sidecar, and only then releases the name.
func TestEtcdVanishedNode(t *testing.T) {
	noLeaks(t)
	c := testetcd.Shared(t)
	prefix := testetcd.Prefix(t)
	a, b := newEtcdNode(t, c, prefix, "node-a"), newEtcdNode(t, c, prefix, "node-b")
	fa, fb := newFake(), newFake()
	fa.setAnswer(blockUntilCtx)
	fb.setResolve(func(_ context.Context, p rpc.ResolveParams) (rpc.ResolveResult, error) {
		return rpc.ResolveResult{InvocationID: p.InvocationID, Outcome: rpc.OutcomeNotCommitted, Version: p.PinnedVersion + 1, Fenced: true}, nil
	})
	if err := a.d.AddSidecar("s1", fa); err != nil {
		t.Fatal(err)
	}
	j, err := b.d.Submit(context.Background(), fakeRequest("idx")) // any node admits
	if err != nil {
		t.Fatal(err)
	}
	if st := a.round(t); st.Dispatched != 1 {
		t.Fatalf("node a: %+v", st)
	}
	if err := b.d.AddSidecar("s1", fb); err != nil { // the same sidecar name on another node
		t.Fatal(err)
	}
	if st := b.round(t); st != (RoundStats{}) {
		t.Fatalf("node b acted on a live node's job: %+v", st)
	}
	a.d.Close()
	a.store.Close() // the lease ends: epoch and claim gone, as at a TTL expiry

	if st := b.round(t); st != (RoundStats{}) {
		t.Fatalf("node b before the deadline: %+v", st)
	}
	if _, err := b.d.Submit(context.Background(), fakeRequest("IDX")); !errors.Is(err, ErrNameBusy) {
		t.Fatalf("fence while RUNNING on a vanished node: %v", err)
	}
	b.clock.Advance(2 * time.Minute)
	if st := b.round(t); st.Expired != 1 || st.Resolved != 1 || st.Freed != 1 {
		t.Fatalf("node b after the deadline: %+v", st)
	}
	got, _ := b.d.Get(j.ID)
	if got.State != StateNotCommitted || got.SlotHeld || fa.sent() != 1 || fb.sent() != 0 {
		t.Fatalf("%s held %t, sends a %d b %d: %s", got.State, got.SlotHeld, fa.sent(), fb.sent(), historyEvents(got))
	}
	if _, err := b.d.Submit(context.Background(), fakeRequest("IDX")); err != nil {
		t.Fatalf("the name after settling: %v", err)
	}
}
