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

// v2Group is one domain's cgroup in a unified (cgroup2) hierarchy. In ModeV2 it carries the
// limits; in ModeHybrid it sits in the controller-less /sys/fs/cgroup/unified and is used only
// for placement at birth, cgroup.kill and the populated flag.
type v2Group struct {
	mount string // hierarchy root, "/sys/fs/cgroup" or "/sys/fs/cgroup/unified"
	rel   string
	dir   string
	fd    *os.File // O_PATH|O_DIRECTORY fd for CLONE_INTO_CGROUP
	fresh bool     // created by newV2Group (counters start at 0)
}

// unifiedMount returns where the cgroup2 hierarchy is mounted, or "".
func unifiedMount() string {
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p
		}
	}
	return ""
}

// v2Controllers lists the controllers available at the hierarchy root.
func v2Controllers(mount string) []string {
	b, _ := os.ReadFile(filepath.Join(mount, "cgroup.controllers"))
	return strings.Fields(string(b))
}

// newV2Group creates rel under mount. With limits, it first enables memory and pids in the
// subtree_control of every ancestor at or below from (a path relative to mount; "" is the root)
// so the leaf gets the interface files. Ancestors above from are not touched: in a delegated
// subtree they belong to whoever delegated it. j (nil: nothing) records the directories created
// and the controllers enabled.
func newV2Group(mount, rel, from string, limits bool, j *changes) (_ *v2Group, retErr error) {
	g := &v2Group{mount: mount, rel: rel, dir: filepath.Join(mount, rel)}
	if limits {
		anc := ""
		for _, part := range append([]string{""}, strings.Split(path.Dir(rel), "/")...) {
			anc = path.Join(anc, part)
			if !within(anc, from) {
				continue
			}
			switch err := os.Mkdir(filepath.Join(mount, anc), 0o755); {
			case err == nil:
				j.mkdir(filepath.Join(mount, anc))
			case !errors.Is(err, os.ErrExist):
				return nil, opErr("create cgroup", ModeV2, filepath.Join(mount, anc), nil, err)
			}
			if err := enableControllers(filepath.Join(mount, anc), limitControllers, j); err != nil {
				return nil, err
			}
		}
	}
	fresh, err := mkdirCgroup(g.dir, j)
	if err != nil {
		return nil, opErr("create cgroup", "", g.dir, nil, err)
	}
	g.fresh = fresh
	defer func() {
		if retErr != nil {
			_ = g.remove()
		}
	}()
	fd, err := os.OpenFile(g.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, opErr("open cgroup", "", g.dir, nil, err)
	}
	g.fd = fd
	return g, nil
}

// within reports whether rel is base or below it ("" is the root, which holds everything).
func within(rel, base string) bool {
	return base == "" || rel == base || strings.HasPrefix(rel, base+"/")
}

// limitControllers are the controllers v2 mode enables down to a domain.
var limitControllers = []string{"memory", "pids"}

// enableControllers enables ctrls in dir's cgroup.subtree_control; j records those that were
// not enabled before.
func enableControllers(dir string, ctrls []string, j *changes) error {
	p := filepath.Join(dir, "cgroup.subtree_control")
	b, _ := os.ReadFile(p) // unreadable: the write below fails and says why
	var w, added []string
	for _, c := range ctrls {
		w = append(w, "+"+c)
		if !slices.Contains(strings.Fields(string(b)), c) {
			added = append(added, c)
		}
	}
	if err := os.WriteFile(p, []byte(strings.Join(w, " ")), 0); err != nil {
		return opErr("enable controllers", ModeV2, p, nil, err)
	}
	j.enabled(dir, added)
	return nil
}

// setLimits writes memory.max, memory.swap.max=0, memory.oom.group=1 and pids.max, reading
// each back (a value that reads back otherwise fails the domain: ErrLimitMismatch). oom.group
// makes an OOM kill take the whole domain, not one victim. A file the kernel lacks
// (memory.swap.max without swap accounting, memory.oom.group before 4.19) is listed as not
// enforced, with what holds instead.
func (g *v2Group) setLimits(mem, pids int64) (l limitsRead, err error) {
	if l.mem, err = writeReadInt(g.dir, "memory.max", mem, pageSlack); err != nil {
		return
	}
	l.add(LimitMemory, "memory.max", l.mem, true, readBack("memory.max", l.mem))
	if exists(g.dir, "memory.swap.max") {
		if l.swap, err = writeReadInt(g.dir, "memory.swap.max", 0, 0); err != nil {
			return
		}
		l.add(LimitSwapOff, "memory.swap.max", l.swap, true, readBack("memory.swap.max", l.swap))
	} else {
		l.swapUnbounded("memory.swap.max")
	}
	l.add(LimitSwappiness, "", 0, false, "cgroup v2 has no per-cgroup swappiness; swap off is memory.swap.max's")
	if exists(g.dir, "memory.oom.group") {
		var v int64
		if v, err = writeReadInt(g.dir, "memory.oom.group", 1, 0); err != nil {
			return
		}
		l.add(LimitOOMGroup, "memory.oom.group", v, true, readBack("memory.oom.group", v)+": an OOM kill takes every process of the domain")
	} else {
		l.add(LimitOOMGroup, "memory.oom.group", 0, false, "no memory.oom.group (kernel before 4.19): an OOM kill takes one process; the kill ladder takes the rest when the worker ends")
	}
	if l.pids, err = writeReadInt(g.dir, "pids.max", pids, 0); err != nil {
		return
	}
	l.add(LimitPids, "pids.max", l.pids, true, readBack("pids.max", l.pids))
	return
}

// cgroupFD is the fd to pass as SysProcAttr.CgroupFD.
func (g *v2Group) cgroupFD() int { return int(g.fd.Fd()) }

// write moves pid (a child not born here: forked by the launcher, see launcher) into the group.
func (g *v2Group) write(pid int) error {
	p := filepath.Join(g.dir, "cgroup.procs")
	if err := writeFile(p, strconv.Itoa(pid)); err != nil {
		return opErr("place worker", "", p, ErrPlacement, err)
	}
	return nil
}

// verify checks that pid's unified path is this group.
func (g *v2Group) verify(pid int) error {
	_, u, err := readProcCgroup(pid)
	if err != nil {
		return opErr("verify placement", "", "", ErrPlacement, err)
	}
	return g.check(pid, u)
}

// check compares pid's unified path (from /proc/<pid>/cgroup) with the group's.
func (g *v2Group) check(pid int, u string) error {
	if u != "/"+g.rel {
		return opErr("verify placement", "", "", ErrPlacement, fmt.Errorf("pid %d is in 0::%s, want /%s", pid, u, g.rel))
	}
	return nil
}

// kill SIGKILLs every process in the group atomically with respect to fork (kernel ≥ 5.14).
func (g *v2Group) kill() error {
	p := filepath.Join(g.dir, "cgroup.kill")
	if err := os.WriteFile(p, []byte("1"), 0); err != nil {
		return opErr("cgroup.kill", "", p, nil, err)
	}
	return nil
}

// populated reads cgroup.events; a missing directory counts as empty.
func (g *v2Group) populated() (bool, error) {
	v, err := readKey(filepath.Join(g.dir, "cgroup.events"), "populated")
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return v != 0, err
}

func (g *v2Group) procs() ([]int, error) { return readPids(filepath.Join(g.dir, "cgroup.procs")) }

// counterFile is the file of counter i (see counterCharge): pids.current, the oom_kill line of
// memory.events (which counts kills in the whole subtree), memory.peak.
func (g *v2Group) counterFile(i int) string {
	switch i {
	case counterCharge:
		return filepath.Join(g.dir, "pids.current")
	case counterOOM:
		return filepath.Join(g.dir, "memory.events")
	}
	return filepath.Join(g.dir, "memory.peak")
}

func (g *v2Group) remove() error {
	if g.fd != nil {
		_ = g.fd.Close()
		g.fd = nil
	}
	if err := rmdirCgroup(g.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return opErr("remove cgroup", "", g.dir, nil, err)
	}
	return nil
}
