package campaign

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
)

// chain is one dataset's version chain as storage holds it, versions 1..latest, in the terms of
// either engine's format.
type chain struct {
	path     string
	versions []version        // index v-1
	setup    int64            // versions 1..setup were written by the campaign's setup
	commits  map[string]int64 // invocation id → version it committed (fences excluded)
	claims   []slotClaim      // the commit-slot claims under the dataset (every engine's)
}

// version is one version of a chain: what wrote it and the indices present at it.
type version struct {
	Version, ReadVersion int64
	Op                   string // the format's operation name (builtin: the transaction op; Lance: its operation class)
	Invocation           string // the steward invocation that wrote it ("" for none)
	Kind                 string // kindCommit, kindFence, or "" (no steward writer's)
	Indices              []indexRef
}

// indexRef is one index (one segment, for Lance) present at a version.
type indexRef struct{ Name, UUID string }

// What wrote a version.
const (
	kindCommit = "commit"
	kindFence  = "fence"
)

func (c *chain) at(v int64) *version {
	if v < 1 || int(v) > len(c.versions) {
		return nil
	}
	return &c.versions[v-1]
}

// check verifies the campaign from the job store's typed fields and storage truth only.
func (r *run) check(ctx context.Context) {
	jobs, err := r.d.List(dispatch.ListOptions{})
	if err != nil {
		r.violate("check", "", "list jobs: "+err.Error())
		return
	}
	chains := map[string]*chain{}
	referenced := map[string]bool{}
	read, refs, errs := r.readChains(ctx)
	for i, path := range r.datasets {
		c := read[i]
		if errs[i] != nil {
			r.violate("manifest-chain", "", fmt.Sprintf("%s: %v", path, errs[i]))
			continue
		}
		maps.Copy(referenced, refs[i])
		c.setup = r.setupVersions[path]
		for _, v := range c.versions {
			r.checkVersion(c, v)
		}
		r.mu.Lock()
		r.rep.Versions += len(c.versions)
		r.mu.Unlock()
		chains[path] = c
	}
	byInv := map[string]dispatch.Job{}
	for _, j := range jobs {
		if j.Parent == "" {
			r.tally(j, jobs)
		}
		if j.InvocationID != "" {
			byInv[j.InvocationID] = j
		}
		// A segmented job is checked by checkSegmented, and of its steps only the commit is a
		// mutation of the chain: a TRAIN or SEGMENT is COMMITTED with no version.
		if c := chains[j.Dataset.Path]; c != nil && j.Segmented == nil && (j.Parent == "" || j.Op == rpc.OpCommitSegments) {
			r.checkJob(j, c)
		}
	}
	if r.cfg.Segments {
		r.checkSegmented(ctx, jobs, chains)
	}
	for _, c := range chains {
		r.checkClaims(c, byInv)
		for inv, v := range c.commits {
			switch j, ok := byInv[inv]; {
			case !ok:
				r.violate("ghost-commit", "", fmt.Sprintf("%s version %d was committed by invocation %s of no job", c.path, v, inv))
			case j.Dataset.Path != c.path:
				r.violate("ghost-commit", j.ID, fmt.Sprintf("%s version %d was committed by invocation %s of a job on %s", c.path, v, inv, j.Dataset.Path))
			}
		}
	}
	r.checkObjects(ctx, jobs, referenced)
}

// readChains reads every dataset's chain and claims at once (a Lance read is a Python process
// each).
func (r *run) readChains(ctx context.Context) (chains []*chain, refs []map[string]bool, errs []error) {
	n := len(r.datasets)
	chains, refs, errs = make([]*chain, n), make([]map[string]bool, n), make([]error, n)
	var wg sync.WaitGroup
	for i, path := range r.datasets {
		refs[i] = map[string]bool{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			chains[i], errs[i] = r.format.read(ctx, path, refs[i])
			if errs[i] == nil {
				chains[i].claims, errs[i] = readClaims(ctx, r.store, path, refs[i])
			}
		}()
	}
	wg.Wait()
	return chains, refs, errs
}

// checkVersion checks one version past the setup against its predecessor: it was written at read
// version + 1 by a steward writer, a fence changes no index, and an invocation commits at most
// once.
func (r *run) checkVersion(c *chain, m version) {
	if m.Version <= c.setup {
		return
	}
	if m.ReadVersion != m.Version-1 {
		r.violate("manifest-chain", "", fmt.Sprintf("%s version %d read version %d, not %d", c.path, m.Version, m.ReadVersion, m.Version-1))
	}
	switch m.Kind {
	case kindFence:
		r.mu.Lock()
		r.rep.Fences++
		r.mu.Unlock()
		if prev := c.at(m.Version - 1); prev != nil && !slices.Equal(uuids(prev), uuids(&m)) {
			r.violate("fence", "", fmt.Sprintf("%s fence version %d changes the indices", c.path, m.Version))
		}
		return
	case kindCommit:
	default:
		r.violate("ghost-commit", "", fmt.Sprintf("%s version %d (%s) was written by no steward writer", c.path, m.Version, m.Op))
		return
	}
	if v, dup := c.commits[m.Invocation]; dup {
		r.violate("double-commit", "", fmt.Sprintf("%s: invocation %s committed versions %d and %d", c.path, m.Invocation, v, m.Version))
	}
	c.commits[m.Invocation] = m.Version
}

func uuids(m *version) []string {
	var out []string
	for _, ix := range m.Indices {
		out = append(out, ix.UUID)
	}
	slices.Sort(out)
	return out
}

// findIndex returns the index of m whose name folds to name.
func findIndex(m *version, name string) *indexRef {
	for i := range m.Indices {
		if dispatch.FoldName(m.Indices[i].Name) == dispatch.FoldName(name) {
			return &m.Indices[i]
		}
	}
	return nil
}

// hasSegment reports whether m holds a segment uuid of the index whose name folds to name (a
// segmented index has several).
func hasSegment(m *version, name, uuid string) bool {
	for _, ix := range m.Indices {
		if dispatch.FoldName(ix.Name) == dispatch.FoldName(name) && ix.UUID == uuid {
			return true
		}
	}
	return false
}

// checkCommit checks version v, committed by job j, against the pinned version before it: the
// operation is the one the format records for the job's, and the index is new at v (CREATE,
// REPLACE) or gone (DROP, which needs it at the pinned version).
func (r *run) checkCommit(j dispatch.Job, c *chain, v int64) {
	m, pinned := c.at(v), c.at(v-1)
	before, after := findIndex(pinned, j.Index.Name), findIndex(m, j.Index.Name)
	if want := r.format.op(j.Op, before != nil); m.Op != want {
		r.violate("committed-wrong-op", j.ID, fmt.Sprintf("version %d is %s, want %s for %s (index present before: %t)", v, m.Op, want, j.Op, before != nil))
	}
	switch {
	case j.Op == rpc.OpDrop && (before == nil || after != nil):
		r.violate("drop-wrong", j.ID, fmt.Sprintf("%q present at pinned %d: %t, at %d: %t", j.Index.Name, v-1, before != nil, v, after != nil))
	case j.Op != rpc.OpDrop && after == nil:
		r.violate("index-missing", j.ID, fmt.Sprintf("%q absent at version %d", j.Index.Name, v))
	case j.Op != rpc.OpDrop && before != nil && before.UUID == after.UUID:
		r.violate("index-not-rebuilt", j.ID, fmt.Sprintf("%q at version %d is the pinned version's index %s", j.Index.Name, v, after.UUID))
	case j.Op != rpc.OpDrop && j.Result != nil && j.Result.IndexUUID != "" && !hasSegment(m, j.Index.Name, j.Result.IndexUUID):
		r.violate("index-mismatch", j.ID, fmt.Sprintf("answer says index %s, version %d holds %s", j.Result.IndexUUID, v, after.UUID))
	}
}

// checkJob checks one job's final state against its dataset's chain.
func (r *run) checkJob(j dispatch.Job, c *chain) {
	v, committed := c.commits[j.InvocationID]
	switch j.State {
	case dispatch.StateCommitted:
		if j.Result != nil && j.Result.CommittedVersion == 0 && j.Resolution == nil &&
			(j.Result.CompletionReason == rpc.CompletionIfNotExistsNoop || j.Result.CompletionReason == rpc.CompletionIfExistsNoop) {
			r.checkNoop(j, c, committed, v)
			return
		}
		if !committed {
			r.violate("committed-not-in-chain", j.ID, fmt.Sprintf("COMMITTED but invocation %s committed no version of %s", j.InvocationID, c.path))
			return
		}
		if v != j.AdmittedVersion+1 {
			r.violate("committed-wrong-slot", j.ID, fmt.Sprintf("committed version %d, admitted %d", v, j.AdmittedVersion))
		}
		if j.Result != nil && j.Result.CommittedVersion != 0 && j.Result.CommittedVersion != v {
			r.violate("committed-wrong-slot", j.ID, fmt.Sprintf("answer says version %d, storage says %d", j.Result.CommittedVersion, v))
		}
		r.mu.Lock()
		r.rep.Commits++
		r.mu.Unlock()
		r.checkCommit(j, c, v)
	case dispatch.StateNotCommitted:
		if committed {
			r.violate("not-committed-in-chain", j.ID, fmt.Sprintf("NOT_COMMITTED but invocation %s committed version %d of %s", j.InvocationID, v, c.path))
		}
		// The campaign removes no version: "the pinned version is gone" is never true here.
		if res := j.Result; res != nil && res.Phase == rpc.PhasePreInvocationRejected && res.Code == rpc.ReasonStaleAdmission && c.at(j.AdmittedVersion) != nil {
			r.violate("stale-admission-false", j.ID, fmt.Sprintf("answered STALE_ADMISSION (%q) but pinned version %d is in the chain of %s",
				res.Message, j.AdmittedVersion, c.path))
		}
	default:
		r.violate("unsettled", j.ID, fmt.Sprintf("state %s after convergence", j.State))
	}
	if j.SlotHeld {
		r.violate("slot-held", j.ID, fmt.Sprintf("%s still holds its slot", j.State))
	}
}

// checkNoop checks a COMMITTED IF-condition no-op: nothing committed, and the pinned snapshot
// justifies the no-op.
func (r *run) checkNoop(j dispatch.Job, c *chain, committed bool, v int64) {
	if committed {
		r.violate("noop-committed", j.ID, fmt.Sprintf("%s but committed version %d", j.Result.CompletionReason, v))
	}
	m := c.at(j.AdmittedVersion)
	if m == nil {
		r.violate("noop-unjustified", j.ID, fmt.Sprintf("pinned version %d not in the chain", j.AdmittedVersion))
		return
	}
	present := findIndex(m, j.Index.Name) != nil
	if (j.Result.CompletionReason == rpc.CompletionIfNotExistsNoop) != present {
		r.violate("noop-unjustified", j.ID, fmt.Sprintf("%s but %q present=%t at pinned version %d", j.Result.CompletionReason, j.Index.Name, present, j.AdmittedVersion))
	}
}

// tally counts the job in the outcome table (a segmented job's steps are in jobs).
func (r *run) tally(j dispatch.Job, jobs []dispatch.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.rep.kind(r.plan[j.ID].kind)
	switch j.State {
	case dispatch.StateCommitted:
		k.Committed++
	case dispatch.StateNotCommitted:
		k.NotCommitted++
	case dispatch.StateUnknown:
		k.Unknown++
	default:
		k.Open++
	}
	resolved := j.Resolution != nil
	for _, s := range jobs {
		resolved = resolved || (j.Segmented != nil && s.Parent == j.ID && s.Resolution != nil)
	}
	if resolved {
		k.Resolved++ // a segmented job: one of its steps was settled by index.resolve
	}
	if j.Result != nil && j.Result.CompletionReason != "" && j.Result.CompletionReason != rpc.CompletionCommitted {
		k.Noop++
	}
	r.rep.Jobs++
	line := jobLine(j, r.plan[j.ID].kind)
	if j.Segmented != nil {
		var steps []dispatch.Job
		for _, s := range jobs {
			if s.Parent == j.ID {
				steps = append(steps, s)
			}
		}
		line += fmt.Sprintf(" [%d runs; steps %s]", len(j.Segmented.Runs), stepsLine(steps))
		if j.Segmented.Failed != "" {
			line += " failed: " + j.Segmented.Failed
		}
	}
	r.rep.JobLines = append(r.rep.JobLines, line)
}

// jobLine describes a job's path to its final state in one line.
func jobLine(j dispatch.Job, kind string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-30s %-7s %-12s %s@%d", j.ID, j.Op, j.Index.Name, j.Dataset.Path, j.AdmittedVersion)
	if j.IfNotExists || j.IfExists {
		b.WriteString(" IF")
	}
	fmt.Fprintf(&b, " → %s", j.State)
	if res := j.Result; res != nil {
		switch {
		case res.ErrorClass != "":
			fmt.Fprintf(&b, " (answer: %s error %d)", res.ErrorClass, res.ErrorCode)
		default:
			fmt.Fprintf(&b, " (answer: %s %d", res.Phase, res.Code)
			if res.CompletionReason != "" {
				b.WriteString(" " + res.CompletionReason)
			}
			if res.Signal != "" || res.OOMKilled {
				fmt.Fprintf(&b, " signal=%s oom=%t", res.Signal, res.OOMKilled)
			}
			if res.PeakMemoryBytes > 0 {
				fmt.Fprintf(&b, " peak=%dMiB", res.PeakMemoryBytes>>20)
			}
			b.WriteString(")")
		}
	}
	if res := j.Resolution; res != nil {
		fmt.Fprintf(&b, " resolved %s at slot %d fenced=%t", res.Outcome, res.Version, res.Fenced)
	}
	return b.String()
}

// checkObjects lists the run's objects: every referenced key must exist, and every object must
// be referenced by a manifest or owned by a ticket of a live sidecar.
func (r *run) checkObjects(ctx context.Context, jobs []dispatch.Job, referenced map[string]bool) {
	objects, err := storage.ListAll(ctx, r.store, r.prefix+"/")
	if err != nil {
		r.violate("objects", "", "list bucket: "+err.Error())
		return
	}
	owned, err := r.owned(ctx, jobs)
	if err != nil {
		r.violate("objects", "", "ticket listing: "+err.Error())
	}
	present := map[string]bool{}
	for _, o := range objects {
		present[o.Key] = true
		_, known := referenced[o.Key]
		switch {
		case known:
		case ownedKey(owned, o.Key):
			r.rep.Owned++
		default:
			r.violate("orphan", "", fmt.Sprintf("%s (%d bytes) is referenced by no manifest and owned by no ticket", o.Key, o.Size))
			r.rep.Orphans++
		}
	}
	for k, must := range referenced {
		if must && !present[k] {
			r.violate("missing-object", "", k+" is referenced by a manifest but absent from the bucket")
		}
	}
	r.rep.Objects, r.rep.Referenced = len(objects), len(referenced)
}

// ownedKey reports whether key is owned by a ticket of owned: a name ticket of that key, or a
// prefix ticket (a name ending in "/") of one of its folders.
func ownedKey(owned map[string]bool, key string) bool {
	if owned[key] {
		return true
	}
	for i := strings.LastIndexByte(key, '/'); i > 0; i = strings.LastIndexByte(key[:i], '/') {
		if owned[key[:i+1]] {
			return true
		}
	}
	return false
}

// owned lists the keys (and prefixes) the live sidecars' ledgers hold tickets for, per job
// invocation.
func (r *run) owned(ctx context.Context, jobs []dispatch.Job) (map[string]bool, error) {
	out := map[string]bool{}
	for _, n := range r.nodes {
		s := n.current()
		st, err := r.status(ctx, s, nil)
		if err != nil {
			return out, fmt.Errorf("%s: %w", n.name, err)
		}
		if st.Ledger.Used == 0 {
			continue
		}
		for _, j := range jobs {
			if j.InvocationID == "" {
				continue
			}
			st, err := r.status(ctx, s, &j.InvocationID)
			if err != nil {
				return out, fmt.Errorf("%s: %w", n.name, err)
			}
			for _, t := range st.Tickets {
				if t.Store == r.storeName {
					out[t.Key] = true
				}
			}
		}
	}
	return out, nil
}
