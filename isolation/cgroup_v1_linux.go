package isolation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"
)

const v1Root = "/sys/fs/cgroup"

// v1Group is one domain's directories in the v1 hierarchies it uses (memory, pids and, when
// it kills through the freezer, freezer). Only these hierarchies: containerd's default v1
// hierarchy also creates parents in named hierarchies and leaves them behind.
type v1Group struct {
	rels        map[string]string // controller → path relative to its hierarchy root
	dirs        map[string]string // controller → absolute directory
	controllers []string          // creation order
	fresh       bool              // every directory was created by newV1Group (counters start at 0)
	// killed: a round froze the whole group and SIGKILLed every task. None can fork after that
	// (fork fails with a fatal signal pending), so no process of the domain is unknown to the
	// tracker: later rounds only catch stragglers and need no zombie-children listing.
	killed bool
}

func v1Mounted(controller string) bool {
	_, err := os.Stat(filepath.Join(v1Root, controller, "cgroup.procs"))
	return err == nil
}

// newV1Group creates sub below t's parent in each controller's hierarchy. On error nothing it
// created remains.
func newV1Group(t tree, sub string, controllers []string) (_ *v1Group, retErr error) {
	g := &v1Group{rels: map[string]string{}, dirs: map[string]string{}}
	defer func() {
		if retErr != nil {
			_ = g.remove()
		}
	}()
	g.fresh = true
	for _, c := range controllers {
		g.rels[c] = t.rel(c, sub)
		dir := filepath.Join(v1Root, c, g.rels[c])
		fresh, err := mkdirCgroup(dir, t.changes)
		if err != nil {
			return nil, opErr("create cgroup", "", dir, nil, err)
		}
		g.fresh = g.fresh && fresh
		g.dirs[c] = dir
		g.controllers = append(g.controllers, c)
	}
	return g, nil
}

// setLimits writes the memory limit, swap off (memsw where the kernel accounts swap),
// swappiness 0 and the pids limit, reading each back (a limit that reads back otherwise fails
// the domain: ErrLimitMismatch). v1 has no group OOM kill: it is listed as not enforced.
func (g *v1Group) setLimits(mem, pids int64) (l limitsRead, err error) {
	md := g.dirs["memory"]
	if l.mem, err = writeReadInt(md, "memory.limit_in_bytes", mem, pageSlack); err != nil {
		return
	}
	l.add(LimitMemory, "memory.limit_in_bytes", l.mem, true, readBack("memory.limit_in_bytes", l.mem))
	// memsw bounds memory+swap: equal to the memory limit means no swap. The file exists only
	// with swap accounting; without it there is nothing to bound.
	if hasMemsw(md) {
		var sw int64
		if sw, err = writeReadInt(md, "memory.memsw.limit_in_bytes", mem, pageSlack); err != nil {
			return
		}
		l.swap = sw - l.mem
		l.add(LimitSwapOff, "memory.memsw.limit_in_bytes", sw, true, readBack("memory.memsw.limit_in_bytes", sw)+" (memory+swap = memory: no swap)")
	} else {
		l.swapUnbounded("memory.memsw.limit_in_bytes")
	}
	// Swappiness 0 keeps the domain's reclaim off swap; memsw is the bound. A kernel that
	// refuses the write leaves the domain at the default, which is reported, not fatal.
	if v, serr := writeReadInt(md, "memory.swappiness", 0, 0); serr != nil {
		l.add(LimitSwappiness, "memory.swappiness", v, false, "not enforced: "+serr.Error())
	} else {
		l.add(LimitSwappiness, "memory.swappiness", v, true, readBack("memory.swappiness", v))
	}
	l.add(LimitOOMGroup, "", 0, false, "cgroup v1 has no group OOM kill: an OOM kill takes one process; the kill ladder takes the rest when the worker ends")
	if l.pids, err = writeReadInt(g.dirs["pids"], "pids.max", pids, 0); err != nil {
		return
	}
	l.add(LimitPids, "pids.max", l.pids, true, readBack("pids.max", l.pids))
	return
}

// write moves pid into every hierarchy of the group (domainCgroups.place then verifies it).
func (g *v1Group) write(pid int) error {
	for _, c := range g.controllers {
		f := filepath.Join(g.dirs[c], "cgroup.procs")
		if err := writeFile(f, strconv.Itoa(pid)); err != nil {
			return opErr("attach", "", f, ErrPlacement, err)
		}
	}
	return nil
}

// enterSelf moves the calling OS thread, alone, into every directory of the group, so that a
// child it forks is born there, and returns leave, which moves the thread back to where it
// was. It is for a thread locked to its goroutine, between which and leave nothing but the
// fork runs. A thread moving itself (writing "0" to tasks) skips the global
// cgroup_threadgroup_rwsem that moving another process by pid takes for writing: the RCU grace
// period behind the 1–10 ms tail of an attach (BASELINES §2), paid while the child's runtime
// starts its threads. On error the thread is where it was (or leave failed: see its error).
func (g *v1Group) enterSelf() (leave func() error, err error) {
	// The way back is open before the thread leaves: the write permission is checked at
	// open, and a thread that could not leave would stay listed in the domain.
	back, err := homeTasks(g.controllers)
	if err != nil {
		return nil, err
	}
	leave = func() error { return goHome(back) }
	for i, c := range g.controllers {
		f := filepath.Join(g.dirs[c], "tasks")
		if err := writeFile(f, "0"); err != nil {
			if lerr := goHome(back[:i]); lerr != nil { // not entered past i: nothing to undo there
				return nil, fmt.Errorf("%w: %w (%w)", errThreadStuck, lerr, err)
			}
			return nil, opErr("enter cgroup", "", f, ErrPlacement, err)
		}
	}
	return leave, nil
}

// home holds, per v1 controller, the tasks file of the cgroup this process's threads live in,
// opened once (reading /proc/thread-self/cgroup and opening the files was ≈0.1 ms of every
// launch). A launcher thread leaves a domain by writing "0" there.
var home struct {
	mu    sync.Mutex
	tasks map[string]homeFile
}

type homeFile struct {
	fd   int
	path string
}

// homeTasks returns the home tasks files of controllers, opening the missing ones from the
// calling thread's own cgroups.
func homeTasks(controllers []string) ([]homeFile, error) {
	home.mu.Lock()
	defer home.mu.Unlock()
	var mine map[string]string
	out := make([]homeFile, 0, len(controllers))
	for _, c := range controllers {
		f, ok := home.tasks[c]
		if !ok {
			if mine == nil {
				var err error
				if mine, _, err = cgroups.ParseCgroupFileUnified("/proc/thread-self/cgroup"); err != nil {
					return nil, err
				}
			}
			p, ok := mine[c]
			if !ok {
				return nil, fmt.Errorf("isolation: thread has no %s cgroup", c)
			}
			path := filepath.Join(v1Root, c, p, "tasks")
			fd, err := openFile(path, unix.O_WRONLY)
			if err != nil {
				return nil, err
			}
			if home.tasks == nil {
				home.tasks = map[string]homeFile{}
			}
			f = homeFile{fd: fd, path: path}
			home.tasks[c] = f
		}
		out = append(out, f)
	}
	return out, nil
}

// goHome moves the calling thread back into each home cgroup. A home file that fails is
// forgotten, so the next launch looks its cgroup up again (the process may have been moved);
// it is not closed, as another launch may be writing to it (a number reused by a later open
// would take that write).
func goHome(back []homeFile) error {
	var errs []error
	for _, f := range back {
		if err := writeFD(f.fd, f.path, "0"); err != nil {
			errs = append(errs, opErr("leave cgroup", "", f.path, ErrPlacement, err))
			home.mu.Lock()
			for c, h := range home.tasks {
				if h == f {
					delete(home.tasks, c)
				}
			}
			home.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// errThreadStuck: a launcher thread could not leave a domain's v1 cgroups. It must not run
// anything else: its goroutine ends locked, so the runtime ends the thread.
var errThreadStuck = errors.New("isolation: launcher thread could not leave the domain's cgroups")

func (g *v1Group) verify(pid int) error {
	v1, _, err := readProcCgroup(pid)
	if err != nil {
		return opErr("verify placement", "", "", ErrPlacement, err)
	}
	return g.check(pid, v1)
}

// check compares pid's v1 paths (from /proc/<pid>/cgroup) with the group's.
func (g *v1Group) check(pid int, v1 map[string]string) error {
	for _, c := range g.controllers {
		if v1[c] != "/"+g.rels[c] {
			return opErr("verify placement", "", "", ErrPlacement,
				fmt.Errorf("pid %d is in %s:%s, want /%s", pid, c, v1[c], g.rels[c]))
		}
	}
	return nil
}

// procs lists the thread-group ids in the pids hierarchy (every domain process is there).
func (g *v1Group) procs() ([]int, error) {
	return readPids(filepath.Join(g.dirs["pids"], "cgroup.procs"))
}

// killTaskOwners SIGKILLs every process with a task (any thread) listed in one of the group's
// directories and reports whether any was listed. It is for a dead owner's domain, whose v1
// groups may hold a thread of a process that is not the domain's worker (its launcher, which
// enters them to fork): membership by /proc/<pid>/cgroup, which shows the leader's groups, would
// miss it. Each process is pinned by a pidfd before its thread is proven to be in the group.
func (g *v1Group) killTaskOwners() bool {
	listed := false
	signalled := map[int]bool{} // a task is listed in every hierarchy it entered
	for _, c := range g.controllers {
		tids, err := readPids(filepath.Join(g.dirs[c], "tasks"))
		if err != nil {
			continue // gone, or unreadable: its rmdir reports it
		}
		for _, tid := range tids {
			listed = true
			if signalled[tid] {
				continue
			}
			tgid, err := tgidOf(tid)
			if err != nil {
				continue // exited since the listing
			}
			fd, err := pidfdOpen(tgid)
			if err != nil {
				continue
			}
			p, ok := cgroupPathIn("/proc/"+strconv.Itoa(tgid)+"/task/"+strconv.Itoa(tid)+"/cgroup", c)
			if ok && p == "/"+g.rels[c] {
				_ = pidfdSignal(fd, unix.SIGKILL)
				signalled[tid] = true
			}
			unix.Close(fd)
		}
	}
	return listed
}

// freezeKillThaw sends SIGKILL to everything in the group once, through the freezer so that no
// task can fork between the listing and the signal. The v1 freezer can stall in FREEZING while
// tasks fork (vfork parents), and it only freezes tasks present at write time, so FROZEN is
// re-written until it holds. Each pid is signalled through a pidfd after
// checking it is still in the group; mark records every process seen for the reaper, with its
// zombie children when the group may hold any (see zombiesPossible).
func (g *v1Group) freezeKillThaw(ctx context.Context, mark func(pid int, zombieKids bool) (int, bool)) error {
	state := filepath.Join(g.dirs["freezer"], "freezer.state")
	deadline := time.Now().Add(time.Second)
	frozen := false
	// Re-write at once a few times, then leave the CPU to the tasks that must reach the
	// refrigerator (2 cores shared with them), re-writing every 20–200 µs.
	for i, pause := 0, 20*time.Microsecond; !frozen; i++ {
		if err := writeFile(state, "FROZEN"); err != nil {
			return opErr("freeze", ModeV1, state, nil, err)
		}
		b, err := readFile(state)
		if err != nil {
			return opErr("freeze", ModeV1, state, nil, err)
		}
		frozen = strings.TrimSpace(string(b)) == "FROZEN"
		if time.Now().After(deadline) || ctx.Err() != nil {
			break // past the deadline, kill what is there: a pidfd signal is still safe
		}
		if !frozen && i >= 8 {
			time.Sleep(pause)
			pause = min(2*pause, 200*time.Microsecond)
		}
	}
	zombies := !g.killed && (!frozen || g.zombiesPossible())
	pids, err := readPids(filepath.Join(g.dirs["freezer"], "cgroup.procs"))
	for _, pid := range pids {
		if fd, ok := mark(pid, zombies); ok {
			_ = pidfdSignal(fd, 9)
		}
	}
	g.killed = g.killed || (frozen && err == nil)
	if thawErr := writeFile(state, "THAWED"); thawErr != nil && err == nil {
		err = opErr("thaw", ModeV1, state, nil, thawErr)
	}
	return err
}

// zombiesPossible reports whether the frozen group may have exited, unreaped members. v1 lists
// no zombie (its /proc/<pid>/cgroup reads "/"), so such a process can be attributed to the
// domain only through its parent's children files, which costs a directory and a file per
// thread of every process. The pids controller keeps charging a task until it is released
// (reaped), while the tasks file lists live tasks only: pids.current read first, then equal to
// the number of tasks listed, proves there is none. Frozen tasks cannot fork; one exiting
// between the two reads only lowers the second count, so a zombie is never hidden by it.
func (g *v1Group) zombiesPossible() bool {
	dir := g.dirs["pids"]
	charged, err := readInt(filepath.Join(dir, "pids.current"))
	if err != nil {
		return true
	}
	b, err := os.ReadFile(filepath.Join(dir, "tasks"))
	if err != nil {
		return true
	}
	return int64(len(strings.Fields(string(b)))) != charged
}

// counterFile is the file of counter i (see counterCharge): pids.current, the oom_kill line of
// memory.oom_control (kernel ≥ 4.13), memory.max_usage_in_bytes.
func (g *v1Group) counterFile(i int) string {
	switch i {
	case counterCharge:
		return filepath.Join(g.dirs["pids"], "pids.current")
	case counterOOM:
		return filepath.Join(g.dirs["memory"], "memory.oom_control")
	}
	return filepath.Join(g.dirs["memory"], "memory.max_usage_in_bytes")
}

// remove deletes the group's directories; already-absent ones are fine.
func (g *v1Group) remove() error { return allAtOnce(g.removers()) }

// removers are the rmdirs of remove, one per hierarchy.
func (g *v1Group) removers() []func() error {
	rm := make([]func() error, 0, len(g.controllers))
	for _, c := range g.controllers {
		dir := g.dirs[c]
		rm = append(rm, func() error {
			if err := rmdirCgroup(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
				return opErr("remove cgroup", "", dir, nil, err)
			}
			return nil
		})
	}
	return rm
}

// --- small file helpers shared by both hierarchies ---

const pageSlack = 4096 // the kernel rounds memory limits to pages

// The cgroup files are read and written with plain system calls: os.File would register each
// one with the runtime poller (kernfs files are pollable) and stat it, doubling the calls of
// the few dozen file operations a launch makes.

// sysRetry retries f while it fails with EINTR.
func sysRetry(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

func openFile(p string, flags int) (int, error) {
	var fd int
	err := sysRetry(func() (err error) { fd, err = unix.Open(p, flags|unix.O_CLOEXEC, 0); return })
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return fd, nil
}

// writeFile writes s to the cgroup file p in one write(2).
func writeFile(p, s string) error {
	fd, err := openFile(p, unix.O_WRONLY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return writeFD(fd, p, s)
}

func writeFD(fd int, p, s string) error {
	var n int
	err := sysRetry(func() (err error) { n, err = unix.Write(fd, []byte(s)); return })
	switch {
	case err != nil:
		return &os.PathError{Op: "write", Path: p, Err: err}
	case n != len(s):
		return &os.PathError{Op: "write", Path: p, Err: io.ErrShortWrite}
	}
	return nil
}

// readFile reads the cgroup file p whole.
func readFile(p string) ([]byte, error) {
	fd, err := openFile(p, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readFD(fd, p)
}

// readFD reads fd from offset 0 to EOF.
func readFD(fd int, p string) ([]byte, error) {
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		var n int
		err := sysRetry(func() (err error) { n, err = unix.Pread(fd, buf[len(buf):cap(buf)], int64(len(buf))); return })
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: p, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// mkdirCgroup creates dir (and missing parents, each recorded in j); fresh reports that dir
// itself did not exist.
func mkdirCgroup(dir string, j *changes) (fresh bool, err error) {
	err = sysRetry(func() error { return unix.Mkdir(dir, 0o755) })
	switch {
	case err == nil:
		j.mkdir(dir)
		return true, nil
	case errors.Is(err, unix.EEXIST):
		return false, nil
	case errors.Is(err, unix.ENOENT) && dir != filepath.Dir(dir):
		if _, err := mkdirCgroup(filepath.Dir(dir), j); err != nil {
			return false, err
		}
		return mkdirCgroup(dir, j)
	}
	return false, &os.PathError{Op: "mkdir", Path: dir, Err: err}
}

func rmdirCgroup(dir string) error {
	if err := sysRetry(func() error { return unix.Rmdir(dir) }); err != nil {
		return &os.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}

// memsw is whether v1 memory cgroups have memory.memsw.* (swap accounting): a property of the
// kernel and its boot options, looked up once.
var memsw struct {
	once sync.Once
	ok   bool
}

func hasMemsw(memDir string) bool {
	memsw.once.Do(func() {
		_, err := os.Stat(filepath.Join(memDir, "memory.memsw.limit_in_bytes"))
		memsw.ok = err == nil
	})
	return memsw.ok
}

// writeReadInt writes v to dir/file and reads it back through the same descriptor.
func writeReadInt(dir, file string, v, slack int64) (int64, error) {
	p := filepath.Join(dir, file)
	fd, err := openFile(p, unix.O_RDWR)
	if err != nil {
		return 0, opErr("write "+file, "", p, nil, err)
	}
	defer unix.Close(fd)
	if err := writeFD(fd, p, strconv.FormatInt(v, 10)); err != nil {
		return 0, opErr("write "+file, "", p, nil, err)
	}
	b, err := readFD(fd, p)
	var rb int64
	if err == nil {
		rb, err = parseInt(b)
	}
	if err != nil {
		return 0, opErr("read back "+file, "", p, nil, err)
	}
	if d := rb - v; d > slack || d < -slack {
		return rb, opErr("read back "+file, "", p, ErrLimitMismatch, fmt.Errorf("wrote %d, read %d", v, rb))
	}
	return rb, nil
}

// readInt parses a single-number cgroup file; "max" reads as -1.
func readInt(p string) (int64, error) {
	b, err := readFile(p)
	if err != nil {
		return 0, err
	}
	return parseInt(b)
}

func parseInt(b []byte) (int64, error) {
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// readKey reads "key value" lines (memory.events, memory.oom_control, pids.events).
func readKey(p, key string) (int64, error) {
	b, err := readFile(p)
	if err != nil {
		return 0, err
	}
	return parseKey(b, key, p)
}

// parseKey finds key's value in "key value" lines read from the file p.
func parseKey(b []byte, key, p string) (int64, error) {
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %q", p, key)
}

func readPids(p string) ([]int, error) {
	b, err := readFile(p)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, s := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(s); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}
