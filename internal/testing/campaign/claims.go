package campaign

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/slot"
)

// slotClaim is one commit-slot claim as storage holds it (storage/slot): every engine's commit
// goes through its invocation's gateway, which claims version pinned+1 for the invocation before
// it creates the manifest, and a fence is a claim of kind fence for one invocation.
type slotClaim struct {
	version    int64
	invocation string
	claim      slot.Claim
	err        error // the object is not this invocation's claim (slot.ErrCorrupt)
	holds      bool  // commit claims: the manifest it names is in storage with exactly its bytes
	landed     bool  // commit claims: some manifest is at the key it names (its own or another's)
}

// claimsDir is where a dataset's claims live, relative to it (slot.ClaimKey).
const claimsDir = "_steward/claims/"

// readClaims reads every claim of the dataset at path, with the state of the manifest each
// commit claim names, and marks each claim's key known to the object check (a claim is a
// permanent record of the sidecar's, never a custody object). A key under _steward/ that is not
// one of slot.ClaimKey's is left unmarked: the object check reports it as an orphan.
func readClaims(ctx context.Context, st storage.Store, path string, referenced map[string]bool) ([]slotClaim, error) {
	var out []slotClaim
	for o, err := range st.List(ctx, path+"/"+claimsDir) {
		if err != nil {
			return nil, err
		}
		v, inv, ok := parseClaimKey(path, o.Key)
		if !ok {
			continue
		}
		referenced[o.Key] = false
		sc := slotClaim{version: v, invocation: inv}
		sc.claim, sc.err = slot.Read(ctx, st, path, v, inv)
		switch {
		case errors.Is(sc.err, slot.ErrCorrupt):
			out = append(out, sc)
			continue
		case sc.err != nil:
			return nil, fmt.Errorf("claim %s: %w", o.Key, sc.err)
		}
		if sc.claim.Kind == slot.KindCommit {
			if sc.holds, err = slot.Holds(ctx, st, sc.claim); err != nil {
				return nil, fmt.Errorf("claim %s: %w", o.Key, err)
			}
			if sc.landed = sc.holds; !sc.landed && sc.claim.Key != "" {
				if _, err := st.Stat(ctx, sc.claim.Key); err == nil {
					sc.landed = true
				} else if !errors.Is(err, storage.ErrNotFound) {
					return nil, fmt.Errorf("claim %s: its manifest: %w", o.Key, err)
				}
			}
		}
		out = append(out, sc)
	}
	return out, nil
}

// parseClaimKey reads version and invocation from a claim's store key, which must be exactly the
// key slot.ClaimKey makes of them.
func parseClaimKey(path, key string) (v int64, inv string, ok bool) {
	rel := strings.TrimPrefix(key, path+"/")
	if !slot.IsClaimKey(rel) {
		return 0, "", false
	}
	digits, name, _ := strings.Cut(strings.TrimPrefix(rel, claimsDir), "/")
	inv, ok = strings.CutSuffix(name, ".json")
	v, err := strconv.ParseInt(digits, 10, 64)
	if !ok || err != nil || v < 1 || slot.ClaimKey(path, v, inv) != key {
		return 0, "", false
	}
	return v, inv, true
}

// claimOf returns invocation inv's claim of version v in c, or nil.
func (c *chain) claimOf(v int64, inv string) *slotClaim {
	for i := range c.claims {
		if c.claims[i].version == v && c.claims[i].invocation == inv {
			return &c.claims[i]
		}
	}
	return nil
}

// checkClaims checks a dataset's claims against its chain and the jobs (byInv: by invocation):
//
//   - every version a steward writer committed past the setup holds the manifest its writer's
//     commit claim names, byte for byte (unclaimed-version): the commit went through the gateway;
//   - every claim is one steward wrote (claim-corrupt), for a job of this dataset at its
//     admitted version + 1 (ghost-claim, claim-wrong-slot);
//   - a commit claim names the manifest of its own version (claim-mismatch); if that manifest
//     holds its bytes, the version is its invocation's commit (claim-mismatch); if not, another
//     writer's manifest is there (open-claim: a claimed manifest that never landed must have been
//     fenced by the outcome's decision, or the job's outcome was given without one);
//   - a fenced invocation committed nothing at the version (fenced-commit).
func (r *run) checkClaims(c *chain, byInv map[string]dispatch.Job) {
	for _, v := range c.versions {
		if v.Version <= c.setup || v.Kind != kindCommit {
			continue
		}
		if cl := c.claimOf(v.Version, v.Invocation); cl == nil || cl.err != nil || cl.claim.Kind != slot.KindCommit || !cl.holds {
			r.violate("unclaimed-version", "", fmt.Sprintf("%s version %d (commit of %s) holds no manifest its writer's commit claim names (claim %s)",
				c.path, v.Version, v.Invocation, describeClaim(cl)))
		}
	}
	for i := range c.claims {
		r.checkClaim(c, &c.claims[i], byInv)
	}
}

func (r *run) checkClaim(c *chain, cl *slotClaim, byInv map[string]dispatch.Job) {
	r.mu.Lock()
	r.rep.Claims++
	if cl.err == nil && cl.claim.Kind == slot.KindFence {
		r.rep.Fences++
	}
	r.mu.Unlock()
	where := fmt.Sprintf("%s claim of version %d by %s", c.path, cl.version, cl.invocation)
	if cl.err != nil {
		r.violate("claim-corrupt", "", where+": "+cl.err.Error())
		return
	}
	j, ok := byInv[cl.invocation]
	switch {
	case !ok:
		r.violate("ghost-claim", "", where+": the invocation is no job's")
	case j.Dataset.Path != c.path:
		r.violate("ghost-claim", j.ID, where+": the job is on "+j.Dataset.Path)
	case cl.version != j.AdmittedVersion+1:
		r.violate("claim-wrong-slot", j.ID, fmt.Sprintf("%s: the job was admitted at %d", where, j.AdmittedVersion))
	}
	m := c.at(cl.version)
	mine := m != nil && m.Kind == kindCommit && m.Invocation == cl.invocation
	if cl.claim.Kind == slot.KindFence {
		if mine {
			r.violate("fenced-commit", j.ID, where+" is a fence, and the version is the invocation's commit")
		}
		return
	}
	name, inDataset := strings.CutPrefix(cl.claim.Key, c.path+"/_versions/")
	if mv, isManifest := slot.ManifestVersion(name); !inDataset || !isManifest || mv != cl.version {
		r.violate("claim-mismatch", j.ID, fmt.Sprintf("%s names %q, not a manifest of that version", where, cl.claim.Key))
		return
	}
	switch {
	case cl.holds && !mine:
		r.violate("claim-mismatch", j.ID, fmt.Sprintf("%s holds its manifest, and the chain's version is %s", where, describeVersion(m)))
	case !cl.landed:
		r.violate("open-claim", j.ID, where+" names a manifest that never landed, and the claim was never fenced")
	}
}

func describeClaim(cl *slotClaim) string {
	switch {
	case cl == nil:
		return "none"
	case cl.err != nil:
		return "corrupt"
	case cl.claim.Kind == slot.KindFence:
		return "a fence"
	case !cl.holds:
		return "a commit whose manifest is not in storage"
	}
	return "a commit"
}

func describeVersion(m *version) string {
	if m == nil {
		return "absent"
	}
	if m.Invocation == "" {
		return fmt.Sprintf("%d, by no steward writer", m.Version)
	}
	return fmt.Sprintf("%d, a %s of %s", m.Version, m.Kind, m.Invocation)
}
