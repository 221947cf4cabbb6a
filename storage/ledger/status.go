package ledger

import (
	"context"
	"sort"
	"time"
)

// Stats is a snapshot for metrics.
type Stats struct {
	Used              int           // tickets held, in transit or awaiting deletion
	HighWater         int           // most tickets ever used at once since Open
	Capacity          int           // Config.Capacity
	AdmissionFailures uint64        // reservations refused with ErrCapacity
	QuotaRefusals     uint64        // reservations refused with ErrQuota (an owner at its quota)
	PendingDelete     int           // abandoned names not yet deleted
	PendingRetry      int           // cleanup tasks whose last attempt failed
	OldestRetryAge    time.Duration // age of the oldest failure streak among them; 0 if none
	DeleteFailures    uint64        // names whose delete attempt failed (each attempt counts)
	Deleted           uint64        // names deleted and released by the cleanup worker
	Owners            int           // owners with tickets or offers
	// Prefixes counts the prefix tickets among Used (each owns every object under it).
	Prefixes int
	// PrefixObjectsDeleted counts the objects deleted under abandoned prefix tickets.
	PrefixObjectsDeleted uint64
}

// Stats returns current counters.
func (l *Ledger) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{
		Used: l.idx.count, HighWater: l.stats.highWater, Capacity: l.cfg.Capacity,
		AdmissionFailures: l.stats.admissionFailures, QuotaRefusals: l.stats.quotaRefusals, DeleteFailures: l.stats.deleteFailures,
		Deleted: l.stats.deleted, Owners: len(l.own.ids), PrefixObjectsDeleted: l.stats.prefixObjectsDeleted,
	}
	for _, n := range l.idx.prefixes {
		s.Prefixes += n
	}
	now := l.cfg.Now()
	count := func(t *task) {
		if t == nil {
			return
		}
		s.PendingDelete += len(t.slots)
		if !t.failedAt.IsZero() {
			s.PendingRetry++
			s.OldestRetryAge = max(s.OldestRetryAge, now.Sub(t.failedAt))
		}
	}
	for _, t := range l.clean.queue {
		count(t)
	}
	for _, t := range l.clean.inflight {
		count(t)
	}
	return s
}

// OwnerStatus counts one owner's tickets.
type OwnerStatus struct {
	Owner     Owner
	Held      int // held names, including those offered to another owner
	Offered   int // held names offered in a transfer not yet acknowledged
	Abandoned int // names handed to the cleanup worker, not yet deleted
}

// Status reports owner's tickets. An owner without tickets has a zero status.
func (l *Ledger) Status(ctx context.Context, owner Owner) (OwnerStatus, error) {
	if err := checkArgs(ctx, owner, "", nil, true); err != nil {
		return OwnerStatus{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := OwnerStatus{Owner: owner}
	if oid, ok := l.own.lookup(owner); ok {
		st = l.statusOf(oid)
	}
	return st, nil
}

func (l *Ledger) statusOf(oid uint32) OwnerStatus {
	r := l.own.rec(oid)
	st := OwnerStatus{Owner: r.owner, Held: int(r.held), Abandoned: int(r.abandoned)}
	for _, p := range l.xfer.pairs {
		if p.from == oid {
			st.Offered += len(p.pending)
		}
	}
	return st
}

// Owners lists every owner with tickets or offers, ordered by kind and id.
func (l *Ledger) Owners(ctx context.Context) ([]OwnerStatus, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	out := make([]OwnerStatus, 0, len(l.own.ids))
	for _, oid := range l.own.ids {
		out = append(out, l.statusOf(oid))
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Owner, out[j].Owner
		return a.Kind < b.Kind || a.Kind == b.Kind && a.ID < b.ID
	})
	return out, nil
}

// TicketState says where a ticket is in its life.
type TicketState uint8

// Ticket states.
const (
	Held      TicketState = TicketState(stHeld)
	Abandoned TicketState = TicketState(stAbandoned)
)

// Ticket describes one ticket.
type Ticket struct {
	Store string
	Key   string
	State TicketState
	// OfferedTo and Seq describe a transfer offer not yet acknowledged (OfferedTo.Kind 0: none).
	OfferedTo Owner
	Seq       uint64
}

// Tickets lists owner's tickets, ordered by store and key.
func (l *Ledger) Tickets(ctx context.Context, owner Owner) ([]Ticket, error) {
	if err := checkArgs(ctx, owner, "", nil, true); err != nil {
		return nil, err
	}
	l.mu.Lock()
	var out []Ticket
	if oid, ok := l.own.lookup(owner); ok {
		for e := l.own.rec(oid).head; e != 0; e = l.idx.slot(e - 1).next {
			s := l.idx.slot(e - 1)
			t := Ticket{Store: l.stores[s.store], Key: string(l.idx.name(s)), State: TicketState(s.state)}
			if o, ok := l.xfer.offerOf(e - 1); ok {
				t.OfferedTo, t.Seq = l.own.rec(o.pair.to).owner, o.seq
			}
			out = append(out, t)
		}
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		return out[i].Store < out[j].Store || out[i].Store == out[j].Store && out[i].Key < out[j].Key
	})
	return out, nil
}
