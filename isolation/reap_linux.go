package isolation

import (
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// tracker knows which processes belong to one domain and reaps those that became children of
// this process (the supervisor is a child subreaper, so orphans of the domain re-parent here).
//
// It never calls wait on "any child": that would steal exit statuses from other children of
// the process (other workers, go-plugin, os/exec users). A process is reaped only through a
// pidfd opened for it after proving it is in this domain: by its unified cgroup path (which a
// zombie keeps), or, in v1-only mode, because it was seen in the frozen cgroup or is a zombie
// child of a process that was.
type tracker struct {
	cg      *domainCgroups
	mainPid int          // reaped by os.Process.Wait in the launcher goroutine, never here
	members map[int]int  // pid → pidfd
	exited  map[int]bool // members whose pidfd reported the exit (not yet reaped: not our child yet)
	events  int          // cgroup.events of the unified cgroup, opened by the first wait; 0 = none
	pollfds []unix.PollFd
}

func newTracker(cg *domainCgroups, mainPid int) *tracker {
	return &tracker{cg: cg, mainPid: mainPid, members: map[int]int{}, exited: map[int]bool{}}
}

// mark pins pid with a pidfd if it is in the domain and returns the fd. Membership is checked
// after opening the pidfd, so the fd cannot refer to an unrelated process that reused the pid.
// In v1-only mode it also records pid's zombie children when zombieKids is set: the caller
// clears it only when it proved the domain holds no zombie (v1Group.zombiesPossible).
func (t *tracker) mark(pid int, zombieKids bool) (int, bool) {
	zombieKids = zombieKids && t.cg.v2 == nil
	if fd, ok := t.members[pid]; ok {
		if zombieKids {
			t.markZombieChildren(pid) // it may have gained exited children since
		}
		return fd, true
	}
	fd, err := pidfdOpen(pid)
	if err != nil {
		return -1, false
	}
	if !t.cg.member(pid) {
		unix.Close(fd)
		return -1, false
	}
	t.members[pid] = fd
	if zombieKids {
		t.markZombieChildren(pid)
	}
	return fd, true
}

// markZombieChildren records the children of a domain process, including exited and exiting
// ones: in v1 those no longer show the domain's path, yet they re-parent to us when their
// parent is killed. Called while the domain is frozen, the list is complete.
func (t *tracker) markZombieChildren(parent int) {
	for _, c := range childrenOf(parent) {
		if _, ok := t.members[c]; ok {
			continue
		}
		fd, err := pidfdOpen(c)
		if err != nil {
			continue
		}
		if st, err := readProcStat(c); err != nil || st.ppid != parent {
			unix.Close(fd)
			continue
		}
		t.members[c] = fd
	}
}

// sweep marks every process currently listed in the domain's cgroup.
func (t *tracker) sweep() {
	pids, _ := t.cg.procs()
	for _, pid := range pids {
		t.mark(pid, true)
	}
}

// signal sends sig to every process in the domain, each through its pidfd.
func (t *tracker) signal(sig unix.Signal) {
	pids, _ := t.cg.procs()
	for _, pid := range pids {
		if fd, ok := t.mark(pid, true); ok {
			_ = pidfdSignal(fd, sig)
		}
	}
}

// reapOnce reaps what it can without blocking and returns how many known members are left.
// Once wait has watched a member's pidfd, the member is tried only after the pidfd reported
// its exit: a running process has nothing to reap.
func (t *tracker) reapOnce() int {
	if t.cg.v2 != nil {
		t.adoptZombies()
	}
	left := 0
	for pid, fd := range t.members {
		if t.watched(pid) && !t.exited[pid] {
			left++
			continue
		}
		if pid == t.mainPid {
			// Reaped only by its own Wait; once that happened the pidfd can no longer signal.
			if unix.PidfdSendSignal(fd, 0, nil, 0) == unix.ESRCH {
				t.forget(pid)
			}
			continue
		}
		reaped, gone, err := pidfdReap(fd)
		if err == nil && (reaped || gone) {
			t.forget(pid)
			continue
		}
		left++
	}
	return left
}

func (t *tracker) forget(pid int) {
	unix.Close(t.members[pid])
	delete(t.members, pid)
	delete(t.exited, pid)
}

// watched: wait has polled pid's pidfd (the exited flag is meaningful only then).
func (t *tracker) watched(pid int) bool {
	_, ok := t.exited[pid]
	return ok
}

// wait blocks until a running member exits, the unified cgroup's cgroup.events changes (the
// populated flag), or timeout passes, and reports whether an event woke it; the ladder sleeps
// on these events, not on a timer. A
// pidfd becomes readable when its process exits; a member that exited is left out of later
// polls (its pidfd stays readable) until reapOnce can reap it.
func (t *tracker) wait(timeout time.Duration) bool {
	t.pollfds = t.pollfds[:0]
	if t.cg.v2 != nil && t.events == 0 {
		t.events = -1
		if fd, err := unix.Open(filepath.Join(t.cg.v2.dir, "cgroup.events"), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			t.events = fd
			t.drainEvents()
		}
	}
	if t.events > 0 {
		t.pollfds = append(t.pollfds, unix.PollFd{Fd: int32(t.events), Events: unix.POLLPRI})
	}
	pids := make([]int, 0, len(t.members))
	for pid, fd := range t.members {
		if !t.exited[pid] {
			t.exited[pid] = false // watched from now on
			pids = append(pids, pid)
			t.pollfds = append(t.pollfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
	}
	ts := unix.NsecToTimespec(timeout.Nanoseconds())
	if n, err := unix.Ppoll(t.pollfds, &ts, nil); err != nil || n == 0 {
		return false
	}
	off := len(t.pollfds) - len(pids)
	if off == 1 && t.pollfds[0].Revents != 0 {
		t.drainEvents()
	}
	for i, pid := range pids {
		if t.pollfds[off+i].Revents != 0 {
			t.exited[pid] = true
		}
	}
	return true
}

// drainEvents reads cgroup.events through the polled fd: kernfs keeps it readable (POLLPRI)
// until it is read after a change.
func (t *tracker) drainEvents() {
	var buf [128]byte
	_, _ = unix.Pread(t.events, buf[:], 0)
}

// adoptZombies marks children of ours that are in this domain: zombies that exited before any
// sweep saw them, identified by the unified path a zombie keeps, and live ones (escapees
// re-parented to us), whose pidfds then wake wait when they exit.
func (t *tracker) adoptZombies() {
	kids, _ := ownChildren()
	for _, pid := range kids {
		if _, ok := t.members[pid]; ok || pid == t.mainPid {
			continue
		}
		t.mark(pid, false)
	}
}

// survivors counts processes of the domain alive or unreaped: the cgroup's task list, unreaped
// members, and children of ours that are in the domain. That last set is enough to find every
// straggler, including one that left the cgroup but has not finished exiting: a parent cannot
// be reaped before its children are re-parented, so each unreaped domain process has a chain
// of unreaped domain ancestors that ends at one of our children. (The main process is
// excluded once its own Wait reaped it.)
func (t *tracker) survivors() int {
	seen := map[int]bool{}
	if pids, err := t.cg.procs(); err == nil {
		for _, p := range pids {
			seen[p] = true
		}
	}
	for pid := range t.members {
		seen[pid] = true
	}
	kids, _ := ownChildren()
	for _, pid := range kids {
		if !seen[pid] && t.cg.member(pid) {
			seen[pid] = true
		}
	}
	return len(seen)
}

func (t *tracker) close() {
	for pid := range t.members {
		t.forget(pid)
	}
	if t.events > 0 {
		unix.Close(t.events)
	}
	t.events = 0
}
