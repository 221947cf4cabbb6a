package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/ledger"
)

const (
	// recoverInterval paces the retries of what recovery could not settle (storage unreachable)
	// and the collection of settled invocation records.
	recoverInterval = 30 * time.Second
	// recordGrace is how long an invocation record outlives its last ticket. An accept is
	// journaled with the ledger's next group commit, not awaited; the record must survive until
	// then, or a crash in between would bring the ticket back without a way to settle it.
	recordGrace = 10 * time.Second
)

// run settles the invocations found in the journal at once, then retries the undecided ones
// and collects settled records every recoverInterval, until close.
func (c *custody) run() {
	defer close(c.done)
	t := time.NewTicker(recoverInterval)
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

// pass is one round of recovery, verification retries and record collection.
func (c *custody) pass() {
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
	verify := make([]string, 0, len(c.verify))
	for inv := range c.verify {
		verify = append(verify, inv)
	}
	c.mu.Unlock()
	fence := make([]string, 0, len(c.fence))
	c.mu.Lock()
	for inv := range c.fence {
		fence = append(fence, inv)
	}
	c.mu.Unlock()
	for _, inv := range fence {
		c.selfFence(ctx, inv)
	}
	for _, inv := range verify {
		v, err := c.readSlot(ctx, inv, nil)
		if err != nil {
			c.log.Warn("slot still unreadable: tickets kept", "invocation", inv, "error", c.s.sanitizeCreds(nil, err.Error()))
			continue
		}
		c.apply(ctx, inv, v)
	}
	c.forgetSettled(false)
}

// settleRecovered decides an invocation found in the journal by fencing its slot, as
// index.resolve does. The worker is gone: isolation killed a dead sidecar's domains before the
// ledger opened, so a fence can never race a commit. An error leaves it for the next pass.
func (c *custody) settleRecovered(ctx context.Context, o ledger.Owner) (ledger.Verdict, error) {
	c.mu.Lock()
	rec, ok := c.recs[o.ID]
	c.mu.Unlock()
	if !ok {
		return ledger.Unknown, fmt.Errorf("no record of invocation %s: its tickets need a host to settle them", o.ID)
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	st, err := c.s.openStore(ctx, rec.Store, nil)
	if err != nil {
		return ledger.Unknown, fmt.Errorf("open store: %s", c.s.sanitizeCreds(nil, err.Error()))
	}
	out, err := dataset.ResolveSlot(ctx, st, rec.Path, rec.Pinned, o.ID)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		// The pinned version is gone and the slot is empty: the invocation never committed and,
		// dead, never will.
		return ledger.NotCommitted, nil
	case err != nil:
		return ledger.Unknown, fmt.Errorf("resolve: %s", c.s.sanitizeCreds(nil, err.Error()))
	case out.Committed:
		return ledger.Committed, nil
	}
	return ledger.NotCommitted, nil
}

// forgetSettled deletes the records of invocations that hold no tickets any more: at once when
// the ledger was just loaded (its memory is then its journal), else after recordGrace.
func (c *custody) forgetSettled(atOpen bool) {
	c.mu.Lock()
	var candidates []string
	for inv := range c.recs {
		if _, live := c.live[inv]; !live {
			candidates = append(candidates, inv)
		}
	}
	c.mu.Unlock()
	now := time.Now()
	var gone []string
	for _, inv := range candidates {
		st, err := c.l.Status(context.Background(), invOwner(inv))
		c.mu.Lock()
		_, live := c.live[inv]
		switch {
		case err != nil || live || st.Held+st.Abandoned > 0:
			delete(c.zeroSince, inv)
		case atOpen:
			gone = append(gone, inv)
		default:
			if since, seen := c.zeroSince[inv]; !seen {
				c.zeroSince[inv] = now
			} else if now.Sub(since) >= recordGrace {
				gone = append(gone, inv)
			}
		}
		c.mu.Unlock()
	}
	if err := c.j.forget(gone); err != nil {
		c.log.Warn("forgetting settled invocation records failed", "error", err)
		return
	}
	c.mu.Lock()
	for _, inv := range gone {
		delete(c.recs, inv)
		delete(c.zeroSince, inv)
	}
	c.mu.Unlock()
}
