package sidecar

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/custody"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/ledger"
)

// registerObjects registers the objects.* methods: the host's side of the ownership ledger.
func (s *Server) registerObjects() {
	handle(s, rpc.MethodObjectsReserve, s.objectsReserve)
	handle(s, rpc.MethodObjectsAccept, s.objectsAccept)
	handle(s, rpc.MethodObjectsAbandon, s.objectsAbandon)
	handle(s, rpc.MethodObjectsTransfer, s.objectsTransfer)
	handle(s, rpc.MethodObjectsAck, s.objectsAcknowledge)
	handle(s, rpc.MethodObjectsStatus, s.objectsStatus)
	handle(s, rpc.MethodObjectsSweep, s.objectsSweep)
}

func hostOwner(o rpc.ObjectOwner) ledger.Owner {
	if o.Kind == rpc.OwnerInvocation {
		return custody.Owner(o.ID)
	}
	return ledger.Owner{Kind: ledger.HostTxn, ID: o.ID}
}

func wireOwner(o ledger.Owner) rpc.ObjectOwner {
	if o.Kind == ledger.Invocation {
		return rpc.ObjectOwner{Kind: rpc.OwnerInvocation, ID: o.ID}
	}
	return rpc.ObjectOwner{Kind: rpc.OwnerHostTxn, ID: o.ID}
}

func (s *Server) objectsLedger() (*ledger.Ledger, error) {
	if s.custody == nil {
		return nil, fmt.Errorf("%w: no ledger", rpc.ErrInternal)
	}
	return s.custody.Ledger(), nil
}

func (s *Server) ownerStatus(ctx context.Context, o rpc.ObjectOwner) (rpc.ObjectsOwnerStatus, error) {
	st, err := s.custody.Ledger().Status(ctx, hostOwner(o))
	if err != nil {
		return rpc.ObjectsOwnerStatus{}, err
	}
	return rpc.ObjectsOwnerStatus{Owner: o, Held: st.Held, Offered: st.Offered, Abandoned: st.Abandoned}, nil
}

func (s *Server) objectsReserve(ctx context.Context, p rpc.ObjectsReserveParams) (rpc.ObjectsReserveResult, error) {
	l, err := s.objectsLedger()
	if err != nil {
		return rpc.ObjectsReserveResult{}, err
	}
	name, err := custody.StoreName(p.Store)
	if err != nil {
		return rpc.ObjectsReserveResult{}, err
	}
	if err := l.Reserve(ctx, hostOwner(p.Owner), name, p.Keys); err != nil {
		return rpc.ObjectsReserveResult{}, err
	}
	st := l.Stats()
	return rpc.ObjectsReserveResult{Reserved: len(p.Keys), Used: st.Used, Capacity: st.Capacity}, nil
}

func (s *Server) objectsAccept(ctx context.Context, p rpc.ObjectsReleaseParams) (rpc.ObjectsOwnerStatus, error) {
	return s.objectsRelease(ctx, p, true)
}

func (s *Server) objectsAbandon(ctx context.Context, p rpc.ObjectsReleaseParams) (rpc.ObjectsOwnerStatus, error) {
	return s.objectsRelease(ctx, p, false)
}

// objectsRelease accepts or abandons; it answers with the owner's counts after the call.
func (s *Server) objectsRelease(ctx context.Context, p rpc.ObjectsReleaseParams, accept bool) (rpc.ObjectsOwnerStatus, error) {
	l, err := s.objectsLedger()
	if err != nil {
		return rpc.ObjectsOwnerStatus{}, err
	}
	store := ""
	if p.Store != nil {
		if store, err = custody.StoreName(*p.Store); err != nil {
			return rpc.ObjectsOwnerStatus{}, err
		}
	}
	keys := p.Keys
	if p.All {
		keys = nil
	}
	if accept {
		err = l.Accept(ctx, hostOwner(p.Owner), store, keys)
	} else {
		err = l.Abandon(ctx, hostOwner(p.Owner), store, keys)
	}
	if err != nil {
		return rpc.ObjectsOwnerStatus{}, err
	}
	return s.ownerStatus(ctx, p.Owner)
}

func (s *Server) objectsTransfer(ctx context.Context, p rpc.ObjectsTransferParams) (rpc.ObjectsTransferResult, error) {
	l, err := s.objectsLedger()
	if err != nil {
		return rpc.ObjectsTransferResult{}, err
	}
	name, err := custody.StoreName(p.Store)
	if err != nil {
		return rpc.ObjectsTransferResult{}, err
	}
	items := make([]ledger.TransferItem, len(p.Items))
	for i, it := range p.Items {
		items[i] = ledger.TransferItem{Seq: it.Seq, Store: name, Key: it.Key}
	}
	if err := l.Transfer(ctx, hostOwner(p.From), hostOwner(p.To), items); err != nil {
		return rpc.ObjectsTransferResult{}, err
	}
	return rpc.ObjectsTransferResult{Offered: len(items)}, nil
}

func (s *Server) objectsAcknowledge(ctx context.Context, p rpc.ObjectsAcknowledgeParams) (rpc.ObjectsAcknowledgeResult, error) {
	l, err := s.objectsLedger()
	if err != nil {
		return rpc.ObjectsAcknowledgeResult{}, err
	}
	acked, err := l.Acknowledge(ctx, hostOwner(p.From), hostOwner(p.To), p.UpTo)
	if err != nil {
		return rpc.ObjectsAcknowledgeResult{}, err
	}
	res := rpc.ObjectsAcknowledgeResult{AckedUpTo: acked}
	if res.From, err = s.ownerStatus(ctx, p.From); err != nil {
		return res, err
	}
	res.To, err = s.ownerStatus(ctx, p.To)
	return res, err
}

func (s *Server) objectsStatus(ctx context.Context, p rpc.ObjectsStatusParams) (rpc.ObjectsStatusResult, error) {
	l, err := s.objectsLedger()
	if err != nil {
		return rpc.ObjectsStatusResult{}, err
	}
	st := l.Stats()
	unsettled := s.custody.Unsettled()
	res := rpc.ObjectsStatusResult{Ledger: rpc.LedgerFigures{
		Used: st.Used, HighWater: st.HighWater, Capacity: st.Capacity, AdmissionFailures: st.AdmissionFailures,
		PendingDelete: st.PendingDelete, PendingRetry: st.PendingRetry, OldestRetryAgeMs: st.OldestRetryAge.Milliseconds(),
		Prefixes: st.Prefixes, PrefixObjectsDeleted: st.PrefixObjectsDeleted,
		DeleteFailures: st.DeleteFailures, Deleted: st.Deleted, Owners: st.Owners, Unsettled: unsettled,
	}}
	if p.Owner == nil {
		return res, nil
	}
	ost, err := s.ownerStatus(ctx, *p.Owner)
	if err != nil {
		return res, err
	}
	res.Owner = &ost
	if !p.Tickets {
		return res, nil
	}
	tickets, err := l.Tickets(ctx, hostOwner(*p.Owner))
	if err != nil {
		return res, err
	}
	if len(tickets) > rpc.MaxStatusTickets {
		tickets, res.Truncated = tickets[:rpc.MaxStatusTickets], true
	}
	for _, t := range tickets {
		wt := rpc.ObjectTicket{Store: t.Store, Key: t.Key, State: "held"}
		if t.State == ledger.Abandoned {
			wt.State = "abandoned"
		}
		if t.OfferedTo.Kind != 0 {
			to := wireOwner(t.OfferedTo)
			wt.OfferedTo, wt.Seq = &to, t.Seq
		}
		res.Tickets = append(res.Tickets, wt)
	}
	return res, nil
}

// maxSweepKeys bounds the orphan names listed in an objects.sweep answer.
const maxSweepKeys = 1000

// sweepLayout is what the ledger's sweep knows of datasets: the folders their manifests
// reference objects in, and how to read those references.
var sweepLayout = ledger.DatasetLayout{Folders: dataset.Folders(), Referenced: dataset.Referenced}

// objectsSweep deletes a dataset's historical orphans through the ledger's cleanup path. It waits
// for the deletions up to the call's own bound; what is left keeps being deleted and is reported
// as pending.
func (s *Server) objectsSweep(ctx context.Context, p rpc.ObjectsSweepParams) (rpc.ObjectsSweepResult, error) {
	l, err := s.objectsLedger()
	if err != nil {
		return rpc.ObjectsSweepResult{}, err
	}
	store, err := p.Dataset.Store.Parse()
	if err != nil {
		return rpc.ObjectsSweepResult{}, err
	}
	name := store.Name()
	// A sweep lists and deletes with the sidecar's own keys: only on an allowed store.
	if _, err := s.credsFor(store, nil); err != nil {
		return rpc.ObjectsSweepResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rep, err := l.Sweep(ctx, name, p.Dataset.Path, ledger.SweepOptions{
		Layout: sweepLayout, SafetyAge: p.SafetyAge(), DryRun: p.DryRun})
	if err != nil {
		if errors.Is(err, storage.ErrUnavailable) {
			return rpc.ObjectsSweepResult{}, fmt.Errorf("%w: %s", rpc.ErrStorageUnavailable, s.sanitizeCreds(nil, err.Error()))
		}
		return rpc.ObjectsSweepResult{}, err
	}
	res := rpc.ObjectsSweepResult{Listed: rep.Listed, Referenced: rep.Referenced, SkippedYoung: rep.SkippedYoung,
		SkippedOwned: rep.SkippedOwned, Deferred: rep.Deferred, Found: rep.Found, Deleted: rep.Deleted,
		Pending: rep.Pending, Bytes: rep.Bytes, SafetyAgeMs: rep.SafetyAge.Milliseconds(), Orphans: rep.Orphans}
	if len(res.Orphans) > maxSweepKeys {
		res.Orphans, res.Truncated = res.Orphans[:maxSweepKeys], true
	}
	s.log.Info("orphan sweep", "dataset", p.Dataset.Path, "found", res.Found, "deleted", res.Deleted, "pending", res.Pending, "dry_run", p.DryRun)
	return res, nil
}
