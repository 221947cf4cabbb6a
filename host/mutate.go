package host

import (
	"context"
	"fmt"

	"github.com/cba1309c/steward/rpc"
)

// Mutate runs one index mutation and returns its classified result. The answer's identity echo is
// checked here: a result for another invocation or from another sidecar epoch is ErrIdentity, never
// a result (the caller must treat the outcome as unknown). A transport failure after the send wraps
// rpc.ErrConnectionLost: the mutation may or may not have run.
func (c *Client) Mutate(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
	var res rpc.MutateResult
	if err := c.rpc.Call(ctx, rpc.MethodIndexMutate, p, &res); err != nil {
		return res, err
	}
	if res.InvocationID != p.InvocationID || res.Epoch != c.hello.Epoch {
		return res, fmt.Errorf("%w: sent invocation %s to epoch %s, answer names invocation %s epoch %s",
			ErrIdentity, p.InvocationID, c.hello.Epoch, res.InvocationID, res.Epoch)
	}
	return res, nil
}

// Resolve settles an indeterminate invocation by fencing its commit slot (pinned+1).
func (c *Client) Resolve(ctx context.Context, p rpc.ResolveParams) (rpc.ResolveResult, error) {
	var res rpc.ResolveResult
	if err := c.rpc.Call(ctx, rpc.MethodIndexResolve, p, &res); err != nil {
		return res, err
	}
	if res.InvocationID != p.InvocationID {
		return res, fmt.Errorf("%w: resolve for %s answered for %s", ErrIdentity, p.InvocationID, res.InvocationID)
	}
	return res, nil
}

// Cancel ends invocation inv with index.cancel: a queued mutation is answered at once, a running
// one is killed and answered with what storage holds. It returns once the mutation's own answer
// has been sent (to whichever connection carries it); the reply repeats that answer's outcome.
func (c *Client) Cancel(ctx context.Context, inv string) (rpc.CancelResult, error) {
	var res rpc.CancelResult
	if err := c.rpc.Call(ctx, rpc.MethodIndexCancel, rpc.CancelParams{InvocationID: inv}, &res); err != nil {
		return res, err
	}
	if res.InvocationID != inv {
		return res, fmt.Errorf("%w: cancel of %s answered for %s", ErrIdentity, inv, res.InvocationID)
	}
	return res, nil
}
