package sidecar

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/ledger"
	"github.com/hashicorp/go-hclog"
)

// ledgerSlots bounds the journals sidecars sharing one StateDir may hold at once.
const ledgerSlots = 64

// errLocked: another live process holds the journal.
var errLocked = errors.New("ledger journal in use by another sidecar")

// custody is the sidecar's ownership ledger: the custodian of worker uploads and the backend of
// objects.*. Worker invocations own names as ledger.Invocation owners; host transactions as
// ledger.HostTxn owners.
type custody struct {
	s    *Server
	l    *ledger.Ledger
	j    *invJournal
	lock *os.File
	log  hclog.Logger
	// ctx ends at close: every storage call custody makes on its own behalf (recovery passes,
	// self-fences) derives from it, so close never waits on storage.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}  // closed when run returns
	fences sync.WaitGroup // self-fence goroutines started by finish

	mu        sync.Mutex
	specs     map[string]rpc.StoreSpec // store name → connection spec (mirrors the journal)
	recs      map[string]invRecord     // invocations with a durable record
	live      map[string]struct{}      // invocations whose worker may still reserve
	verify    map[string]struct{}      // failed invocations whose slot could not be read yet
	fence     map[string]struct{}      // indeterminate invocations whose self-fence must be retried
	zeroSince map[string]time.Time     // recorded invocations first seen without tickets
	closed    bool                     // close began: no new self-fence starts
	unsettled int                      // invocations left Unknown by the last recovery pass
}

var _ custodian = (*custody)(nil)

// openLedger opens the journal slot, loads the invocation records, registers the metrics and
// starts recovery in the background. New calls it after isolation removed a dead sidecar's
// workers, so no old worker can still upload while recovery settles its names.
func (s *Server) openLedger() error {
	path, lock, err := s.ledgerSlot()
	if err != nil {
		return fmt.Errorf("sidecar: ledger: %w", err)
	}
	c, err := openCustody(s, path, lock)
	if errors.Is(err, ledger.ErrCorrupt) {
		lock.Close()
		return fmt.Errorf("sidecar: ledger: %w; %s", err, s.corruptLedgerHint())
	}
	if err != nil {
		lock.Close()
		return fmt.Errorf("sidecar: ledger: %w", err)
	}
	s.custody, s.ledger = c, c
	s.metrics.reg.MustRegister(newLedgerCollector(c))
	go c.run()
	return nil
}

// closeLedger stops recovery and closes the ledger; tickets stay in the journal.
func (s *Server) closeLedger() error {
	if s.ledger == nil {
		return nil
	}
	return s.ledger.close()
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

func openCustody(s *Server, path string, lock *os.File) (*custody, error) {
	j, err := openInvJournal(path + ".invocations")
	if err != nil {
		return nil, err
	}
	recs, specs, bad, err := j.load()
	if err != nil {
		j.close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &custody{s: s, j: j, lock: lock, log: s.log.Named("ledger"), ctx: ctx, cancel: cancel, done: make(chan struct{}),
		specs: specs, recs: recs, live: map[string]struct{}{}, verify: map[string]struct{}{}, fence: map[string]struct{}{}, zeroSince: map[string]time.Time{}}
	for _, b := range bad {
		c.log.Error("undecodable invocation record skipped; its tickets stay until settled by hand", "record", b)
	}
	c.l, err = ledger.Open(context.Background(), ledger.Config{
		Path: path, Capacity: s.cfg.LedgerCapacity, Stores: c.openStore, Logger: s.log,
	})
	if err != nil {
		cancel()
		j.close()
		return nil, err
	}
	st := c.l.Stats()
	c.log.Info("ledger opened", "path", path, "tickets", st.Used, "owners", st.Owners, "pending_delete", st.PendingDelete,
		"capacity", st.Capacity)
	c.forgetSettled(true)
	return c, nil
}

// close stops the recovery loop and every self-fence (their storage calls are cancelled; what
// they had not settled stays in the journal for the next start), then closes the ledger.
func (c *custody) close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	<-c.done
	c.fences.Wait()
	err := errors.Join(c.l.Close(), c.j.close())
	return errors.Join(err, c.lock.Close())
}

func invOwner(inv string) ledger.Owner { return ledger.Owner{Kind: ledger.Invocation, ID: inv} }

// reserve implements custodian: the invocation's record (and its store's spec) is durable
// before its first ticket, so a restarted sidecar can always settle what it finds.
func (c *custody) reserve(ctx context.Context, j *job, keys []string) error {
	inv := j.p.InvocationID
	name, spec, err := storeName(j.p.Dataset.Store)
	if err != nil {
		return err
	}
	c.mu.Lock()
	_, recorded := c.recs[inv]
	c.live[inv] = struct{}{}
	c.mu.Unlock()
	if !recorded {
		rec := invRecord{Store: spec, Path: j.p.Dataset.Path, Pinned: j.p.PinnedVersion, At: time.Now().UnixMilli()}
		if err := c.remember(name, spec, inv, &rec); err != nil {
			return err
		}
	}
	return c.l.Reserve(ctx, invOwner(inv), name, keys)
}

// learn names a host's store and makes its canonical spec durable before the ledger uses the name.
func (c *custody) learn(spec rpc.StoreSpec) (string, error) {
	name, canon, err := storeName(spec)
	if err != nil {
		return "", err
	}
	return name, c.remember(name, canon, "", nil)
}

// remember makes a store spec (and optionally an invocation record) durable before use.
func (c *custody) remember(name string, spec rpc.StoreSpec, inv string, rec *invRecord) error {
	c.mu.Lock()
	known, ok := c.specs[name]
	full := len(c.specs) >= ledger.MaxStores
	c.mu.Unlock()
	newSpec := &spec
	if ok && known == spec {
		newSpec = nil
	} else if !ok && full {
		return fmt.Errorf("%w: more than %d store names", ledger.ErrInvalid, ledger.MaxStores)
	}
	if rec == nil && newSpec == nil {
		return nil
	}
	if err := c.j.put(inv, rec, name, newSpec); err != nil {
		return fmt.Errorf("%w: record %s: %w", ledger.ErrJournal, inv, err)
	}
	c.mu.Lock()
	c.specs[name] = spec
	if rec != nil {
		c.recs[inv] = *rec
	}
	c.mu.Unlock()
	return nil
}

// finish implements custodian: it settles a finished job's tickets from its answer, before the
// answer is sent. INDETERMINATE keeps them for index.resolve.
func (c *custody) finish(j *job, res rpc.MutateResult) {
	inv := j.p.InvocationID
	defer func() {
		c.mu.Lock()
		delete(c.live, inv)
		c.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	if st, err := c.l.Status(ctx, invOwner(inv)); err != nil || st.Held == 0 {
		return
	}
	var verdict ledger.Verdict
	switch {
	case res.Phase == rpc.PhaseIndeterminate:
		// The answer waits for the domain to be dead and reaped, so the worker can never commit
		// from here on: fence its slot now, as index.resolve would, and settle the tickets on
		// this sidecar whichever sidecar the host later resolves through. Until the fence lands
		// (storage unreachable) the tickets stay, and recovery passes retry it.
		c.log.Info("indeterminate invocation: fencing its slot to settle its tickets", "invocation", inv)
		c.startFence(inv)
		return
	case res.Phase == rpc.PhaseNativeReturn && res.Code == rpc.NativeOK && res.CommittedVersion > 0:
		verdict = ledger.Committed
	case res.Phase == rpc.PhaseNativeReturn:
		// A failed engine call may still have committed (a retried put-if-absent whose first
		// attempt landed reports a conflict): read the slot before deleting anything.
		var err error
		if verdict, err = c.readSlot(ctx, inv, j.p.Credentials); err != nil {
			c.log.Warn("slot unreadable: tickets kept and checked again later", "invocation", inv,
				"error", c.s.sanitize(j, err.Error()))
			c.mu.Lock()
			c.verify[inv] = struct{}{}
			c.mu.Unlock()
			return
		}
		if verdict == ledger.Committed {
			c.log.Warn("engine reported failure but the slot holds its commit: objects kept", "invocation", inv, "code", res.Code)
		}
	default:
		verdict = ledger.NotCommitted
	}
	c.apply(ctx, inv, verdict)
}

// startFence runs selfFence in the background, owned by custody (close waits for it); once close
// has begun it only queues the invocation for the next start's recovery.
func (c *custody) startFence(inv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		c.fence[inv] = struct{}{}
		return
	}
	c.fences.Add(1)
	go func() {
		defer c.fences.Done()
		c.selfFence(c.ctx, inv)
	}()
}

// selfFence settles an indeterminate invocation by fencing its slot; a failure queues it for the
// next recovery pass.
func (c *custody) selfFence(ctx context.Context, inv string) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	v, err := c.settleRecovered(ctx, invOwner(inv))
	if err != nil {
		c.log.Warn("self-fence failed: tickets kept, retried by recovery", "invocation", inv, "error", err)
		c.mu.Lock()
		c.fence[inv] = struct{}{}
		c.mu.Unlock()
		return
	}
	c.apply(ctx, inv, v)
	c.mu.Lock()
	delete(c.fence, inv)
	c.mu.Unlock()
}

// settle implements custodian: index.resolve decided an invocation.
func (c *custody) settle(ctx context.Context, inv, outcome string) {
	switch outcome {
	case rpc.OutcomeCommitted:
		c.apply(ctx, inv, ledger.Committed)
	case rpc.OutcomeNotCommitted:
		c.apply(ctx, inv, ledger.NotCommitted)
	}
}

// apply accepts or abandons every name of the invocation.
func (c *custody) apply(ctx context.Context, inv string, v ledger.Verdict) {
	var err error
	switch v {
	case ledger.Committed:
		err = c.l.Accept(ctx, invOwner(inv), "", nil)
	case ledger.NotCommitted:
		err = c.l.Abandon(ctx, invOwner(inv), "", nil)
	default:
		return
	}
	if err != nil {
		c.log.Error("settling tickets failed; recovery will settle them after a restart", "invocation", inv, "error", err)
		return
	}
	c.mu.Lock()
	delete(c.verify, inv)
	c.mu.Unlock()
}

// readSlot reads slot pinned+1 without writing: Committed when it holds the invocation's
// commit, NotCommitted when it is empty or holds anything else.
func (c *custody) readSlot(ctx context.Context, inv string, creds *rpc.Credentials) (ledger.Verdict, error) {
	c.mu.Lock()
	rec, ok := c.recs[inv]
	c.mu.Unlock()
	if !ok {
		return ledger.Unknown, fmt.Errorf("no record of invocation %s", inv)
	}
	st, err := c.s.openStore(ctx, rec.Store, creds)
	if err != nil {
		return ledger.Unknown, err
	}
	d, err := dataset.Open(ctx, st, rec.Path, rec.Pinned+1)
	switch {
	case errors.Is(err, dataset.ErrVersionNotFound):
		return ledger.NotCommitted, nil
	case err != nil:
		return ledger.Unknown, err
	}
	if m := d.Manifest(); !m.IsFence() && m.Transaction.InvocationID == inv {
		return ledger.Committed, nil
	}
	return ledger.NotCommitted, nil
}

// openStore is the ledger's store resolver: the spec learned from a job or a host (persisted
// with the invocation records), else the name parsed back, always with the sidecar's own
// credentials.
func (c *custody) openStore(name string) (storage.Store, error) {
	c.mu.Lock()
	spec, ok := c.specs[name]
	c.mu.Unlock()
	if !ok {
		var err error
		if spec, err = parseStoreName(name); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, resolveTimeout)
	defer cancel()
	return c.s.openStore(ctx, spec, nil)
}

// parseStoreName inverts storeName (and reads the names older sidecars wrote).
func parseStoreName(name string) (rpc.StoreSpec, error) {
	p, err := rpc.ParseStoreName(name)
	if err != nil {
		return rpc.StoreSpec{}, fmt.Errorf("%w: store name %q: %w", ledger.ErrInvalid, name, err)
	}
	return p.Spec(), nil
}

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
