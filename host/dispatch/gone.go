package dispatch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cba1309c/steward/rpc"
)

// A segmented job's plan names sidecars, and on a shared journal each node drives its own. When
// a node dies with its sidecars, the node that continues the job cannot reach them: a plan
// sidecar that no node has announced for Config.SidecarGoneAfter (its epochs were under the dead
// node's lease, and no successor came back under its name) is gone for the job. Nothing is sent to, adopted from or abandoned on it again:
//   - a step aimed at it and never sent is re-aimed at a live plan sidecar, in a transaction that
//     rechecks it is still PENDING (a send is journaled RUNNING first, under the sender's claim,
//     so a step is still sent at most once); a step it was sent is resolved as any other;
//   - a gone committer is replaced while no commit attempt is out or done;
//   - the segments whose custody it held are taken over from storage by the committer
//     (objects.reserve of their _indices/<uuid>/ folders and the build's area as prefix
//     tickets), and what it held of a build that ends is taken over the same way and abandoned.
// A step that was running on it when it died wrote a folder whose uuid only its ledger knew:
// that folder is left to objects.sweep (docs/PROTOCOL.md §9 rule 11).

// live are the plan's sidecars that are not gone, in plan order.
func (sp *SegmentedPlan) live() []string {
	var out []string
	for _, n := range sp.Sidecars {
		if !slices.Contains(sp.Gone, n) {
			out = append(out, n)
		}
	}
	return out
}

// liveHere reports whether this dispatcher drives a live sidecar added under name.
func (d *Dispatcher) liveHere(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.sidecars[name]
	return e != nil && !exited(e.sc)
}

// drivesAll reports whether this dispatcher drives a live sidecar under each of names: only such
// a node adopts, commits or ends a build (others would only fail to reach them, every round).
func (d *Dispatcher) drivesAll(names []string) bool {
	for _, n := range names {
		if !d.liveHere(n) {
			return false
		}
	}
	return true
}

// unseenFor reports how long sidecar name has gone unannounced (0 when live), by this dispatcher's
// clock since it first found it so: a restarted dispatcher starts counting again. The map holds
// only plan sidecars' names found unannounced, and forgets each once it is live again.
func (d *Dispatcher) unseenFor(name string, live bool) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if live {
		delete(d.unseen, name)
		return 0
	}
	now := d.cfg.Now()
	since, ok := d.unseen[name]
	if !ok {
		d.unseen[name] = now
		return 0
	}
	return now.Sub(since)
}

// leaveGone journals the plan sidecars of segmented job p that no node announces (a shared
// journal only), replaces a gone committer when no commit attempt is out, and re-aims the
// never-sent steps aimed at gone sidecars. It reports whether it changed anything.
func (d *Dispatcher) leaveGone(p Job, steps []Job) (bool, error) {
	if d.cluster == nil {
		return false, nil // one node: its sidecars come back under the same names
	}
	sp := p.Segmented
	var gone []string
	for _, n := range sp.live() {
		live := d.liveHere(n)
		if !live {
			var err error
			if live, err = d.cluster.SidecarLive(n); err != nil {
				return false, err
			}
		}
		if d.unseenFor(n, live) >= d.cfg.SidecarGoneAfter {
			gone = append(gone, n)
		}
	}
	// A commit sent (and not settled as never having run) or done keeps its committer: its
	// outcome is index.resolve's to tell.
	commitOut := slices.ContainsFunc(steps, func(s Job) bool {
		st := classifyStep(s)
		return s.Op == rpc.OpCommitSegments && (st == stepDone || (st == stepBusy && s.State != StatePending))
	})
	replace := slices.Contains(sp.Gone, sp.Committer) && !commitOut
	changed := false
	if len(gone) > 0 || replace {
		here := d.sidecarNames()
		var err error
		p, changed, err = d.modify(p.ID, func(x *Job) bool {
			return markGone(x, gone, here, commitOut, d.cfg.Now())
		})
		if err != nil {
			return false, err
		}
		if changed {
			d.log.Warn("segmented job: plan sidecars gone, their work moves", "job", p.ID, "gone", p.Segmented.Gone,
				"committer", p.Segmented.Committer)
		}
	}
	sp = p.Segmented
	live := sp.live()
	if len(live) == 0 {
		return changed, nil
	}
	for i, s := range steps {
		if s.State != StatePending || s.Op == rpc.OpCommitSegments || !slices.Contains(sp.Gone, s.Target) {
			continue // a commit is re-aimed once the new committer holds every segment (advance)
		}
		to := live[i%len(live)]
		if s.Op == rpc.OpTrain {
			to = sp.Committer
		}
		_, moved, err := d.retarget(s.ID, s.Target, to)
		if err != nil {
			return changed, err
		}
		changed = changed || moved
	}
	return changed, nil
}

// markGone records in x's plan the sidecars found gone, adding this node's sidecars (here) when no
// plan sidecar is left, and replaces a gone committer unless a commit is out. It reports whether
// it changed x.
func markGone(x *Job, gone, here []string, commitOut bool, now time.Time) bool {
	sp := x.Segmented
	if sp == nil || x.State.Settled() {
		return false
	}
	var news []string
	for _, n := range gone {
		if !slices.Contains(sp.Gone, n) {
			news = append(news, n)
		}
	}
	left := len(sp.live()) - len(news)
	if left <= 0 && len(here) == 0 {
		return false // no live sidecar to move the work to: a node that has one does it
	}
	for _, n := range news {
		sp.Gone = append(sp.Gone, n)
		if !slices.Contains(sp.Stranded, n) {
			sp.Stranded = append(sp.Stranded, n)
		}
	}
	if left <= 0 {
		for _, n := range here {
			if !slices.Contains(sp.Sidecars, n) {
				sp.Sidecars = append(sp.Sidecars, n)
			}
		}
	}
	detail := ""
	if len(news) > 0 {
		detail = "no node announces sidecar " + strings.Join(news, ", ")
	}
	if slices.Contains(sp.Gone, sp.Committer) && !commitOut && len(sp.live()) > 0 {
		old := sp.Committer
		sp.Committer = sp.live()[0]
		// What old adopted went with it, as did what it built: taken over from storage.
		for _, b := range append(sp.Adopted, old) {
			if !slices.Contains(sp.Stranded, b) {
				sp.Stranded = append(sp.Stranded, b)
			}
		}
		sp.Adopted = nil
		detail = strings.TrimPrefix(detail+"; committer "+old+" → "+sp.Committer, "; ")
	}
	if detail == "" {
		return false
	}
	x.record(now, EventSidecarGone, x.State, detail)
	return true
}

// retarget re-aims never-sent step id from sidecar from to sidecar to.
func (d *Dispatcher) retarget(id, from, to string) (Job, bool, error) {
	now := d.cfg.Now()
	return d.modify(id, func(x *Job) bool {
		if x.State != StatePending || x.InvocationID != "" || x.Target != from {
			return false
		}
		x.Target = to
		x.record(now, EventRetarget, x.State, fmt.Sprintf("sidecar %s is gone: sent to %s instead", from, to))
		return true
	})
}

// takeOver has sidecar taker reserve, for build p's owner, the build's area and the folders of
// segments uuids as prefix tickets: the custody a gone sidecar held, taken from what storage
// holds. Idempotent; a taker that already holds names below them for the build is fine.
func (d *Dispatcher) takeOver(ctx context.Context, p Job, taker string, uuids []string) error {
	c, err := d.callerNamed(taker)
	if err != nil {
		return err
	}
	base := strings.Trim(p.Dataset.Path, "/") + "/"
	keys := []string{base + rpc.BuildArea(p.Segmented.BuildID)}
	for _, u := range uuids {
		keys = append(keys, base+"_indices/"+u+"/")
	}
	owner := rpc.ObjectOwner{Kind: rpc.OwnerHostTxn, ID: rpc.BuildOwner(p.Segmented.BuildID)}
	for chunk := range slices.Chunk(keys, rpc.MaxObjectKeys) {
		var rr rpc.ObjectsReserveResult
		if err := c.Call(ctx, rpc.MethodObjectsReserve, rpc.ObjectsReserveParams{Owner: owner, Store: p.Dataset.Store, Keys: chunk}, &rr); err != nil {
			return fmt.Errorf("take over on %s: %w", taker, err)
		}
	}
	return nil
}

// writtenSegments are the uuids of the segments steps answered as written.
func writtenSegments(steps []Job) []string {
	return builtBy(steps, "")
}

// builtBy are the uuids of the segments sidecar b (any sidecar: "") answered as written.
func builtBy(steps []Job, b string) []string {
	var out []string
	for _, s := range steps {
		if s.Op == rpc.OpSegment && classifyStep(s) == stepDone && s.Result != nil && s.Result.IndexUUID != "" && (b == "" || s.Sidecar == b) {
			out = append(out, s.Result.IndexUUID)
		}
	}
	return out
}
