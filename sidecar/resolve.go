package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
)

// resolveTimeout bounds one fencing attempt; an unreachable store answers UNKNOWN, not an error.
const resolveTimeout = 15 * time.Second

// resolve settles an invocation by fencing its commit slot pinned+1 (ARCHITECTURE §5). It needs no
// proof that the worker is dead: once the fence is in the slot, the worker can never commit.
func (s *Server) resolve(ctx context.Context, p rpc.ResolveParams) (rpc.ResolveResult, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	res := rpc.ResolveResult{InvocationID: p.InvocationID, Version: p.PinnedVersion + 1, Outcome: rpc.OutcomeUnknown}
	st, err := s.openStore(ctx, p.Dataset.Store, p.Credentials)
	if err != nil {
		if errors.Is(err, storage.ErrUnavailable) {
			res.Reason = "storage unreachable: " + s.sanitizeCreds(p.Credentials, err.Error())
			return res, nil
		}
		return res, fmt.Errorf("%w: open store: %s", rpc.ErrInvalidParams, s.sanitizeCreds(p.Credentials, err.Error()))
	}
	if err := s.requireCondWrites(ctx, p.Dataset.Store, p.Credentials, st); err != nil {
		return s.unfenceable(res, p.Credentials, err)
	}
	out, err := dataset.ResolveSlot(ctx, st, p.Dataset.Path, p.PinnedVersion, p.InvocationID)
	switch {
	case errors.Is(err, storage.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		res.Reason = "storage unreachable: " + s.sanitizeCreds(p.Credentials, err.Error())
		return res, nil
	case errors.Is(err, storage.ErrNotFound):
		return res, fmt.Errorf("%w: %s", rpc.ErrNotFound, s.sanitizeCreds(p.Credentials, err.Error()))
	case err != nil:
		return res, fmt.Errorf("resolve: %s", s.sanitizeCreds(p.Credentials, err.Error()))
	}
	// Fenced: this call or an earlier one put this invocation's fence into the slot.
	res.Version = out.Version
	res.Fenced = out.FenceWritten || (out.Op == dataset.OpFence && out.Holder == p.InvocationID)
	if out.Committed {
		res.Outcome, res.Reason = rpc.OutcomeCommitted, "the slot holds this invocation's commit"
	} else {
		res.Outcome = rpc.OutcomeNotCommitted
		res.Reason = fmt.Sprintf("slot %d holds %s by %q", out.Version, out.Op, out.Holder)
		if out.FenceWritten {
			res.Reason = fmt.Sprintf("fenced slot %d: the invocation can never commit", out.Version)
		}
	}
	s.log.Info("resolved", "invocation", p.InvocationID, "outcome", res.Outcome, "version", res.Version)
	if s.custody != nil {
		s.custody.Settle(ctx, p.InvocationID, res.Outcome)
	}
	return res, nil
}

// sanitizeCreds redacts the given per-call credentials and the sidecar's own keys from msg.
func (s *Server) sanitizeCreds(c *rpc.Credentials, msg string) string {
	secrets := []string{s.cfg.S3SecretKey, s.cfg.S3AccessKey}
	if c != nil {
		secrets = append(secrets, c.SecretKey, c.AccessKey, c.SessionToken)
	}
	return redact(msg, secrets)
}
