package dispatch

import (
	"context"
	"errors"
	"fmt"
)

// A RUNNING record is journaled before its send, so a dispatcher that then does not send (the
// recheck found the job changed or the sidecar gone, the recheck could not read the store, or the
// journaling commit failed in a way that may have landed) leaves a RUNNING record whose
// invocation never left this process. No answer will ever come for it, and while its sidecar
// epoch lives neither sweep may free its slot. But the dispatcher knows what the sweeps cannot:
// the invocation was never written to any sidecar, and no node ever sends an invocation it did
// not journal itself, right then. So no worker can exist for it, now or later: it is journaled
// NOT_COMMITTED with its slot released (sweepUnsent), retried every round until the store takes
// it. The note lives in memory only: a dispatcher that dies first leaves the record to the
// sweeps, and its sidecar (a child of its process) dies with it, which frees the slot.

// unsentNote is a journaled invocation this dispatcher never sent.
type unsentNote struct {
	invocation string
	why        string
}

// noteUnsent records that job id's invocation inv was never sent, and journals it at once if the
// store takes it (else the next round retries).
func (d *Dispatcher) noteUnsent(id, inv, why string) {
	d.mu.Lock()
	d.unsent[id] = unsentNote{invocation: inv, why: why}
	d.mu.Unlock()
	if err := d.journalUnsent(id, unsentNote{invocation: inv, why: why}, nil); err != nil {
		d.log.Warn("cannot journal a send that never left yet; the next round retries", "job", id, "invocation", inv, "error", err)
	}
}

// sweepUnsent journals the invocations this dispatcher journaled and never sent.
func (d *Dispatcher) sweepUnsent(_ context.Context, st *RoundStats) error {
	d.mu.Lock()
	notes := make(map[string]unsentNote, len(d.unsent))
	for id, n := range d.unsent {
		notes[id] = n
	}
	d.mu.Unlock()
	for id, n := range notes {
		if err := d.journalUnsent(id, n, st); err != nil {
			return err
		}
	}
	return nil
}

// journalUnsent settles job id as never sent if its record still names n's invocation: RUNNING
// or UNKNOWN becomes NOT_COMMITTED, and the slot is released. A record without that invocation
// (the journaling commit did not land after all; the job is still PENDING) is left alone. The
// note is dropped once the store has decided either way.
func (d *Dispatcher) journalUnsent(id string, n unsentNote, st *RoundStats) error {
	now := d.cfg.Now()
	var from State
	_, changed, err := d.modify(id, func(x *Job) bool {
		if x.InvocationID != n.invocation || x.hasEvent(EventUnsent) {
			return false
		}
		from = x.State
		switch {
		case x.State == StateRunning || x.State == StateUnknown:
			x.State = StateNotCommitted
		case x.State == StateCommitted:
			// Never sent, yet settled COMMITTED: nothing of ours made that commit. Kept, and said.
			d.log.Error("a job never sent was settled COMMITTED; kept", "job", id, "invocation", n.invocation)
		}
		x.SlotHeld = false
		x.record(now, EventUnsent, from, "invocation "+n.invocation+" never sent: "+n.why)
		return true
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("journal unsent invocation %s of job %s: %w", n.invocation, id, err)
	}
	d.mu.Lock()
	if cur, ok := d.unsent[id]; ok && cur.invocation == n.invocation {
		delete(d.unsent, id)
	}
	if changed {
		delete(d.resolveAt, id)
	}
	d.mu.Unlock()
	if changed {
		if st != nil {
			st.Unsent++
		}
		d.log.Warn("journaled RUNNING but never sent: NOT_COMMITTED, slot released", "job", id, "invocation", n.invocation, "from", from, "why", n.why)
	}
	return nil
}
