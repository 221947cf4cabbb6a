package sidecar

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cba1309c/steward/internal/boltfile"
	"github.com/cba1309c/steward/storage/ledger"
)

// Quarantined is a file QuarantineLedger moved aside.
type Quarantined struct {
	From string // where it was
	To   string // where it is now: From + ".corrupt-<UTC time>"
	Note string // the audit record written next to To
	// Problem is what was wrong with it; "" for the sound file of a slot that moved with its
	// corrupt one.
	Problem string
}

// QuarantineLedger is the explicit, audited way out of a corrupt ledger slot. The sidecar refuses
// to start on a journal that is empty, truncated or damaged, because
// starting empty would silently drop the custody it recorded. For the slot at ledgerPath, or else
// every slot of stateDir ("" = the default state directory) that no live sidecar holds, whose
// journal is corrupt, it moves the journal aside to
// <file>.corrupt-<UTC time> with an audit record <that>.audit.json naming by, reason, at and the
// problem; the next sidecar starts that slot empty. The objects the lost tickets named are
// orphans from then on, for objects.sweep to find. Sound slots and slots in use are left alone;
// when nothing moved, the error wraps boltfile.ErrNotCorrupt.
func QuarantineLedger(stateDir, ledgerPath, by, reason string, at time.Time) ([]Quarantined, error) {
	if by == "" || reason == "" {
		return nil, boltfile.ErrAuditRequired
	}
	if stateDir == "" {
		stateDir = defaultStateDir()
	}
	slots := []string{ledgerPath}
	if ledgerPath == "" {
		slots = slots[:0]
		for n := 0; n < ledgerSlots; n++ {
			slots = append(slots, filepath.Join(stateDir, fmt.Sprintf("ledger-%d.db", n)))
		}
	}
	var out []Quarantined
	var busy []string
	for _, p := range slots {
		moved, err := quarantineSlot(p, boltfile.Audit{By: by, Reason: reason, At: at})
		switch {
		case errors.Is(err, errLocked), errors.Is(err, boltfile.ErrInUse):
			busy = append(busy, p)
		case errors.Is(err, boltfile.ErrNotCorrupt):
		case err != nil:
			return out, err
		}
		out = append(out, moved...)
	}
	if len(out) == 0 {
		where := stateDir
		if ledgerPath != "" {
			where = ledgerPath
		}
		return nil, fmt.Errorf("%w: no corrupt ledger slot in %s (in use by a live sidecar, not checked: %v)", boltfile.ErrNotCorrupt, where, busy)
	}
	return out, nil
}

// quarantineSlot moves the journal at path and its write-ahead log aside, together, if either
// is corrupt (or one is missing that the other needs), holding the slot's lock so that no
// sidecar starts on it meanwhile. (Invocation records are notes inside the journal; a
// legacy "<path>.invocations" file is no longer read, so it never blocks a start.)
func quarantineSlot(path string, a boltfile.Audit) ([]Quarantined, error) {
	if !exists(path) && !exists(ledger.WALPath(path)) {
		return nil, boltfile.ErrNotCorrupt
	}
	lock, err := lockFile(path + ".lock")
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	moved, err := boltfile.QuarantineChecked(a, func(c []string) ([]string, error) {
		j, w, err := ledger.Problems(c[0], c[1])
		return []string{j, w}, err
	}, path, ledger.WALPath(path))
	out := make([]Quarantined, len(moved))
	for i, m := range moved {
		out[i] = Quarantined{From: m.From, To: m.To, Note: m.Note, Problem: m.Problem}
	}
	return out, err
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// corruptLedgerHint is the operator's way out, appended to the error a sidecar refuses to start with.
func (s *Server) corruptLedgerHint() string {
	where := "--state-dir " + s.cfg.StateDir
	if s.cfg.LedgerPath != "" {
		where = "--ledger-path " + s.cfg.LedgerPath
	}
	return "the sidecar will not start on it. If it cannot be restored, move the slot aside (its " +
		"custody is lost; objects.sweep finds the orphans): steward ledger quarantine " + where +
		" --by WHO --reason WHY"
}
