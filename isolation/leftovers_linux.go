package isolation

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

var ownerRE = regexp.MustCompile(`^[0-9]+-[0-9]+$`)

// hierarchyRoots lists every hierarchy root isolation may have created directories in.
func hierarchyRoots() []string {
	var roots []string
	for _, c := range []string{"memory", "pids", "freezer"} {
		if v1Mounted(c) {
			roots = append(roots, filepath.Join(v1Root, c))
		}
	}
	if u := unifiedMount(); u != "" {
		roots = append(roots, u)
	}
	return roots
}

// removeLeftovers kills the processes in, and removes, every owner directory under parent
// whose owning supervisor process is gone. Directories of live supervisors are not touched.
// It returns the owner directories (relative to the hierarchy roots) it cleaned.
func removeLeftovers(ctx context.Context, parent string) ([]string, error) {
	dead := map[string]bool{}
	for _, root := range hierarchyRoots() {
		ents, _ := os.ReadDir(filepath.Join(root, parent))
		for _, e := range ents {
			if e.IsDir() && ownerRE.MatchString(e.Name()) && !ownerAlive(e.Name()) {
				dead[e.Name()] = true
			}
		}
	}
	var cleaned []string
	var errs []error
	for owner := range dead {
		rel := filepath.Join(parent, owner)
		if err := killOwnerTree(ctx, rel); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := removeOwnerDirs(rel); err != nil {
			errs = append(errs, err)
			continue
		}
		cleaned = append(cleaned, rel)
	}
	return cleaned, errors.Join(errs...)
}

// killOwnerTree kills every process in each domain directory under rel (its workers died with
// the supervisor through PDEATHSIG, but escapees did not) and reaps those re-parented to us.
func killOwnerTree(ctx context.Context, rel string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	domains := map[string]bool{}
	for _, root := range hierarchyRoots() {
		ents, _ := os.ReadDir(filepath.Join(root, rel))
		for _, e := range ents {
			if e.IsDir() {
				domains[e.Name()] = true
			}
		}
	}
	var errs []error
	for name := range domains {
		cg := adoptCgroups(filepath.Join(rel, name))
		if cg.v1 == nil && cg.v2 == nil {
			continue // nothing that can kill: rmdir reports it if it is still busy
		}
		tr := newTracker(cg, 0)
		d := &Domain{cg: cg, tr: tr, exited: make(chan struct{})}
		close(d.exited)
		if !d.pollUntil(ctx, func() bool {
			if cg.populated() {
				_ = cg.killOnce(ctx, tr.mark)
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

// adoptCgroups builds a domainCgroups for an existing directory in whatever hierarchies hold it.
func adoptCgroups(rel string) *domainCgroups {
	c := &domainCgroups{mode: ModeV1}
	v1 := &v1Group{rel: rel, dirs: map[string]string{}}
	for _, ctrl := range []string{"memory", "pids", "freezer"} {
		dir := filepath.Join(v1Root, ctrl, rel)
		if _, err := os.Stat(dir); err == nil {
			v1.dirs[ctrl], v1.controllers = dir, append(v1.controllers, ctrl)
		}
	}
	if u := unifiedMount(); u != "" {
		if _, err := os.Stat(filepath.Join(u, rel)); err == nil {
			c.v2 = &v2Group{mount: u, rel: rel, dir: filepath.Join(u, rel)}
			c.mode = ModeHybrid
		}
	}
	if len(v1.controllers) > 0 {
		c.v1 = v1
		if v1.dirs["pids"] == "" {
			// procs() and member() read the pids hierarchy: fall back to any one present.
			v1.dirs["pids"] = v1.dirs[v1.controllers[0]]
		}
		if v1.dirs["freezer"] == "" && c.v2 == nil {
			c.v1 = nil // no way to kill reliably; removal below will report the busy dir
		}
	} else {
		c.mode = ModeV2
	}
	return c
}

// removeOwnerDirs removes rel's domain directories and rel itself in every hierarchy.
func removeOwnerDirs(rel string) error {
	var errs []error
	for _, root := range hierarchyRoots() {
		dir := filepath.Join(root, rel)
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
