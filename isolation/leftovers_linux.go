package isolation

import (
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"time"

	"golang.org/x/sys/unix"
)

var ownerRE = regexp.MustCompile(`^[0-9]+-[0-9]+$`)

// removeLeftovers kills the processes in, and removes, every owner directory under t's parents
// whose owning supervisor process is gone. Directories of live supervisors are not touched.
// It returns the owner directories (relative to the hierarchy roots) it cleaned.
func removeLeftovers(ctx context.Context, t tree) ([]string, error) {
	dead := map[string]bool{}
	for _, h := range t.hierarchies() {
		ents, _ := os.ReadDir(t.abs(h))
		for _, e := range ents {
			if e.IsDir() && ownerRE.MatchString(e.Name()) && !OwnerAlive(e.Name()) {
				dead[e.Name()] = true
			}
		}
	}
	var cleaned []string
	var errs []error
	for owner := range dead {
		if err := cleanOwner(ctx, t, owner); err != nil {
			errs = append(errs, err)
			continue
		}
		cleaned = append(cleaned, t.rel(hPids, owner))
	}
	return cleaned, errors.Join(errs...)
}

// cleanOwner kills what owner's directories hold and removes them. A directory can turn busy
// again after the kill found it empty: the dead owner's launcher dies soon after it
// (PDEATHSIG), but until then it may still be placing a child it had just forked, one v1
// hierarchy at a time (seen in CI: a v1 memory directory busy right after a sidecar was killed
// mid-launch, its other hierarchies removed). Until the directories go or 5 s have passed, the
// kill and the rmdirs are tried again.
func cleanOwner(ctx context.Context, t tree, owner string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		if err := killOwnerTree(ctx, t, owner); err != nil {
			return err
		}
		err := removeOwnerDirs(t, owner)
		if err == nil || !errors.Is(err, unix.EBUSY) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// killOwnerTree kills every process in each domain directory of owner (its workers died with
// the supervisor through PDEATHSIG, but escapees did not) and reaps those re-parented to us.
func killOwnerTree(ctx context.Context, t tree, owner string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	domains := map[string]bool{}
	for _, h := range t.hierarchies() {
		ents, _ := os.ReadDir(t.abs(h, owner))
		for _, e := range ents {
			if e.IsDir() {
				domains[e.Name()] = true
			}
		}
	}
	var errs []error
	for name := range domains {
		cg := adoptCgroups(t, path.Join(owner, name))
		if cg.v1 == nil && cg.v2 == nil {
			continue // nothing that can kill: rmdir reports it if it is still busy
		}
		tr := newTracker(cg, 0)
		d := &Domain{cg: cg, tr: tr, exited: make(chan struct{})}
		close(d.exited)
		if !d.pollUntil(ctx, func() bool {
			busy := false
			if cg.populated() {
				_ = cg.killOnce(ctx, tr.mark)
				busy = true
			}
			// What the domain's v1 groups alone hold: the dead owner's launcher, whose forking
			// thread was in them for a fork, and, in hybrid mode, a child it had just forked,
			// born there but not yet placed in the unified group that populated and killOnce
			// read. Both die with the owner (PDEATHSIG), but not before its successor sweeps.
			if cg.v1 != nil && cg.v1.killTaskOwners() {
				busy = true
			}
			if busy {
				tr.reapOnce()
				return false
			}
			return tr.reapOnce() == 0
		}) {
			errs = append(errs, opErr("kill leftover "+name, cg.mode, "", ErrReapBound, ctx.Err()))
		}
		tr.close()
	}
	return errors.Join(errs...)
}

// adoptCgroups builds a domainCgroups for an existing directory sub (owner/domain) below t's
// parents in whatever hierarchies hold it.
func adoptCgroups(t tree, sub string) *domainCgroups {
	c := &domainCgroups{mode: ModeV1}
	v1 := &v1Group{rels: map[string]string{}, dirs: map[string]string{}}
	for _, ctrl := range []string{hMemory, hPids, hFreezer} {
		if !v1Mounted(ctrl) {
			continue
		}
		if _, err := os.Stat(t.abs(ctrl, sub)); err == nil {
			v1.rels[ctrl], v1.dirs[ctrl], v1.controllers = t.rel(ctrl, sub), t.abs(ctrl, sub), append(v1.controllers, ctrl)
		}
	}
	if u := unifiedMount(); u != "" {
		if _, err := os.Stat(t.abs(hUnified, sub)); err == nil {
			c.v2 = &v2Group{mount: u, rel: t.rel(hUnified, sub), dir: t.abs(hUnified, sub)}
			c.mode = ModeHybrid
		}
	}
	if len(v1.controllers) > 0 {
		c.v1 = v1
		if v1.dirs["pids"] == "" {
			// procs() and member() read the pids hierarchy: fall back to any one present.
			v1.dirs["pids"], v1.rels["pids"] = v1.dirs[v1.controllers[0]], v1.rels[v1.controllers[0]]
		}
		if v1.dirs["freezer"] == "" && c.v2 == nil {
			c.v1 = nil // no way to kill reliably; removal below will report the busy dir
		}
	} else {
		c.mode = ModeV2
	}
	return c
}

// removeOwnerDirs removes owner's domain directories and owner itself in every hierarchy.
func removeOwnerDirs(t tree, owner string) error {
	var errs []error
	for _, h := range t.hierarchies() {
		dir := t.abs(h, owner)
		ents, err := os.ReadDir(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
				}
			}
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
