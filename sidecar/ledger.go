package sidecar

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cba1309c/steward/sidecar/custody"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/cba1309c/steward/storage/ledger"
)

// ledgerSlots bounds the journals sidecars sharing one StateDir may hold at once.
const ledgerSlots = 64

// errLocked: another live process holds the journal.
var errLocked = errors.New("ledger journal in use by another sidecar")

// openLedger opens the journal slot as the sidecar's custody and registers its metrics; custody
// starts recovery in the background. New calls it after isolation removed a dead sidecar's
// workers, so no old worker can still upload while recovery settles its names.
func (s *Server) openLedger() error {
	path, lock, err := s.ledgerSlot()
	if err != nil {
		return fmt.Errorf("sidecar: ledger: %w", err)
	}
	if _, err := os.Stat(path + ".invocations"); err == nil {
		s.log.Warn("a legacy invocation-records file is no longer read: invocation records live in the ledger's journal now; "+
			"invocations recorded only there are settled by index.resolve", "file", path+".invocations")
	}
	c, err := custody.Open(custody.Config{Path: path, Capacity: s.cfg.LedgerCapacity, Quota: s.cfg.LedgerQuota, OpenStore: s.openFencingStore,
		Redact: s.sanitizeCreds, Logger: s.log.Named("ledger")})
	if errors.Is(err, ledger.ErrCorrupt) {
		lock.Close()
		return fmt.Errorf("sidecar: ledger: %w; %s", err, s.corruptLedgerHint())
	}
	if err != nil {
		lock.Close()
		return fmt.Errorf("sidecar: ledger: %w", err)
	}
	s.custody, s.ledgerLock = c, lock
	s.metrics.reg.MustRegister(c.Collector())
	return nil
}

// closeLedger stops custody and closes the ledger; tickets stay in the journal.
func (s *Server) closeLedger() error {
	if s.custody == nil {
		return nil
	}
	return errors.Join(s.custody.Close(), s.ledgerLock.Close())
}

// ledgerSlot picks the journal: LedgerPath if set, else the lowest slot of StateDir no live
// sidecar holds. A killed sidecar's lock dies with it, so its successor adopts its journal.
func (s *Server) ledgerSlot() (string, *os.File, error) {
	if p := s.cfg.LedgerPath; p != "" {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return "", nil, err
		}
		lock, err := lockFile(p + ".lock")
		return p, lock, err
	}
	if err := os.MkdirAll(s.cfg.StateDir, 0o700); err != nil {
		return "", nil, err
	}
	for n := 0; n < ledgerSlots; n++ {
		p := filepath.Join(s.cfg.StateDir, fmt.Sprintf("ledger-%d.db", n))
		lock, err := lockFile(p + ".lock")
		if errors.Is(err, errLocked) {
			continue
		}
		return p, lock, err
	}
	return "", nil, fmt.Errorf("all %d journal slots of %s are held by live sidecars", ledgerSlots, s.cfg.StateDir)
}

// invocationOf is the job as custody sees it.
func invocationOf(j *job) custody.Invocation {
	inv := custody.Invocation{ID: j.p.InvocationID, Store: j.store, Path: j.p.Dataset.Path, Pinned: j.p.PinnedVersion, Creds: j.p.Credentials,
		Launched: j.launched, BuildArea: segmentArea(j)}
	if j.eng != nil {
		inv.Engine = j.eng.name
	}
	return inv
}

// reserve takes custody of keys and prefixes for the job's invocation before its engine writes them.
func (s *Server) reserve(j *job, keys, prefixes []string) error {
	if s.custody == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), custody.ResolveTimeout)
	defer cancel()
	return s.custody.Reserve(ctx, invocationOf(j), keys, prefixes)
}

// refusalOf classifies a refused reservation for the engine's reserved frame.
func refusalOf(err error) string {
	switch {
	case errors.Is(err, custody.ErrForeignName), errors.Is(err, ledger.ErrInvalid):
		return workerproto.RefusalForeign
	case errors.Is(err, custody.ErrNameExists):
		return workerproto.RefusalExists
	case errors.Is(err, custody.ErrQuota):
		return workerproto.RefusalQuota
	case errors.Is(err, ledger.ErrNameOwned):
		return workerproto.RefusalOwned
	case errors.Is(err, ledger.ErrCapacity):
		return workerproto.RefusalCapacity
	}
	return workerproto.RefusalUnavailable
}

// settleCustody settles the job's tickets from its decided outcome, before the answer is sent.
func (s *Server) settleCustody(j *job) {
	if s.custody != nil {
		s.custody.Finish(invocationOf(j), j.outcome)
	}
}

// DefaultStateDir is Config.StateDir's default for this process (steward doctor checks it).
func DefaultStateDir() string { return defaultStateDir() }

// defaultStateDir is Config.StateDir's default.
func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/steward"
	}
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "steward")
	}
	if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "state", "steward")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("steward-%d", os.Geteuid()))
}
