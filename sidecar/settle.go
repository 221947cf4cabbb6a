package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
)

// ErrSettleFailed: an engine's settle domain ended without a valid answer (it died, hung past the
// bound, or broke protocol). The outcome is still unknown.
var errSettleFailed = errors.New("engine settle failed")

// settleSpare is a settle domain launched beside a mutation's own (prestartSettle), so that the
// confirmation of its commit does not wait for a second engine start (a Lance settle's python
// and `import lance`: ~0.3 s). It gets nothing but its launch until a settle takes it: no
// request and no credentials, which travel only in the request frame, sent once the mutation's
// domain is reaped.
type settleSpare struct {
	launched chan *warm    // the domain, or nil if its launch failed; received once
	taken    bool          // a settle received it (that settle tears the domain down), or drop did
	dropped  chan struct{} // closed once drop has torn the domain down; nil without drop
}

// prestartSettle launches, in the background, the settle domain that would confirm a commit j
// claims: for an engine other than the built-in one with a settle guarantee (confirmCommit).
// The caller owns the result and must close it, whatever happens.
func (s *Server) prestartSettle(j *job) *settleSpare {
	if s.iso == nil || j.eng.builtin() || j.eng.decl.Settle == rpc.SettleNone {
		return nil
	}
	sp := &settleSpare{launched: make(chan *warm, 1)}
	go func() {
		w, err := s.launch(j.eng, "settle-"+j.p.InvocationID, s.cfg.Isolation.MemoryLimit, s.cfg.Isolation.PidsLimit, &j.p.Dataset, false, nil)
		if err != nil {
			s.log.Warn("could not prestart the settle domain: the confirmation will launch its own", "invocation", j.p.InvocationID, "error", err)
			w = nil
		}
		sp.launched <- w
	}()
	return sp
}

// take returns the prestarted domain if it is up and still alive (nil otherwise, and a dead one
// is torn down); the settle that takes it tears it down.
func (sp *settleSpare) take() *warm {
	if sp == nil || sp.taken {
		return nil
	}
	sp.taken = true
	w := <-sp.launched
	if w != nil && isClosed(w.dom.Done()) {
		w.discard()
		return nil
	}
	return w
}

// drop starts tearing the prestarted domain down, beside the mutation's own teardown, once no
// settle will need it (the mutation answered without claiming a commit); close waits for it.
func (sp *settleSpare) drop() {
	if sp == nil || sp.taken {
		return
	}
	sp.taken = true
	sp.dropped = make(chan struct{})
	go func() {
		defer close(sp.dropped)
		if w := <-sp.launched; w != nil {
			w.discard()
		}
	}()
}

// close tears the prestarted domain down unless a settle took it, and returns once it is dead,
// reaped and removed: before the mutation's answer, like the mutation's own domain.
func (sp *settleSpare) close() {
	if sp == nil {
		return
	}
	sp.drop()
	if sp.dropped != nil {
		<-sp.dropped
	}
}

// settleIn runs one settle of engine e in a fresh domain (docs/ENGINE.md §5) — spare's when it
// has one up, else one launched here — and returns its answer. It is bounded by ctx; the domain
// is always killed, reaped and its temp dir removed before it returns. Settles run at most
// Executors at a time (a prestarted domain waits for its slot without a request).
func (s *Server) settleIn(ctx context.Context, e *engine, req workerproto.SettleRequest, spare *settleSpare) (_ workerproto.Settled, retErr error) {
	if s.iso == nil {
		return workerproto.Settled{}, fmt.Errorf("%w: %s", rpc.ErrIsolationUnavailable, s.isoReport.Reason)
	}
	// The settle's worker gets keys for the slot's store only: the call's own, or the sidecar's
	// where that store is allowed.
	creds, err := s.credsFor(req.Dataset.Store, req.Credentials)
	if err != nil {
		return workerproto.Settled{}, err
	}
	req.Credentials = creds
	w := spare.take()
	select {
	case s.settleSem <- struct{}{}:
		defer func() { <-s.settleSem }()
	case <-ctx.Done():
		if w != nil {
			w.discard()
		}
		return workerproto.Settled{}, fmt.Errorf("%w: waiting for a settle slot: %w", errSettleFailed, ctx.Err())
	}
	if w == nil {
		if w, err = s.launch(e, "settle-"+req.InvocationID, s.cfg.Isolation.MemoryLimit, s.cfg.Isolation.PidsLimit, &req.Dataset, false, nil); err != nil {
			return workerproto.Settled{}, fmt.Errorf("%w: launch: %w", errSettleFailed, err)
		}
	}
	w.logw.bind(req.InvocationID, "", req.Credentials, s.ownSecrets()...)
	defer func() {
		// Whatever happened, the domain goes down before the answer is used.
		kctx, cancel := context.WithTimeout(context.Background(), s.cfg.Isolation.ReapBound)
		defer cancel()
		select {
		case <-w.dom.Done():
		case <-time.After(resultGrace):
		}
		if _, err := w.dom.Terminate(kctx); err != nil {
			s.log.Error("settle domain teardown incomplete", "invocation", req.InvocationID, "error", err)
		}
		_ = w.dom.Close()
		w.toW.Close()
		w.fromW.Close()
		go func() {
			for range w.frames {
			}
		}()
		if err := os.RemoveAll(w.tempDir); err != nil && retErr == nil {
			s.log.Error("removing the settle domain's temp dir failed", "invocation", req.InvocationID, "error", err)
		}
	}()
	req.TempDir = w.tempDir
	requested := false
	for {
		select {
		case <-ctx.Done():
			return workerproto.Settled{}, fmt.Errorf("%w: %w", errSettleFailed, ctx.Err())
		case fe, ok := <-w.frames:
			if !ok || fe.err != nil {
				return workerproto.Settled{}, fmt.Errorf("%w: the engine ended without an answer (%v)", errSettleFailed, fe.err)
			}
			f := fe.f
			switch {
			case f.T == workerproto.TypeHello && !requested:
				if f.Pid != w.dom.WorkerPid() || f.Engine.Check() != nil || f.Engine.Settle != e.decl.Settle {
					return workerproto.Settled{}, fmt.Errorf("%w: hello does not match the engine's registration", errSettleFailed)
				}
				frame, err := workerproto.NewRequest(workerproto.KindSettle, &req)
				if err == nil {
					err = workerproto.Write(w.toW, frame, workerproto.MaxRequestFrame)
				}
				if err != nil {
					return workerproto.Settled{}, fmt.Errorf("%w: request: %w", errSettleFailed, err)
				}
				requested = true
			case f.T == workerproto.TypeSettled && requested:
				st := *f.Settled
				if st.Version != req.PinnedVersion+1 {
					return workerproto.Settled{}, fmt.Errorf("%w: protocol violation: settled version %d, the slot is %d", errSettleFailed, st.Version, req.PinnedVersion+1)
				}
				st.Reason = s.sanitizeCreds(req.Credentials, st.Reason)
				return st, nil
			default:
				return workerproto.Settled{}, fmt.Errorf("%w: protocol violation: unexpected %q frame", errSettleFailed, f.T)
			}
		}
	}
}

// confirmTimeout bounds the confirmation of one claimed commit.
const confirmTimeout = 2 * resolveTimeout

// confirmCommit checks in storage, with trusted code, that the slot pinned+1 holds this
// invocation's commit before a NATIVE_RETURN 0 COMMITTED leaves (docs/ENGINE.md §4.2): the
// built-in engine's by reading the manifest, any other engine's through its settle in a fresh
// domain (domain_reaped: the invocation's domain is gone), spare's if it was prestarted. It
// returns "" when confirmed, else why not.
func (s *Server) confirmCommit(j *job, res rpc.MutateResult, spare *settleSpare) string {
	slot := j.p.PinnedVersion + 1
	if res.CommittedVersion != slot {
		return fmt.Sprintf("the engine claims a commit at version %d; it may commit only at %d", res.CommittedVersion, slot)
	}
	ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
	defer cancel()
	if j.eng.builtin() {
		st, err := s.openStore(ctx, j.p.Dataset.Store, j.p.Credentials)
		if err != nil {
			return "the slot could not be read: " + s.sanitize(j, err.Error())
		}
		d, err := dataset.Open(ctx, st, j.p.Dataset.Path, slot)
		switch {
		case errors.Is(err, dataset.ErrVersionNotFound):
			return fmt.Sprintf("slot %d is empty", slot)
		case err != nil:
			return "the slot could not be read: " + s.sanitize(j, err.Error())
		}
		if m := d.Manifest(); m.IsFence() || m.Transaction.InvocationID != j.p.InvocationID {
			return fmt.Sprintf("slot %d holds %s by %q", slot, m.Transaction.Op, m.Transaction.InvocationID)
		}
		return ""
	}
	if j.eng.decl.Settle == rpc.SettleNone {
		return "engine " + j.eng.name + " declares no settle guarantee: nothing can confirm its commit"
	}
	// Trusted code first: the engine's settle runs engine code, which a compromised engine
	// controls. Only a commit claim of this invocation, put-if-absent at the slot, lets its
	// answer through; the settle in a fresh domain must then agree.
	if why := s.claimedBy(ctx, j.p.Dataset, j.p.Credentials, j.p.InvocationID, slot); why != "" {
		return why
	}
	out, err := s.settleIn(ctx, j.eng, workerproto.SettleRequest{InvocationID: j.p.InvocationID, Dataset: j.p.Dataset,
		PinnedVersion: j.p.PinnedVersion, Credentials: j.p.Credentials, DomainReaped: true}, spare)
	switch {
	case err != nil:
		return "the engine's settle could not confirm it: " + s.sanitize(j, err.Error())
	case out.Outcome != rpc.OutcomeCommitted || out.Version != slot:
		return fmt.Sprintf("the engine's settle answers %s at %d (%s)", out.Outcome, out.Version, out.Reason)
	}
	return ""
}

// maxClaimBytes bounds a slot claim read by the sidecar.
const maxClaimBytes = 4 << 10

// claimedBy reads the slot's claim, `<dataset>/_steward/slots/<slot:020>.json` (docs/ENGINE.md
// §5.3: written with put-if-absent by every commit of an engine other than the built-in one),
// and returns why it does not show invocation inv's commit ("" when it does).
func (s *Server) claimedBy(ctx context.Context, ds rpc.DatasetRef, creds *rpc.Credentials, inv string, slot int64) string {
	st, err := s.openStore(ctx, ds.Store, creds)
	if err != nil {
		return "the slot's claim could not be read: " + s.sanitizeCreds(creds, err.Error())
	}
	key := path.Join(ds.Path, "_steward/slots", fmt.Sprintf("%020d.json", slot))
	b, err := storage.ReadAll(ctx, st, key, maxClaimBytes)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return fmt.Sprintf("slot %d has no claim: the engine never took it", slot)
	case err != nil:
		return "the slot's claim could not be read: " + s.sanitizeCreds(creds, err.Error())
	}
	var c struct {
		Invocation string `json:"invocation"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Sprintf("slot %d's claim is not a claim: %v", slot, err)
	}
	if c.Kind != "commit" || c.Invocation != inv {
		return fmt.Sprintf("slot %d is claimed for a %s by %q", slot, c.Kind, c.Invocation)
	}
	return ""
}

// confirmed turns a NATIVE_RETURN 0 that claims a commit into the answer the sidecar can stand
// behind: unchanged when storage confirms it, INDETERMINATE -23 otherwise (index.resolve, and the
// sidecar's own self-fence, settle it).
func (s *Server) confirmed(j *job, res rpc.MutateResult, spare *settleSpare) rpc.MutateResult {
	if res.Phase != rpc.PhaseNativeReturn || res.Code != rpc.NativeOK || res.CommittedVersion == 0 {
		return res
	}
	why := s.confirmCommit(j, res, spare)
	if why == "" {
		return res
	}
	s.log.Error("the engine's commit claim is not confirmed in storage: answered indeterminate", "invocation", j.p.InvocationID,
		"engine", j.eng.name, "claimed_version", res.CommittedVersion, "why", why)
	res.Phase, res.Code, res.CompletionReason = rpc.PhaseIndeterminate, rpc.ReasonUnconfirmedCommit, ""
	res.CommittedVersion = 0
	res.Message = "the engine reported a commit that storage does not confirm: " + why
	return res
}
