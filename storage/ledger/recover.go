package ledger

import (
	"context"
	"fmt"
)

// Verdict is the settled outcome of an invocation.
type Verdict uint8

// Verdicts.
const (
	// Unknown: the outcome cannot be decided yet; the tickets stay and a later Recover asks again.
	Unknown Verdict = iota
	// Committed: the invocation published its objects; its tickets are accepted.
	Committed
	// NotCommitted: it never will; its objects are abandoned to the cleanup worker.
	NotCommitted
)

// SettleFunc decides an invocation's outcome, e.g. through dataset.ResolveSlot. note is the
// owner's note (ReserveNoted), nil if it has none.
type SettleFunc func(ctx context.Context, owner Owner, note []byte) (Verdict, error)

// RecoverReport counts the owners one Recover call handled.
type RecoverReport struct {
	Accepted  int // invocations settled Committed
	Abandoned int // invocations settled NotCommitted
	Unknown   int // invocations still undecided (Unknown or an error from settle)
	HostTxns  int // host transactions left for their host to accept or abandon
	Released  int // interrupted sweeps whose claims were released
}

// load rebuilds the in-memory index from the journal and queues abandoned names for deletion.
func (l *Ledger) load() error {
	type pending struct {
		id  uint32
		to  Owner
		seq uint64
	}
	type pairRec struct {
		from, to Owner
		acked    uint64
	}
	var offers []pending
	var pairs []pairRec
	notes := map[Owner][]byte{}
	abandoned := map[uint16][]uint32{}
	err := l.j.load(func(store, key string, r record) error {
		if err := checkArgs(context.Background(), r.owner, store, []string{key}, false); err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		sid := l.storeID(store)
		oid := l.own.intern(r.owner)
		id, ok := l.idx.insert(sid, key, oid, r.state)
		if !ok {
			return fmt.Errorf("%w: name arena exhausted while loading", ErrCapacity)
		}
		rec := l.own.rec(oid)
		link(l.idx, rec, id)
		if r.state == stAbandoned {
			rec.abandoned++
			abandoned[sid] = append(abandoned[sid], id)
		} else {
			rec.held++
			l.loaded[r.owner] = struct{}{}
		}
		if r.to.Kind != 0 {
			offers = append(offers, pending{id: id, to: r.to, seq: r.seq})
		}
		return nil
	}, func(from, to Owner, acked uint64) error {
		pairs = append(pairs, pairRec{from: from, to: to, acked: acked})
		return nil
	}, func(o Owner, note []byte) error {
		notes[o] = note
		return nil
	})
	if err != nil {
		return fmt.Errorf("load journal: %w", err)
	}
	for _, o := range offers {
		p := l.xfer.pair(l.idx.slot(o.id).owner, l.own.intern(o.to))
		p.pending[o.seq] = o.id
		l.xfer.bySlot[o.id] = offer{pair: p, seq: o.seq}
	}
	for _, pr := range pairs {
		fid, okf := l.own.lookup(pr.from)
		tid, okt := l.own.lookup(pr.to)
		if okf && okt {
			l.xfer.pair(fid, tid).acked = pr.acked
		} else {
			l.j.submit([]jop{{bucket: bucketTransfers, key: pairKey(pr.from, pr.to)}}, false)
		}
	}
	for o, note := range notes {
		if oid, ok := l.own.lookup(o); ok {
			l.own.rec(oid).note = note
		} else {
			// Its last ticket was released just before a crash: the note goes too.
			l.j.submit([]jop{{bucket: bucketNotes, key: appendOwner(nil, o)}}, false)
		}
	}
	for sid, ids := range abandoned {
		l.enqueue(sid, ids)
	}
	l.stats.highWater = l.idx.count
	return nil
}

// Recover settles the owners found in the journal when the ledger was opened. Invocations go
// through settle: Committed → accept, NotCommitted → abandon, Unknown or an error → kept for
// a later Recover. Host transactions are left for their host. Claims of an interrupted sweep
// are released (the next sweep finds those objects again). Call it after Open, before taking
// new work, and again later for what stayed Unknown.
func (l *Ledger) Recover(ctx context.Context, settle SettleFunc) (RecoverReport, error) {
	var rep RecoverReport
	l.mu.Lock()
	owners := make([]Owner, 0, len(l.loaded))
	for o := range l.loaded {
		owners = append(owners, o)
	}
	l.mu.Unlock()
	for _, o := range owners {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("recover: %w", err)
		}
		var err error
		switch o.Kind {
		case HostTxn:
			rep.HostTxns++
			continue
		case Sweeper:
			rep.Released++
			err = l.Accept(ctx, o, "", nil)
		case Invocation:
			err = l.settleOne(ctx, o, settle, &rep)
		}
		if err != nil {
			return rep, fmt.Errorf("recover %v: %w", o, err)
		}
	}
	return rep, nil
}

func (l *Ledger) settleOne(ctx context.Context, o Owner, settle SettleFunc, rep *RecoverReport) error {
	note, _ := l.Note(o)
	v, err := settle(ctx, o, note)
	if err != nil {
		l.log.Warn("invocation outcome still unknown", "invocation", o.ID, "error", err)
		v = Unknown
	}
	switch v {
	case Committed:
		rep.Accepted++
		err = l.Accept(ctx, o, "", nil)
	case NotCommitted:
		rep.Abandoned++
		err = l.Abandon(ctx, o, "", nil)
	default:
		rep.Unknown++
		return nil
	}
	if err == nil {
		l.mu.Lock()
		delete(l.loaded, o)
		l.mu.Unlock()
	}
	return err
}
