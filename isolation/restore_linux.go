package isolation

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// changes is the journal of what a check (Probe, `steward doctor`) did to the cgroup tree
// outside the directories it removes itself: its move into the supervisor leaf, the directories
// it created, the controllers it enabled in a cgroup.subtree_control it found. undo reverts them
// last first, so the tree is left as found: a check run in a service's own cgroup (systemd's
// ExecStartPre without DelegateSubgroup=) must not leave that cgroup with controllers enabled
// for its children, where cgroup v2 then lets no process of the service start.
// A nil *changes records nothing: the Supervisor keeps what it sets up for its life.
type changes struct {
	steps   []change
	created map[string]bool // directories this journal created
}

// change is one recorded change; undo reports whether it had anything left to revert.
type change struct {
	what string
	undo func() (bool, error)
}

func (j *changes) add(what string, undo func() (bool, error)) {
	if j != nil {
		j.steps = append(j.steps, change{what, undo})
	}
}

// mkdir records that dir was created; removing it also reverts whatever was enabled in it.
// A directory already gone is as it was found.
func (j *changes) mkdir(dir string) {
	if j == nil {
		return
	}
	if j.created == nil {
		j.created = map[string]bool{}
	}
	j.created[dir] = true
	j.add("removed "+dir, func() (bool, error) {
		err := rmdirCgroup(dir)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	})
}

// enabled records that ctrls, absent before, were enabled in the subtree_control of dir, a
// directory found in place (one this journal created goes with its removal).
func (j *changes) enabled(dir string, ctrls []string) {
	if j == nil || len(ctrls) == 0 || j.created[dir] {
		return
	}
	var w []string
	for _, c := range ctrls {
		w = append(w, "-"+c)
	}
	p := filepath.Join(dir, "cgroup.subtree_control")
	j.add(fmt.Sprintf("disabled %s in %s", strings.Join(ctrls, " "), p), func() (bool, error) {
		if err := writeFile(p, strings.Join(w, " ")); err != nil {
			return false, opErr("disable controllers", "", p, nil, err)
		}
		return true, nil
	})
}

// moved records that this process left its cgroup own (relative to the root of hierarchy h).
func (j *changes) moved(h, root, own string) {
	j.add(fmt.Sprintf("moved back into %s:/%s", h, own), func() (bool, error) {
		return true, moveInto(h, root, own)
	})
}

// undo reverts every recorded change, last first, and says what it reverted. A failed step does
// not stop the ones before it: each is tried and every failure is returned.
func (j *changes) undo() (done []string, err error) {
	if j == nil {
		return nil, nil
	}
	var errs []error
	for _, c := range slices.Backward(j.steps) {
		did, err := c.undo()
		if err != nil {
			errs = append(errs, fmt.Errorf("undo (%s): %w", c.what, err))
			continue
		}
		if did {
			done = append(done, c.what)
		}
	}
	j.steps = nil
	return done, errors.Join(errs...)
}

// restoreCheck runs undo and reports it as a check: a tree left changed fails it.
func (j *changes) restoreCheck() Check {
	c := Check{Name: "cgroups restored"}
	done, err := j.undo()
	switch {
	case err != nil:
		c.Detail = err.Error()
		if len(done) > 0 {
			c.Detail += "; undone: " + strings.Join(done, ", ")
		}
		c.Fix = "the check left the cgroup tree changed: revert what failed above by hand before starting the service " +
			"(cgroup v2 starts no process in a cgroup that enables controllers for its children)"
	case len(done) == 0:
		c.OK, c.Detail = true, "nothing to undo: the check changed no cgroup outside its own, removed, directories"
	default:
		c.OK, c.Detail = true, "left as found, last change first: "+strings.Join(done, ", ")
	}
	return c
}
