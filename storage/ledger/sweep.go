package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cba1309c/steward/storage"
)

// Sweep safety ages.
const (
	// DefaultSafetyAge is SweepOptions.SafetyAge when unset.
	DefaultSafetyAge = time.Hour
	// MinSafetyAge is the floor: a smaller SafetyAge is raised to it. An upload in flight
	// whose writer has not reserved it yet (a writer outside the ledger) is younger than this.
	MinSafetyAge = 10 * time.Minute
	// MaxSafetyAge, the longest Duration (about 292 years), means "never": no object is old
	// enough. Callers converting a longer age from other units saturate to it.
	MaxSafetyAge = time.Duration(math.MaxInt64)
)

// DatasetLayout tells Sweep what a dataset is. The ledger knows object keys and tickets, not
// dataset formats; the caller supplies these facts (the sidecar takes them from storage/dataset).
// Both fields are required.
type DatasetLayout struct {
	// Folders are the key prefixes, relative to the dataset, each ending in "/" and none inside
	// another, that hold the objects manifests reference (data and index files). Only objects
	// under them are listed and may be swept: nothing else under the dataset's prefix is touched.
	Folders []string
	// Referenced returns the keys, relative to st, that some manifest version of the dataset at
	// prefix references. It must fail when prefix holds no readable manifest chain (no manifest,
	// or one that cannot be read or decoded): Sweep then refuses the prefix with ErrNotDataset.
	Referenced func(ctx context.Context, st storage.Store, prefix string) (map[string]bool, error)
}

func (lay DatasetLayout) check() error {
	if lay.Referenced == nil || len(lay.Folders) == 0 {
		return fmt.Errorf("%w: a sweep needs the dataset's folders and a reader of its references", ErrInvalid)
	}
	for i, f := range lay.Folders {
		dir, ok := strings.CutSuffix(f, "/")
		if !ok || !storage.ValidKey(dir) {
			return fmt.Errorf("%w: sweep folder %q is not a relative folder ending in /", ErrInvalid, f)
		}
		for _, g := range lay.Folders[:i] {
			if strings.HasPrefix(f, g) || strings.HasPrefix(g, f) {
				return fmt.Errorf("%w: sweep folders %q and %q overlap", ErrInvalid, g, f)
			}
		}
	}
	return nil
}

// SweepOptions tunes Sweep.
type SweepOptions struct {
	// Layout describes the dataset. Required.
	Layout DatasetLayout
	// SafetyAge: only objects last modified at least this long ago may be orphans.
	// Default: DefaultSafetyAge (1h); values below MinSafetyAge (10m) are raised to it;
	// MaxSafetyAge sweeps nothing.
	SafetyAge time.Duration
	// DryRun reports orphans without claiming or deleting them.
	DryRun bool
	// Now is the instant ages are measured from. Default: Config.Now(). Tests set a time in
	// the future to age real objects; the floor applies all the same.
	Now time.Time
}

// safetyAge applies the default and the floor.
func safetyAge(d time.Duration) time.Duration {
	if d == 0 {
		return DefaultSafetyAge
	}
	return max(d, MinSafetyAge)
}

// SweepReport says what a sweep found and did. Every listed object is counted in exactly one of
// Referenced, SkippedYoung, SkippedOwned, Deferred and Found.
type SweepReport struct {
	Listed       int      // objects under the dataset's data and index folders
	Referenced   int      // of those, objects some manifest version references
	SkippedYoung int      // unreferenced objects younger than the safety age
	SkippedOwned int      // unreferenced objects some ticket owns (an upload in custody)
	Deferred     int      // orphans not claimed because the ledger was at capacity
	Found        int      // orphans: unreferenced, unowned and old enough
	Deleted      int      // orphans deleted (confirmed) before Sweep returned
	Pending      int      // orphans still with the cleanup worker when Sweep returned
	Bytes        int64    // size of the orphans found
	Orphans      []string // their keys
	SafetyAge    time.Duration
}

var sweepSeq atomic.Uint64

// Sweep deletes the historical orphans of the dataset at datasetPrefix in store: objects under
// the dataset's data and index folders (opts.Layout) that no manifest version references, that
// no ticket owns, and that are older than the safety age.
//
// It first reads the whole manifest chain: a prefix without a readable one is refused with
// ErrNotDataset before anything is listed outside it, claimed or deleted. It then lists only the
// layout's folders, claims the unreferenced, old-enough candidates under a Sweeper owner and
// reads the chain again, so that a writer that published meanwhile is seen either by its ticket
// or by its manifest. The orphans are abandoned to the cleanup worker, and Sweep waits (until
// ctx ends) for them to be deleted. A manifest that cannot be read at any point aborts the
// sweep with nothing deleted.
func (l *Ledger) Sweep(ctx context.Context, store, datasetPrefix string, opts SweepOptions) (SweepReport, error) {
	rep := SweepReport{SafetyAge: safetyAge(opts.SafetyAge)}
	if opts.Now.IsZero() {
		opts.Now = l.cfg.Now()
	}
	if err := checkArgs(ctx, Owner{Kind: Sweeper, ID: "x"}, store, nil, false); err != nil {
		return rep, err
	}
	if err := opts.Layout.check(); err != nil {
		return rep, err
	}
	st, err := l.resolveStore(store)
	if err != nil {
		return rep, err
	}
	prefix := strings.Trim(datasetPrefix, "/")
	refs, err := datasetRefs(ctx, st, store, prefix, opts.Layout)
	if err != nil {
		return rep, err
	}
	base := prefix + "/"
	if prefix == "" {
		base = ""
	}
	sizes, err := sweepCandidates(ctx, st, base, opts, refs, &rep)
	if err != nil {
		return rep, err
	}
	owner := Owner{Kind: Sweeper, ID: fmt.Sprintf("sweep-%d-%d", time.Now().UnixNano(), sweepSeq.Add(1))}
	cands, err := l.claim(ctx, owner, store, sizes, opts.DryRun, &rep)
	if err != nil {
		return rep, err
	}
	if !opts.DryRun && len(cands) > 0 {
		if refs, err = datasetRefs(ctx, st, store, prefix, opts.Layout); err != nil {
			return rep, joinRelease(err, l.Accept(context.WithoutCancel(ctx), owner, store, nil))
		}
	}
	var keep []string
	for _, k := range cands {
		if refs[k] {
			keep = append(keep, k)
			continue
		}
		rep.Found++
		rep.Bytes += sizes[k]
		rep.Orphans = append(rep.Orphans, k)
	}
	rep.Referenced += len(keep)
	if opts.DryRun {
		return rep, nil
	}
	// Both calls name their keys: a nil list would mean "all of the owner's".
	if len(keep) > 0 {
		if err := l.Accept(ctx, owner, store, keep); err != nil {
			return rep, err
		}
	}
	if len(rep.Orphans) > 0 {
		if err := l.Abandon(ctx, owner, store, rep.Orphans); err != nil {
			return rep, err
		}
	}
	return rep, l.awaitOwner(ctx, owner, &rep)
}

// datasetRefs reads the dataset's references through the layout. Any failure but an
// unreachable store (or the caller giving up) means the prefix is no dataset to sweep.
func datasetRefs(ctx context.Context, st storage.Store, store, prefix string, lay DatasetLayout) (map[string]bool, error) {
	refs, err := lay.Referenced(ctx, st, prefix)
	switch {
	case err == nil:
		return refs, nil
	case errors.Is(err, storage.ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("sweep %s:%q: read manifests: %w", store, prefix, err)
	}
	return nil, fmt.Errorf("%w: %s:%q has no readable manifest chain: %w", ErrNotDataset, store, prefix, err)
}

// sweepCandidates lists the layout's folders under base and returns the unreferenced,
// old-enough objects with their sizes.
func sweepCandidates(ctx context.Context, st storage.Store, base string, opts SweepOptions, refs map[string]bool, rep *SweepReport) (map[string]int64, error) {
	sizes := map[string]int64{}
	for _, folder := range opts.Layout.Folders {
		dir := base + folder
		for info, err := range st.List(ctx, dir) {
			if err != nil {
				return nil, fmt.Errorf("sweep: list %q: %w", dir, err)
			}
			if !strings.HasPrefix(info.Key, dir) {
				continue // a store that answers outside the folder is not trusted with a delete
			}
			rep.Listed++
			switch {
			case refs[info.Key]:
				rep.Referenced++
			case rep.SafetyAge == MaxSafetyAge || opts.Now.Sub(info.ModTime) < rep.SafetyAge:
				rep.SkippedYoung++
			default:
				sizes[info.Key] = info.Size
			}
		}
	}
	return sizes, nil
}

// claim takes a Sweeper ticket for every candidate nobody owns (only counts them on a dry
// run) and returns the claimed keys.
func (l *Ledger) claim(ctx context.Context, owner Owner, store string, sizes map[string]int64, dry bool, rep *SweepReport) ([]string, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	sid := l.storeID(store)
	var out []string
	var ops []jop
	var oid uint32
	for k := range sizes {
		_, owned := l.idx.lookup(sid, k)
		if _, under := l.heldAbove(sid, k); owned || under {
			rep.SkippedOwned++
			continue
		}
		if dry {
			out = append(out, k)
			continue
		}
		if l.idx.count >= l.cfg.Capacity {
			rep.Deferred++
			continue
		}
		if len(out) == 0 {
			oid = l.own.intern(owner)
		}
		id, ok := l.hold(sid, k, oid)
		if !ok {
			rep.Deferred++
			continue
		}
		out = append(out, k)
		if l.j != nil {
			ops = append(ops, l.ticketOp(id))
		}
	}
	done := l.submit(ops, len(ops) > 0)
	l.mu.Unlock()
	if err := await(done); err != nil {
		return nil, joinRelease(fmt.Errorf("sweep: claim: %w", err), l.Accept(context.WithoutCancel(ctx), owner, store, nil))
	}
	return out, nil
}

// awaitOwner waits until owner's abandoned names are deleted or ctx ends.
func (l *Ledger) awaitOwner(ctx context.Context, owner Owner, rep *SweepReport) error {
	for {
		l.mu.Lock()
		left := 0
		if oid, ok := l.own.lookup(owner); ok {
			left = int(l.own.rec(oid).abandoned)
		}
		ch := l.changed
		l.mu.Unlock()
		rep.Pending, rep.Deleted = left, rep.Found-left
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sweep: %d orphans still queued for deletion: %w", left, ctx.Err())
		case <-ch:
		}
	}
}

func joinRelease(err, releaseErr error) error {
	if releaseErr != nil {
		return fmt.Errorf("%w (releasing the sweep's claims also failed: %w)", err, releaseErr)
	}
	return err
}
