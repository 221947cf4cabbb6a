package ledger

import (
	"context"
	"fmt"
)

// Transfers move tickets between owners with contiguous receipts. The sender offers names
// with sequence numbers (per sender/receiver pair, starting at 1); the receiver acknowledges
// the highest sequence up to which it has everything; the ledger then moves exactly the
// contiguous prefix of offers after the last acknowledgement, stopping at the first gap. An
// offered name stays the sender's (it may still accept or abandon it, which withdraws the
// offer) until its sequence number is acknowledged.
//
// A pair's acknowledged sequence is kept while either owner holds tickets or offers; once
// both are gone it is forgotten and a new exchange starts again at 1.

// TransferItem is one name offered to a receiver.
type TransferItem struct {
	Seq   uint64 // > 0, unique within the (from, to) pair
	Store string
	Key   string
}

type pairState struct {
	from, to uint32 // owner ids
	acked    uint64
	pending  map[uint64]uint32 // seq -> slot
}

type offer struct {
	pair *pairState
	seq  uint64
}

type transfers struct {
	pairs  map[[2]uint32]*pairState
	bySlot map[uint32]offer
}

func newTransfers() transfers {
	return transfers{pairs: map[[2]uint32]*pairState{}, bySlot: map[uint32]offer{}}
}

func (t *transfers) pair(from, to uint32) *pairState {
	p := t.pairs[[2]uint32{from, to}]
	if p == nil {
		p = &pairState{from: from, to: to, pending: map[uint64]uint32{}}
		t.pairs[[2]uint32{from, to}] = p
	}
	return p
}

func (t *transfers) offerOf(id uint32) (offer, bool) {
	o, ok := t.bySlot[id]
	return o, ok
}

// cancel withdraws slot id's offer, if any.
func (t *transfers) cancel(id uint32) {
	if o, ok := t.bySlot[id]; ok {
		delete(o.pair.pending, o.seq)
		delete(t.bySlot, id)
	}
}

// busy reports whether owner oid takes part in a pair with offers outstanding.
func (t *transfers) busy(oid uint32) bool {
	for k, p := range t.pairs {
		if (k[0] == oid || k[1] == oid) && len(p.pending) > 0 {
			return true
		}
	}
	return false
}

// forget drops every pair of oid and returns their keys.
func (t *transfers) forget(oid uint32) [][2]uint32 {
	var out [][2]uint32
	for k := range t.pairs {
		if k[0] == oid || k[1] == oid {
			out = append(out, k)
			delete(t.pairs, k)
		}
	}
	return out
}

// Transfer offers items, all held by from, to the receiver to. It is all or nothing:
// ErrNotOwned when from does not hold a name, ErrSeqConflict when a sequence number is at or
// below the pair's acknowledged sequence or already offered for another name. Offering the
// same name under the same number again succeeds. Durable when it returns nil.
func (l *Ledger) Transfer(ctx context.Context, from, to Owner, items []TransferItem) error {
	if err := checkTransfer(ctx, from, to, items); err != nil {
		return err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	fid, ok := l.own.lookup(from)
	ids := make([]uint32, len(items))
	seen := map[uint64]uint32{}
	for i, it := range items {
		sid, known := l.storeIDs[it.Store]
		var id uint32
		if known {
			id, known = l.idx.lookup(sid, it.Key)
		}
		if !ok || !known || l.idx.slot(id).owner != fid || l.idx.slot(id).state != stHeld {
			l.mu.Unlock()
			return keyErr("transfer", it.Store, it.Key, ErrNotOwned)
		}
		if err := l.checkOffer(fid, to, id, it, seen); err != nil {
			l.mu.Unlock()
			return err
		}
		seen[it.Seq] = id
		ids[i] = id
	}
	p := l.xfer.pair(fid, l.own.intern(to))
	var ops []jop
	for i, it := range items {
		p.pending[it.Seq] = ids[i]
		l.xfer.bySlot[ids[i]] = offer{pair: p, seq: it.Seq}
		if l.j != nil {
			ops = append(ops, l.ticketOp(ids[i]))
		}
	}
	done := l.submit(ops, true)
	l.mu.Unlock()
	if err := await(done); err != nil {
		return fmt.Errorf("transfer %d names from %v to %v: %w", len(items), from, to, err)
	}
	return nil
}

// checkOffer validates one item against the pair's state and the items before it.
func (l *Ledger) checkOffer(fid uint32, to Owner, id uint32, it TransferItem, seen map[uint64]uint32) error {
	if prev, dup := seen[it.Seq]; dup && prev != id {
		return keyErr("transfer", it.Store, it.Key, fmt.Errorf("%w: seq %d used twice", ErrSeqConflict, it.Seq))
	}
	var p *pairState
	if tid, ok := l.own.lookup(to); ok {
		p = l.xfer.pairs[[2]uint32{fid, tid}]
	}
	if o, offered := l.xfer.offerOf(id); offered && (o.pair != p || o.seq != it.Seq) {
		return keyErr("transfer", it.Store, it.Key, fmt.Errorf("%w: already offered as seq %d", ErrSeqConflict, o.seq))
	}
	if p == nil {
		return nil
	}
	if it.Seq <= p.acked {
		return keyErr("transfer", it.Store, it.Key, fmt.Errorf("%w: seq %d already acknowledged (up to %d)", ErrSeqConflict, it.Seq, p.acked))
	}
	if other, taken := p.pending[it.Seq]; taken && other != id {
		return keyErr("transfer", it.Store, it.Key, fmt.Errorf("%w: seq %d offered for another name", ErrSeqConflict, it.Seq))
	}
	return nil
}

// Acknowledge records that to has received every offer from from up to upTo. The ledger moves
// the contiguous run of offers after the last acknowledgement, stopping at the first sequence
// number that was never offered, and returns the new acknowledged sequence: from then holds
// none of the moved names and to holds all of them. An acknowledgement at or below the
// current one changes nothing. Durable when it returns.
func (l *Ledger) Acknowledge(ctx context.Context, from, to Owner, upTo uint64) (uint64, error) {
	if err := checkTransfer(ctx, from, to, nil); err != nil {
		return 0, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	fid, okf := l.own.lookup(from)
	tid, okt := l.own.lookup(to)
	p := l.xfer.pairs[[2]uint32{fid, tid}]
	if !okf || !okt || p == nil {
		l.mu.Unlock()
		return 0, nil
	}
	fr, tr := l.own.rec(fid), l.own.rec(tid)
	var ops []jop
	for s := p.acked + 1; s <= upTo; s++ {
		id, ok := p.pending[s]
		if !ok {
			break
		}
		l.xfer.cancel(id)
		unlink(l.idx, fr, id)
		fr.held--
		l.idx.slot(id).owner = tid
		link(l.idx, tr, id)
		tr.held++
		p.acked = s
		if l.j != nil {
			ops = append(ops, l.ticketOp(id))
		}
	}
	acked := p.acked
	if l.j != nil && len(ops) > 0 {
		ops = append(ops, jop{bucket: bucketTransfers, key: pairKey(from, to), val: encodeSeq(acked)})
	}
	done := l.submit(ops, true)
	l.maybeDrop(fid)
	l.mu.Unlock()
	if err := await(done); err != nil {
		return acked, fmt.Errorf("acknowledge %v -> %v up to %d: %w", from, to, acked, err)
	}
	return acked, nil
}

func checkTransfer(ctx context.Context, from, to Owner, items []TransferItem) error {
	if err := checkArgs(ctx, from, "-", nil, false); err != nil {
		return err
	}
	if err := to.validate(); err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("%w: transfer from %v to itself", ErrInvalid, from)
	}
	for _, it := range items {
		if it.Seq == 0 {
			return keyErr("transfer", it.Store, it.Key, fmt.Errorf("%w: seq 0", ErrInvalid))
		}
		if err := checkArgs(ctx, from, it.Store, []string{it.Key}, false); err != nil {
			return err
		}
	}
	return nil
}
