package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
)

// resolveTimeout bounds one fencing attempt; an unreachable store answers UNKNOWN, not an error.
const resolveTimeout = 15 * time.Second

// resolve settles an invocation by fencing its commit slot pinned+1 (ARCHITECTURE §5). It needs no
// proof that the worker is dead: once the fence is in the slot, the worker can never commit.
func (s *Server) resolve(ctx context.Context, p rpc.ResolveParams) (rpc.ResolveResult, error) {
	e, err := s.engineNamed(p.Engine)
	if err != nil {
		return rpc.ResolveResult{}, err
	}
	if !e.builtin() {
		return s.resolveThrough(ctx, e, p)
	}
	if _, err := s.credsFor(p.Dataset.Store, p.Credentials); err != nil {
		return rpc.ResolveResult{}, err
	}
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
	secrets := s.ownSecrets()
	if c != nil {
		secrets = append(secrets, c.SecretKey, c.AccessKey, c.SessionToken)
	}
	return redact(msg, secrets)
}

// engineResolveTimeout bounds index.resolve through another engine's settle: a fresh domain and
// the engine's start (an interpreter, a library) come on top of the storage requests.
const engineResolveTimeout = 2 * resolveTimeout

// resolveThrough settles through engine e's settle in a fresh domain (docs/ENGINE.md §5). The
// sidecar cannot prove here that the invocation's domain is gone (it may be another sidecar's),
// so domain_reaped is false. A settle that does not answer leaves the outcome UNKNOWN.
func (s *Server) resolveThrough(ctx context.Context, e *engine, p rpc.ResolveParams) (rpc.ResolveResult, error) {
	if _, err := s.credsFor(p.Dataset.Store, p.Credentials); err != nil {
		return rpc.ResolveResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, engineResolveTimeout)
	defer cancel()
	res := rpc.ResolveResult{InvocationID: p.InvocationID, Version: p.PinnedVersion + 1, Outcome: rpc.OutcomeUnknown}
	if e.decl.Settle == rpc.SettleNone {
		res.Reason = fmt.Sprintf("engine %s declares no settle guarantee: the outcome stays unknown for a person", e.name)
		return res, nil
	}
	// The engine's fence (a Lance claim included) is a put-if-absent too: only on a store that
	// honours it.
	if err := s.requireCondWrites(ctx, p.Dataset.Store, p.Credentials, nil); err != nil {
		return s.unfenceable(res, p.Credentials, err)
	}
	out, err := s.settleIn(ctx, e, workerproto.SettleRequest{InvocationID: p.InvocationID, Dataset: p.Dataset,
		PinnedVersion: p.PinnedVersion, Credentials: p.Credentials}, nil)
	if err != nil {
		res.Reason = "engine " + e.name + ": " + s.sanitizeCreds(p.Credentials, err.Error())
		return res, nil
	}
	res.Outcome, res.Fenced, res.Reason = out.Outcome, out.Fenced, out.Reason
	if out.Version != 0 {
		res.Version = out.Version
	}
	// The settle is engine code: a COMMITTED stands only on the slot's claim, read here.
	if res.Outcome == rpc.OutcomeCommitted {
		if why := s.claimedBy(ctx, p.Dataset, p.Credentials, p.InvocationID, p.PinnedVersion+1); why != "" {
			s.log.Error("the engine's settle answers COMMITTED, the slot's claim does not: left unknown", "invocation", p.InvocationID, "engine", e.name, "why", why)
			res.Outcome, res.Fenced = rpc.OutcomeUnknown, false
			res.Reason = "engine " + e.name + "'s settle answers COMMITTED, but " + why + ": the outcome is left for a person"
		}
	}
	s.log.Info("resolved", "invocation", p.InvocationID, "engine", e.name, "outcome", res.Outcome, "version", res.Version)
	if s.custody != nil {
		s.custody.Settle(ctx, p.InvocationID, res.Outcome)
	}
	return res, nil
}
