package custody

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/ledger"
	"github.com/cba1309c/steward/storage/slot"
	"github.com/hashicorp/go-hclog"
)

// ResolveTimeout bounds one fencing or slot-reading attempt.
const ResolveTimeout = 15 * time.Second

// Config configures a Custody. Path and OpenStore are required.
type Config struct {
	// Path is the ledger's journal file (a bbolt file; storage/ledger).
	Path string
	// Capacity bounds the tickets held at once. Default: ledger.DefaultCapacity.
	Capacity int
	// Quota bounds the tickets one invocation may hold at once, so that one engine cannot take
	// the capacity the others need (Reserve refuses past it with ErrQuota). Default: no bound
	// besides Capacity.
	Quota int
	// OpenStore opens a store with per-call credentials, or the sidecar's own when creds is nil.
	OpenStore func(ctx context.Context, store rpc.ParsedStore, creds *rpc.Credentials) (storage.Store, error)
	// Redact removes the given per-call credentials and the sidecar's own keys from a message.
	// Default: none removed (only for tests without credentials).
	Redact func(creds *rpc.Credentials, msg string) string
	// Logger receives recovery and settlement decisions (never credentials). Default: null.
	Logger hclog.Logger
	// RecoverInterval paces the retries of what could not be settled yet. Default: 30s.
	RecoverInterval time.Duration
}

// Invocation is one index mutation as custody sees it.
type Invocation struct {
	ID     string
	Store  rpc.ParsedStore // the dataset's store
	Path   string          // the dataset's path in it
	Pinned int64
	Creds  *rpc.Credentials // per-call credentials, nil for the sidecar's own; never stored
	// Engine is the registered engine that runs it ("" or "builtin": the built-in engine, whose
	// slot custody reads itself); recorded, so that recovery settles it through the same engine.
	Engine string
	// Launched is when its domain was started: objects under a prefix it reserves must be younger.
	Launched time.Time
	// BuildArea, when set, is one more dataset-relative folder (ending in "/") the invocation may
	// reserve in: its segment build's own area (rpc/segments.go).
	BuildArea string
}

// Custody is the sidecar's custodian. Safe for concurrent use.
type Custody struct {
	cfg Config
	l   *ledger.Ledger
	log hclog.Logger
	// ctx ends at Close: every storage call custody makes on its own behalf (recovery passes,
	// self-fences) derives from it, so Close never waits on storage.
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}  // closed when run returns
	fences sync.WaitGroup // self-fences started by Finish

	mu        sync.Mutex
	fence     map[string]struct{} // indeterminate invocations whose self-fence must be retried
	unsettled int                 // invocations left Unknown by the last recovery pass
	closed    bool                // Close began: no new self-fence starts

	existsRefusals atomic.Uint64 // keys refused because they already existed (ErrNameExists)
}

// Open opens the ledger's journal and starts the recovery loop, which at once settles the
// invocations a previous sidecar left (call it only once no worker of that sidecar can still
// upload: isolation removes a dead sidecar's domains first). A damaged journal is a
// *ledger.CorruptError naming the file.
func Open(cfg Config) (*Custody, error) {
	if cfg.Path == "" || cfg.OpenStore == nil {
		return nil, fmt.Errorf("%w: custody needs a journal path and a store opener", ledger.ErrInvalid)
	}
	if cfg.Redact == nil {
		cfg.Redact = func(_ *rpc.Credentials, msg string) string { return msg }
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.RecoverInterval <= 0 {
		cfg.RecoverInterval = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Custody{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		fence: map[string]struct{}{}}
	var err error
	c.l, err = ledger.Open(ctx, ledger.Config{Path: cfg.Path, Capacity: cfg.Capacity, Stores: c.openNamed, Logger: cfg.Logger})
	if err != nil {
		cancel()
		return nil, err
	}
	st := c.l.Stats()
	c.log.Info("ledger opened", "path", cfg.Path, "tickets", st.Used, "owners", st.Owners, "pending_delete", st.PendingDelete,
		"capacity", st.Capacity)
	go c.run()
	return c, nil
}

// Close stops the recovery loop and every self-fence (their storage calls are cancelled; what
// they had not settled stays in the journal for the next start), then closes the ledger.
func (c *Custody) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	<-c.done
	c.fences.Wait()
	return c.l.Close()
}

// Ledger is the ownership ledger itself, for the host's objects.* calls.
func (c *Custody) Ledger() *ledger.Ledger { return c.l }

// Unsettled is the number of invocations the last recovery pass could not decide.
func (c *Custody) Unsettled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unsettled
}

// Owner is the ledger owner of an invocation.
func Owner(inv string) ledger.Owner { return ledger.Owner{Kind: ledger.Invocation, ID: inv} }

// StoreName is the ledger's name for a store: rpc's one canonical name, so every spelling of a
// store keys the same tickets (and a sweep sees them all). It never holds a credential. A
// failure wraps rpc.ErrInvalidStore.
func StoreName(spec rpc.StoreSpec) (string, error) {
	p, err := spec.Parse()
	if err != nil {
		return "", err
	}
	return p.Name(), nil
}

// Reserve takes custody of keys and prefixes (each ending in "/": a prefix ticket owns every
// object under it) of the invocation's store before its engine writes them. Only new names under
// the invocation's own dataset's data and index folders are reservable: ErrForeignName for a name
// outside them, ErrNameExists for a key already in the store (checked in storage before anything
// is journaled), ErrQuota past the invocation's quota; a refused call reserves nothing and
// leaves what the invocation already holds as it was. The invocation's record (store, dataset,
// pinned version, engine) is the owner's note, durable in the same commit as its first ticket,
// so a restarted sidecar can always settle what it finds.
func (c *Custody) Reserve(ctx context.Context, inv Invocation, keys, prefixes []string) error {
	if err := checkNames(inv.Path, inv.BuildArea, keys, prefixes); err != nil {
		return err
	}
	if len(prefixes) > 0 {
		if err := c.checkNewPrefixes(ctx, inv, prefixes); err != nil {
			return err
		}
	}
	if err := c.checkAbsent(ctx, inv, keys); err != nil {
		return err
	}
	note, err := record{Store: inv.Store.Spec(), Path: inv.Path, Pinned: inv.Pinned, Engine: inv.Engine, At: time.Now().UnixMilli()}.encode()
	if err != nil {
		return err
	}
	err = c.l.ReserveWithin(ctx, Owner(inv.ID), c.cfg.Quota, note, inv.Store.Name(), append(slices.Clip(keys), prefixes...))
	if errors.Is(err, ledger.ErrQuota) {
		return fmt.Errorf("%w (quota %d tickets per invocation): %w", ErrQuota, c.cfg.Quota, err)
	}
	return err
}

// Release gives up custody of keys the invocation reserved and then found taken when it wrote
// them (its create-only upload lost to another writer): they are someone else's objects, never to
// be deleted with the invocation's. Keys it holds no ticket for are skipped.
func (c *Custody) Release(ctx context.Context, inv Invocation, keys []string) error {
	return c.l.Accept(ctx, Owner(inv.ID), inv.Store.Name(), keys)
}

// Finish settles a finished invocation's tickets, before its answer is sent, from what the
// sidecar decided (its gateway's record and storage): a commit accepts them, a certain failure
// abandons them, and an unknown outcome is decided again in the background (Decide, the domain
// being gone), and by recovery passes until storage answers.
func (c *Custody) Finish(inv Invocation, o slot.Outcome) {
	ctx, cancel := context.WithTimeout(c.ctx, ResolveTimeout)
	defer cancel()
	if st, err := c.l.Status(ctx, Owner(inv.ID)); err != nil || st.Held == 0 {
		return
	}
	if o == slot.Unknown {
		c.log.Info("outcome not known yet: deciding it from storage in the background", "invocation", inv.ID)
		c.startFence(inv.ID)
		return
	}
	c.apply(ctx, inv.ID, verdictOf(o))
}

// Settle applies an index.resolve outcome (rpc.OutcomeCommitted or rpc.OutcomeNotCommitted;
// anything else keeps the tickets).
func (c *Custody) Settle(ctx context.Context, inv, outcome string) {
	switch outcome {
	case rpc.OutcomeCommitted:
		c.apply(ctx, inv, ledger.Committed)
	case rpc.OutcomeNotCommitted:
		c.apply(ctx, inv, ledger.NotCommitted)
	}
}

// apply accepts or abandons every name of the invocation.
func (c *Custody) apply(ctx context.Context, inv string, v ledger.Verdict) {
	var err error
	switch v {
	case ledger.Committed:
		err = c.l.Accept(ctx, Owner(inv), "", nil)
	case ledger.NotCommitted:
		err = c.l.Abandon(ctx, Owner(inv), "", nil)
	default:
		return
	}
	if err != nil {
		c.log.Error("settling tickets failed; recovery will settle them after a restart", "invocation", inv, "error", err)
		return
	}
}

// record returns the invocation's note.
func (c *Custody) record(inv string) (record, error) {
	note, ok := c.l.Note(Owner(inv))
	if !ok {
		return record{}, fmt.Errorf("no record of invocation %s: its tickets need a host to settle them (index.resolve)", inv)
	}
	return decodeRecord(note)
}

// openNamed is the ledger's store resolver: the canonical name parsed back, always with the
// sidecar's own credentials.
func (c *Custody) openNamed(name string) (storage.Store, error) {
	p, err := rpc.ParseStoreName(name)
	if err != nil {
		return nil, fmt.Errorf("%w: store name %q: %w", ledger.ErrInvalid, name, err)
	}
	ctx, cancel := context.WithTimeout(c.ctx, ResolveTimeout)
	defer cancel()
	return c.cfg.OpenStore(ctx, p, nil)
}
