package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/custody"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/slot"
)

// resolveTimeout bounds one fencing attempt; an unreachable store answers UNKNOWN, not an error.
const resolveTimeout = 15 * time.Second

// resolve settles an invocation from storage alone, whatever its engine (docs/PROTOCOL.md §4):
// its gateway's claim and the manifest that claim names, or a fence that closes the version to
// it (custody.Decide). It needs no proof that the worker is dead: a fence stops its gateway from
// forwarding a manifest, and an invocation still running in this sidecar with its manifest in
// flight is UNKNOWN until it lands or the domain is gone.
func (s *Server) resolve(ctx context.Context, p rpc.ResolveParams) (rpc.ResolveResult, error) {
	e, err := s.engineNamed(p.Engine)
	if err != nil {
		return rpc.ResolveResult{}, err
	}
	store, err := p.Dataset.Store.Parse()
	if err != nil {
		return rpc.ResolveResult{}, err
	}
	if _, err := s.credsFor(store, p.Credentials); err != nil {
		return rpc.ResolveResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	res := rpc.ResolveResult{InvocationID: p.InvocationID, Version: p.PinnedVersion + 1, Outcome: rpc.OutcomeUnknown}
	st, err := s.openStore(ctx, store, p.Credentials)
	if err != nil {
		if errors.Is(err, storage.ErrUnavailable) {
			res.Reason = "storage unreachable: " + s.sanitizeCreds(p.Credentials, err.Error())
			return res, nil
		}
		return res, fmt.Errorf("%w: open store: %s", rpc.ErrInvalidParams, s.sanitizeCreds(p.Credentials, err.Error()))
	}
	if err := s.requireCondWrites(ctx, store, p.Credentials, st); err != nil {
		return s.unfenceable(res, p.Credentials, err)
	}
	v, err := custody.Decide(ctx, st, p.Dataset.Path, p.PinnedVersion, p.InvocationID, e.builtin(), s.running(p.InvocationID))
	switch {
	case errors.Is(err, storage.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		res.Reason = "storage unreachable: " + s.sanitizeCreds(p.Credentials, err.Error())
		return res, nil
	case err != nil:
		return res, fmt.Errorf("resolve: %s", s.sanitizeCreds(p.Credentials, err.Error()))
	}
	res.Fenced, res.Reason = v.Fenced, v.Reason
	switch v.Outcome {
	case slot.Committed:
		res.Outcome = rpc.OutcomeCommitted
	case slot.NotCommitted:
		res.Outcome = rpc.OutcomeNotCommitted
	}
	s.log.Info("resolved", "invocation", p.InvocationID, "engine", e.name, "outcome", res.Outcome, "version", res.Version)
	if s.custody != nil {
		s.custody.Settle(ctx, p.InvocationID, res.Outcome)
	}
	return res, nil
}

// sanitizeCreds redacts the given per-call credentials and the sidecar's own keys from msg.
func (s *Server) sanitizeCreds(c *rpc.Credentials, msg string) string {
	return redact(msg, s.callSecrets(c))
}

// callSecrets are the secrets a message about a call must not carry: the call's credentials
// and the sidecar's own keys.
func (s *Server) callSecrets(c *rpc.Credentials) []string {
	secrets := s.ownSecrets()
	if c != nil {
		secrets = append(secrets, c.SecretKey, c.AccessKey, c.SessionToken)
	}
	return secrets
}
