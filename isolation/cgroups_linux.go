package isolation

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// domainCgroups is one domain's cgroups in the layout of its mode:
//
//	ModeV2:     v2 (limits, birth placement, cgroup.kill)
//	ModeHybrid: v1 memory+pids (limits) + v2 in the controller-less unified hierarchy
//	ModeV1:     v1 memory+pids+freezer
type domainCgroups struct {
	mode    Mode
	v1      *v1Group
	v2      *v2Group
	mem     int64 // limits as read back
	swap    int64
	pids    int64
	limits  []DomainLimit // what was written and read back, and what the mode lacks
	oomBase int64
	cnt     counterFiles
}

// newDomainCgroups creates sub (owner/domain) below t's parent in each hierarchy of mode.
func newDomainCgroups(mode Mode, t tree, sub string, mem, pids int64) (_ *domainCgroups, retErr error) {
	// The cleanup holds its own reference: a named result would be nil by the time an error
	// return runs it.
	c := &domainCgroups{mode: mode}
	defer func() {
		if retErr != nil {
			_ = c.remove()
		}
	}()
	var err error
	switch mode {
	case ModeV2:
		mount := unifiedMount()
		if mount == "" {
			return nil, opErr("create cgroups", mode, "", nil, errors.New("no cgroup2 hierarchy mounted"))
		}
		if c.v2, err = newV2Group(mount, t.rel(hUnified, sub), t.enable[hUnified], true, t.changes); err != nil {
			return nil, err
		}
		var l limitsRead
		l, err = c.v2.setLimits(mem, pids)
		c.mem, c.swap, c.pids, c.limits = l.mem, l.swap, l.pids, l.list
	case ModeHybrid, ModeV1:
		ctrls := []string{hMemory, hPids}
		if mode == ModeV1 {
			ctrls = append(ctrls, hFreezer)
		}
		if c.v1, err = newV1Group(t, sub, ctrls); err != nil {
			return nil, err
		}
		if mode == ModeHybrid {
			if c.v2, err = newV2Group(unifiedMount(), t.rel(hUnified, sub), "", false, t.changes); err != nil {
				return nil, err
			}
		}
		var l limitsRead
		l, err = c.v1.setLimits(mem, pids)
		c.mem, c.swap, c.pids, c.limits = l.mem, l.swap, l.pids, l.list
	default:
		return nil, opErr("create cgroups", mode, "", ErrInvalidSpec, fmt.Errorf("unknown mode %q", mode))
	}
	if err != nil {
		return nil, withMode(err, mode)
	}
	// A directory this call created counts from 0; one that was there (a leftover of the same
	// name) is read for its base.
	if !c.fresh() {
		c.oomBase, _ = c.oomKills()
	}
	c.openCounters()
	return c, nil
}

func withMode(err error, mode Mode) error {
	var e *Error
	if errors.As(err, &e) && e.Mode == "" {
		e.Mode = mode
	}
	return err
}

// fresh: every directory was created for this domain, none found in place.
func (c *domainCgroups) fresh() bool {
	return (c.v1 == nil || c.v1.fresh) && (c.v2 == nil || c.v2.fresh)
}

// bornFD returns the cgroup2 directory fd a child can be cloned into, if the mode has one.
func (c *domainCgroups) bornFD() (int, bool) {
	if c.v2 == nil {
		return -1, false
	}
	return c.v2.cgroupFD(), true
}

// needsBarrier: v1 hierarchies cannot take a child at birth (CLONE_INTO_CGROUP gives EBADF for
// a v1 fd), so the child must wait until it has been written into them.
func (c *domainCgroups) needsBarrier() bool { return c.v1 != nil }

// enterSelf moves the calling (locked) thread into the v1 groups, if any, so that the child it
// forks next is born in them; leave moves it back. leave is nil when there is nothing to enter
// or entering failed (the child is then attached after birth); err only when the thread could
// not get back (errThreadStuck).
func (c *domainCgroups) enterSelf() (leave func() error, err error) {
	if c.v1 == nil {
		return nil, nil
	}
	leave, err = c.v1.enterSelf()
	if errors.Is(err, errThreadStuck) {
		return nil, withMode(err, c.mode)
	}
	return leave, nil
}

// place puts pid into the v1 groups and the unified one (if any; unless it was born in them)
// and verifies every membership in /proc/<pid>/cgroup, read once for all hierarchies.
func (c *domainCgroups) place(pid int, bornV1, bornV2 bool) error {
	if c.v1 != nil && !bornV1 {
		if err := c.v1.write(pid); err != nil {
			return withMode(err, c.mode)
		}
	}
	if c.v2 != nil && !bornV2 {
		if err := c.v2.write(pid); err != nil {
			return withMode(err, c.mode)
		}
	}
	v1, unified, err := readProcCgroup(pid)
	if err != nil {
		return withMode(opErr("verify placement", "", "", ErrPlacement, err), c.mode)
	}
	if c.v1 != nil {
		if err := c.v1.check(pid, v1); err != nil {
			return withMode(err, c.mode)
		}
	}
	if c.v2 != nil {
		if err := c.v2.check(pid, unified); err != nil {
			return withMode(err, c.mode)
		}
	}
	return nil
}

// member reports whether a live pid is in this domain. For zombies only the unified path is
// meaningful (v1 shows "/" for an exited task), so member is false for v1-only zombies.
func (c *domainCgroups) member(pid int) bool {
	if c.v2 != nil {
		p, ok := procCgroupPath(pid, "")
		return ok && p == "/"+c.v2.rel
	}
	p, ok := procCgroupPath(pid, hPids)
	return ok && p == "/"+c.v1.rels[hPids]
}

func (c *domainCgroups) procs() ([]int, error) {
	if c.v2 != nil {
		return c.v2.procs()
	}
	return c.v1.procs()
}

// released reports that the domain's pids controller charges nothing: it charges a task from
// its fork until it is released (reaped), so none of the domain's processes is alive or
// unreaped anywhere, zombies and those re-parented out of sight included. False when the
// counter cannot be read.
func (c *domainCgroups) released() bool {
	b, err := c.readCounter(counterCharge)
	if err != nil {
		return false
	}
	n, err := parseInt(b)
	return err == nil && n == 0
}

// The counters of a domain, read on the answer's path once its worker has exited.
const (
	counterCharge = iota // tasks charged to its pids controller, until reaped
	counterOOM           // OOM kills
	counterPeak          // peak memory
	nCounters
)

// counterFiles are a domain's counters, opened with it: a cgroup file's open (a path walk
// through kernfs) costs about ten times its read (14 µs against 1.5 µs hot, measured; more on
// the answer's path, right after the worker's exit), so a domain preads them there.
type counterFiles struct {
	mu    sync.RWMutex // reads against close: a closed descriptor's number may be reused
	fds   [nCounters]int
	open  [nCounters]bool
	paths [nCounters]string // of the open ones, for their errors
}

// counterFile is where counter i is kept in the domain's mode: with the memory limit.
func (c *domainCgroups) counterFile(i int) string {
	if c.v1 != nil && c.mode != ModeV2 {
		return c.v1.counterFile(i)
	}
	if c.v2 != nil {
		return c.v2.counterFile(i)
	}
	return ""
}

// openCounters opens the counters' files; one that does not open (memory.peak before Linux
// 5.19) is read by its path, and fails there as it would have.
func (c *domainCgroups) openCounters() {
	for i := range nCounters {
		if p := c.counterFile(i); p != "" {
			if fd, err := openFile(p, unix.O_RDONLY); err == nil {
				c.cnt.fds[i], c.cnt.open[i], c.cnt.paths[i] = fd, true, p
			}
		}
	}
}

// readCounter reads counter i whole.
func (c *domainCgroups) readCounter(i int) ([]byte, error) {
	c.cnt.mu.RLock()
	defer c.cnt.mu.RUnlock()
	if c.cnt.open[i] {
		return readFD(c.cnt.fds[i], c.cnt.paths[i])
	}
	p := c.counterFile(i)
	if p == "" {
		return nil, ErrUnsupported
	}
	return readFile(p)
}

// closeCounters closes the counters' files; they are read by path from then on.
func (c *domainCgroups) closeCounters() { c.takeCounters()() }

// takeCounters hands the counters' open files over to the function it returns, which closes
// them once however often it is called: a kernfs file's release is work the answer need not
// wait for (see CloseHolding).
func (c *domainCgroups) takeCounters() (closeAll func()) {
	c.cnt.mu.Lock()
	defer c.cnt.mu.Unlock()
	var fds []int
	for i := range nCounters {
		if c.cnt.open[i] {
			fds = append(fds, c.cnt.fds[i])
			c.cnt.open[i] = false
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, fd := range fds {
				_ = unix.Close(fd) // a second close could hit a descriptor reused since
			}
		})
	}
}

// populated: any live task left. Unified has a flag for it; v1 has only the task list.
func (c *domainCgroups) populated() bool {
	if c.v2 != nil {
		p, err := c.v2.populated()
		return err != nil || p
	}
	pids, err := c.v1.procs()
	return err != nil || len(pids) > 0
}

// killOnce SIGKILLs everything in the domain: cgroup.kill where there is a unified cgroup,
// otherwise one freeze → kill → thaw round. mark pins and records each pid for the reaper, and
// its zombie children when zombieKids is set.
func (c *domainCgroups) killOnce(ctx context.Context, mark func(pid int, zombieKids bool) (int, bool)) error {
	if c.v2 != nil {
		return withMode(c.v2.kill(), c.mode)
	}
	return c.v1.freezeKillThaw(ctx, mark)
}

// oomKills reads the OOM kill counter of whichever hierarchy holds the memory limit.
func (c *domainCgroups) oomKills() (int64, error) {
	b, err := c.readCounter(counterOOM)
	if err != nil {
		return 0, err
	}
	return parseKey(b, "oom_kill", c.counterFile(counterOOM))
}

func (c *domainCgroups) oomKilled() bool {
	n, err := c.oomKills()
	return err == nil && n > c.oomBase
}

func (c *domainCgroups) peak() int64 {
	b, err := c.readCounter(counterPeak)
	if err != nil {
		return 0
	}
	v, _ := parseInt(b)
	return v
}

// remove deletes every directory, one hierarchy beside the other (each rmdir is 25–90 µs of
// the answer's path, the memory controller's the longest); safe to call more than once.
func (c *domainCgroups) remove() error {
	c.closeCounters()
	var rm []func() error
	if c.v2 != nil {
		rm = append(rm, c.v2.remove)
	}
	if c.v1 != nil {
		rm = append(rm, c.v1.removers()...)
	}
	return allAtOnce(rm)
}

// allAtOnce runs fs side by side (the first on the calling goroutine) and joins their errors.
func allAtOnce(fs []func() error) error {
	if len(fs) == 0 {
		return nil
	}
	errs := make([]error, len(fs))
	var wg sync.WaitGroup
	for i, f := range fs[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i+1] = f()
		}()
	}
	errs[0] = fs[0]()
	wg.Wait()
	return errors.Join(errs...)
}
