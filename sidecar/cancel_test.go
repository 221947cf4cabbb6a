package sidecar

import (
	"fmt"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
)

func answeredJob(id string) *job {
	return &job{p: rpc.MutateParams{InvocationID: id}, cx: newJobCancel(), done: make(chan rpc.MutateResult, 1)}
}

// The memory of answers is bounded by count and by time, and an id used again keeps its own
// record when the older one is evicted.
func TestCancelsMemoryIsBounded(t *testing.T) {
	c := newCancels(3, time.Hour)
	for i := range 5 {
		j := answeredJob(fmt.Sprint("inv-", i))
		c.add(j)
		res := rpc.MutateResult{Phase: rpc.PhasePreInvocationRejected, Code: rpc.ReasonShuttingDown}
		c.finish(j, &res)
	}
	if len(c.done) != 3 || len(c.order) != 3 {
		t.Fatalf("%d records, %d in order; want 3", len(c.done), len(c.order))
	}
	if _, r := c.request("inv-0"); r != nil {
		t.Fatal("the oldest record outlived the capacity")
	}
	if _, r := c.request("inv-4"); r == nil || r.state != rpc.CancelAnswered || r.outcome != rpc.OutcomeNotCommitted {
		t.Fatalf("newest record: %+v", r)
	}
	// inv-2 again: its new record survives the eviction of its old entry.
	j := answeredJob("inv-2")
	c.add(j)
	j.cx.request()
	j.cx.byCancel = true
	res := cancelledQueued()
	c.finish(j, &res)
	for _, id := range []string{"inv-5", "inv-6"} {
		o := answeredJob(id)
		c.add(o)
		r := rpc.MutateResult{Phase: rpc.PhaseNativeReturn}
		c.finish(o, &r)
	}
	if _, r := c.request("inv-2"); r == nil || r.state != rpc.CancelCancelled || !res.Cancelled {
		t.Fatalf("inv-2's second record: %+v (answer %+v)", r, res)
	}

	expiring := newCancels(10, time.Millisecond)
	j = answeredJob("inv-x")
	expiring.add(j)
	res = rpc.MutateResult{}
	expiring.finish(j, &res)
	time.Sleep(5 * time.Millisecond)
	if _, r := expiring.request("inv-x"); r != nil {
		t.Fatal("an expired record was still served")
	}
}
