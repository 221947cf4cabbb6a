package custody

import (
	"context"
	"fmt"
	"time"

	"github.com/cba1309c/steward/storage/ledger"
)

// run settles the invocations found in the journal at once, then retries the undecided ones
// every RecoverInterval, until Close.
func (c *Custody) run() {
	defer close(c.done)
	t := time.NewTicker(c.cfg.RecoverInterval)
	defer t.Stop()
	for {
		c.pass()
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pass is one round of recovery, self-fence retries and slot verification retries.
func (c *Custody) pass() {
	ctx := c.ctx
	rep, err := c.l.Recover(ctx, c.settleRecovered)
	if err != nil && ctx.Err() == nil {
		c.log.Error("recovery pass failed", "error", err)
	}
	if rep != (ledger.RecoverReport{}) {
		c.log.Info("recovery pass", "accepted", rep.Accepted, "abandoned", rep.Abandoned, "unknown", rep.Unknown,
			"host_txns", rep.HostTxns, "sweeps_released", rep.Released)
	}
	c.mu.Lock()
	c.unsettled = rep.Unknown
	fence := keys(c.fence)
	c.mu.Unlock()
	for _, inv := range fence {
		c.selfFence(ctx, inv)
	}
}

func keys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// startFence runs selfFence in the background, owned by custody (Close waits for it); once Close
// has begun it only queues the invocation for the next start's recovery.
func (c *Custody) startFence(inv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		c.fence[inv] = struct{}{}
		return
	}
	c.fences.Add(1)
	go func() {
		defer c.fences.Done()
		c.selfFence(c.ctx, inv)
	}()
}

// selfFence settles an indeterminate invocation by fencing its slot; a failure queues it for the
// next recovery pass.
func (c *Custody) selfFence(ctx context.Context, inv string) {
	note, _ := c.l.Note(Owner(inv))
	v, err := c.settleRecovered(ctx, Owner(inv), note)
	if err != nil {
		c.log.Warn("self-fence failed: tickets kept, retried by recovery", "invocation", inv, "error", err)
		c.mu.Lock()
		c.fence[inv] = struct{}{}
		c.mu.Unlock()
		return
	}
	c.apply(ctx, inv, v)
	c.mu.Lock()
	delete(c.fence, inv)
	c.mu.Unlock()
}

// settleRecovered decides an invocation whose domain is gone from storage alone (Decide):
// isolation killed a dead sidecar's domains, and with them their gateways, before the ledger
// opened, and a finished invocation's gateway is closed before its answer, so nothing of the
// invocation can still be written. An error leaves it for the next pass.
func (c *Custody) settleRecovered(ctx context.Context, o ledger.Owner, note []byte) (ledger.Verdict, error) {
	if note == nil {
		return ledger.Unknown, fmt.Errorf("no record of invocation %s: its tickets need a host to settle them (index.resolve)", o.ID)
	}
	rec, err := decodeRecord(note)
	if err != nil {
		return ledger.Unknown, err
	}
	ctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
	defer cancel()
	p, err := rec.Store.Parse()
	if err != nil {
		return ledger.Unknown, err
	}
	st, err := c.cfg.OpenStore(ctx, p, nil)
	if err != nil {
		return ledger.Unknown, fmt.Errorf("open store: %s", c.cfg.Redact(nil, err.Error()))
	}
	v, err := Decide(ctx, st, rec.Path, rec.Pinned, o.ID, rec.builtin(), false)
	if err != nil {
		return ledger.Unknown, fmt.Errorf("decide: %s", c.cfg.Redact(nil, err.Error()))
	}
	return verdictOf(v.Outcome), nil
}
