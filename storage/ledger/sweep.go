package ledger

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
)

// Sweep safety ages.
const (
	// DefaultSafetyAge is SweepOptions.SafetyAge when unset.
	DefaultSafetyAge = time.Hour
	// MinSafetyAge is the floor: a smaller SafetyAge is raised to it. An upload in flight
	// whose writer has not reserved it yet (a writer outside the ledger) is younger than this.
	MinSafetyAge = 10 * time.Minute
)

// SweepOptions tunes Sweep. The zero value is ready to use.
type SweepOptions struct {
	// SafetyAge: only objects last modified at least this long ago may be orphans.
	// Default: DefaultSafetyAge (1h); values below MinSafetyAge (10m) are raised to it.
	SafetyAge time.Duration
	// DryRun reports orphans without claiming or deleting them.
	DryRun bool
	// Now is the instant ages are measured from. Default: Config.Now(). Tests set a time in
	// the future to age real objects; the floor applies all the same.
	Now time.Time
}

// SweepReport says what a sweep found and did.
type SweepReport struct {
	Listed       int      // objects under the prefix
	Referenced   int      // of those, manifests and the files some manifest references
	SkippedYoung int      // unreferenced candidates younger than the safety age
	SkippedOwned int      // candidates some ticket owns (an upload in custody)
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
// the prefix that no manifest version references (every _versions/ object, fences included,
// counts as referenced, and every manifest is read), that no ticket owns, and that are older
// than the safety age. It claims them under a Sweeper owner before reading the manifests, so a
// writer that publishes meanwhile is seen either by its ticket or by its manifest, then
// abandons the unreferenced ones to the cleanup worker and waits (until ctx ends) for them to
// be deleted. A manifest that cannot be read aborts the sweep with nothing deleted.
func (l *Ledger) Sweep(ctx context.Context, store, datasetPrefix string, opts SweepOptions) (SweepReport, error) {
	rep := SweepReport{SafetyAge: max(opts.SafetyAge, MinSafetyAge)}
	if opts.SafetyAge == 0 {
		rep.SafetyAge = DefaultSafetyAge
	}
	if opts.Now.IsZero() {
		opts.Now = l.cfg.Now()
	}
	if err := checkArgs(ctx, Owner{Kind: Sweeper, ID: "x"}, store, nil, false); err != nil {
		return rep, err
	}
	st, err := l.resolveStore(store)
	if err != nil {
		return rep, err
	}
	prefix := strings.Trim(datasetPrefix, "/")
	base := prefix + "/"
	if prefix == "" {
		base = ""
	}
	sizes, err := l.sweepCandidates(ctx, st, base, opts.Now, &rep)
	if err != nil {
		return rep, err
	}
	owner := Owner{Kind: Sweeper, ID: fmt.Sprintf("sweep-%d-%d", time.Now().UnixNano(), sweepSeq.Add(1))}
	cands, err := l.claim(ctx, owner, store, sizes, opts.DryRun, &rep)
	if err != nil {
		return rep, err
	}
	refs, err := referenced(ctx, st, base)
	if err != nil {
		if !opts.DryRun {
			err = joinRelease(err, l.Accept(context.WithoutCancel(ctx), owner, store, nil))
		}
		return rep, fmt.Errorf("sweep %s:%s: read manifests: %w", store, base, err)
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

// sweepCandidates lists base and returns the unreferenced-looking, old-enough objects with
// their sizes; manifests count as referenced.
func (l *Ledger) sweepCandidates(ctx context.Context, st storage.Store, base string, now time.Time, rep *SweepReport) (map[string]int64, error) {
	sizes := map[string]int64{}
	for info, err := range st.List(ctx, base) {
		if err != nil {
			return nil, fmt.Errorf("sweep: list %q: %w", base, err)
		}
		rep.Listed++
		switch {
		case strings.HasPrefix(info.Key, base+"_versions/"):
			rep.Referenced++
		case now.Sub(info.ModTime) < rep.SafetyAge:
			rep.SkippedYoung++
		default:
			sizes[info.Key] = info.Size
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
		if _, owned := l.idx.lookup(sid, k); owned {
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

// referenced reads every manifest of the dataset and returns the full keys they reference.
func referenced(ctx context.Context, st storage.Store, base string) (map[string]bool, error) {
	refs := map[string]bool{}
	for info, err := range st.List(ctx, base+"_versions/") {
		if err != nil {
			return nil, err
		}
		if !strings.HasSuffix(info.Key, ".manifest") {
			continue
		}
		b, err := storage.ReadAll(ctx, st, info.Key, dataset.MaxManifestSize)
		if err != nil {
			return nil, err
		}
		m, err := dataset.DecodeManifest(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", info.Key, err)
		}
		for _, f := range m.Fragments {
			refs[base+f.Path] = true
		}
		for _, ix := range m.Indices {
			for _, f := range ix.Files {
				refs[base+f.Path] = true
			}
		}
	}
	return refs, nil
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
