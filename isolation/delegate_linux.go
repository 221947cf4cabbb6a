package isolation

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// delegation is what --cgroup-parent auto found, per hierarchy.
type delegation struct {
	tree tree
	own  map[string]string // hierarchy → the process's cgroup when it looked (relative to the root)
	leaf map[string]string // hierarchy → the leaf it moved itself into, if it moved
	why  map[string]string // hierarchy → why this parent
	errs map[string]error  // hierarchy → why none
}

// resolveAuto finds, in every mounted hierarchy, the process's own cgroup and decides whether
// worker domains can be created below it: it must be writable by the process's uid (delegated:
// systemd's Delegate=yes, a chowned v1 subtree, a container's cgroup namespace). If the process
// is alone in it, it moves itself into the leaf LeafName first, so that on cgroup v2 the own
// cgroup holds no process and may enable controllers for its children (the no-internal-process
// rule); domains then live in an owner directory beside that leaf. If others share it, the own
// cgroup is still usable where no domain controller is enabled (v1, a controller-less unified
// hierarchy); on a v2 hierarchy with memory and pids it is not, and its parent is used if that is
// delegated and empty (systemd's DelegateSubgroup= puts the service there). j (nil: nothing)
// records the move and, through the tree, what creating domains changes.
func resolveAuto(j *changes) delegation {
	d := delegation{tree: tree{parent: map[string]string{}, enable: map[string]string{}, changes: j},
		own: map[string]string{}, leaf: map[string]string{}, why: map[string]string{}, errs: map[string]error{}}
	v1, unified, err := readProcCgroup(os.Getpid())
	if err != nil {
		for _, h := range mountedHierarchies() {
			d.errs[h] = fmt.Errorf("read /proc/self/cgroup: %w", err)
		}
		return d
	}
	for _, h := range mountedHierarchies() {
		own := v1[h]
		if h == hUnified {
			own = unified
		}
		if own == "" {
			d.errs[h] = fmt.Errorf("this process has no cgroup in the %s hierarchy", h)
			continue
		}
		own = strings.TrimPrefix(path.Clean(own), "/")
		d.own[h] = own
		if err := d.resolve(h, own); err != nil {
			d.errs[h] = err
		}
	}
	return d
}

func (d *delegation) resolve(h, own string) error {
	root := hierarchyRoot(h)
	dir := filepath.Join(root, own)
	if err := writable(dir, h == hUnified); err != nil {
		return fmt.Errorf("own cgroup %s is not delegated to uid %d: %w", dir, os.Geteuid(), err)
	}
	others, err := otherProcs(dir)
	if err != nil {
		return err
	}
	// The no-internal-process rule binds only where domain controllers are enabled: a v2
	// hierarchy whose root offers memory and pids (so v2 mode will enable them below the
	// parent, whether or not they reach the own cgroup yet), not v1 and not hybrid's
	// controller-less one.
	pl, err := placeDomains(root, own, others, h == hUnified && offersLimits(root))
	if err != nil {
		return err
	}
	if pl.leaf != "" {
		if err := moveSelf(h, root, own, pl.leaf, d.tree.changes); err != nil {
			return err
		}
		d.leaf[h] = pl.leaf
	}
	d.tree.parent[h], d.tree.enable[h], d.why[h] = pl.parent, pl.enable, pl.why
	return nil
}

// placement is where one hierarchy's domains go.
type placement struct {
	parent string // the parent of the owner directory, relative to the root
	enable string // the highest cgroup whose subtree_control may be written
	leaf   string // the leaf to move into first, "" for none
	why    string
}

// placeDomains decides, for a process in the delegated cgroup own of the hierarchy at root,
// shared with the processes others, where its domains go. v2Limits: domain controllers will be
// enabled there (the no-internal-process rule applies).
func placeDomains(root, own string, others []int, v2Limits bool) (placement, error) {
	uid := os.Geteuid()
	switch {
	case len(others) == 0:
		leaf := path.Join(own, LeafName)
		return placement{parent: own, enable: own, leaf: leaf,
			why: fmt.Sprintf("own cgroup /%s is delegated to uid %d; moved itself into the leaf /%s, domains beside it", own, uid, leaf)}, nil
	case own == "":
		// The hierarchy root (root in the init cgroup namespace): the root may hold processes
		// and children with controllers at once, so keep domains in a directory of their own.
		return placement{parent: DefaultParent, enable: "",
			why: fmt.Sprintf("own cgroup is the hierarchy root: domains under /%s", DefaultParent)}, nil
	case !v2Limits:
		return placement{parent: own, enable: own,
			why: fmt.Sprintf("own cgroup /%s is delegated to uid %d and shared with %d other processes; no controller is enabled here, so domains go below it", own, uid, len(others))}, nil
	}
	up := path.Dir(own)
	if up == "." {
		up = ""
	}
	upDir := filepath.Join(root, up)
	if err := writable(upDir, true); err != nil || up == "" {
		return placement{}, fmt.Errorf("own cgroup /%s holds %d other processes (%v), so cgroup v2 forbids enabling memory and pids in it, "+
			"and its parent %s is not delegated: start steward alone in its cgroup, or with the host in a leaf of the delegated one "+
			"(systemd: DelegateSubgroup=supervisor)", own, len(others), others, upDir)
	}
	if o, err := readPids(filepath.Join(upDir, "cgroup.procs")); err != nil || len(o) > 0 {
		return placement{}, fmt.Errorf("own cgroup /%s holds %d other processes and its delegated parent %s is not empty (%v): cgroup v2 forbids enabling controllers there", own, len(others), upDir, o)
	}
	return placement{parent: up, enable: up,
		why: fmt.Sprintf("own cgroup /%s is shared with %d other processes (v2 allows no controllers there); domains in its delegated, empty parent /%s", own, len(others), up)}, nil
}

// writable checks that this uid may create cgroups in dir and move processes into them: the
// directory and its cgroup.procs (and on v2 cgroup.subtree_control) must be writable, which is
// exactly what a delegation hands over.
func writable(dir string, v2 bool) error {
	files := []string{dir, filepath.Join(dir, "cgroup.procs")}
	if v2 {
		files = append(files, filepath.Join(dir, "cgroup.subtree_control"))
	}
	for _, f := range files {
		if err := unix.Faccessat(unix.AT_FDCWD, f, unix.W_OK, unix.AT_EACCESS); err != nil {
			return &os.PathError{Op: "access", Path: f, Err: err}
		}
	}
	return nil
}

// otherProcs lists the processes of dir other than this one.
func otherProcs(dir string) ([]int, error) {
	pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, opErr("list processes", "", dir, nil, err)
	}
	return slices.DeleteFunc(pids, func(p int) bool { return p == os.Getpid() }), nil
}

// offersLimits: the cgroup has memory and pids available.
func offersLimits(dir string) bool {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	f := strings.Fields(string(b))
	return slices.Contains(f, "memory") && slices.Contains(f, "pids")
}

// moveSelf creates leaf (if absent) and moves this whole process into it from own, then checks
// /proc/self/cgroup. j records both, the move before it is tried.
func moveSelf(h, root, own, leaf string, j *changes) error {
	dir := filepath.Join(root, leaf)
	switch err := os.Mkdir(dir, 0o755); {
	case err == nil:
		j.mkdir(dir)
	case !errors.Is(err, os.ErrExist):
		return opErr("create leaf", "", dir, nil, err)
	}
	j.moved(h, root, own)
	if err := moveInto(h, root, leaf); err != nil {
		return opErr("move into leaf", "", dir, nil, err)
	}
	return nil
}

// moveInto moves this whole process into the cgroup rel of hierarchy h (mounted at root) and
// checks /proc/self/cgroup.
func moveInto(h, root, rel string) error {
	f := filepath.Join(root, rel, "cgroup.procs")
	if err := os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return opErr("move", "", f, nil, err)
	}
	v1, u, err := readProcCgroup(os.Getpid())
	if err != nil {
		return opErr("move", "", f, nil, err)
	}
	got := v1[h]
	if h == hUnified {
		got = u
	}
	if got != path.Join("/", rel) {
		return opErr("move", "", f, ErrPlacement, fmt.Errorf("in %s:%s after the move", h, got))
	}
	return nil
}
