package isolation

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The launcher forks contained workers for the supervisor.
//
// A contained worker is born in a new user namespace, whose id maps its parent writes while
// the child waits; Go cannot do that with CLONE_VM, so the supervisor's fork copied its whole
// address space: its page tables (≈0.55 ms of a sidecar's CPU a launch) and a write-protection
// of every page it had, which the sidecar then paid for page by page on its next call (≈290
// write faults a prestarted no-op, ≈0.2 ms of its answer). The launcher is a small process
// started once, from the worker executable, that does those forks instead: its own address
// space is a few megabytes, and the supervisor's is never copied.
//
// The worker stays the supervisor's child: the launcher forks with CLONE_PARENT, so the
// supervisor reaps it through its pidfd exactly as one it forked itself, and nothing about a
// domain's life depends on the launcher after the fork. Contained workers have no PDEATHSIG
// (their lifeline is the barrier pipe the supervisor holds), so the thread that is their
// parent does not matter. The launcher serves one request at a time on a SOCK_SEQPACKET pair:
// the child's descriptors travel with the request (SCM_RIGHTS), the pid comes back. It runs
// with the supervisor's credentials in the supervisor's cgroups, dies with it (PDEATHSIG), and
// exits when its socket closes.
//
// Only the modes with v1 groups use it (hybrid and v1). CLONE_PARENT rules out CLONE_INTO_CGROUP:
// clone3 refuses CLONE_PARENT with an exit signal, and Go's ForkExec always asks for SIGCHLD.
// A child is born in its v1 groups all the same (the launcher's forking thread enters them for
// the fork, as the supervisor's own does), and the hybrid mode's unified group, which holds no
// controller there, takes it after its birth, at the barrier (domainCgroups.place). On pure v2
// the memory and pids limits live in the unified group, and a child born outside it would run
// outside them until placed: there the supervisor forks its workers itself, born in their group.
//
// A child whose exec failed is a zombie of the supervisor whose pid the launcher never learns
// (Go's ForkExec returns none). The launcher's forking thread is named launcherComm, which such
// a child keeps (a successful exec renames it); reapStrays finds it by that name.

// EnvLauncher holds the launcher's socket descriptor: EnterWorker serves launches on it and
// exits instead of returning.
const EnvLauncher = "STEWARD_ISOLATION_LAUNCHER"

const (
	// maxLaunchRequest bounds a request (argv and env of one worker, JSON): well under the
	// default socket buffer (wmem_default, 208 KiB), which one SOCK_SEQPACKET message must fit
	// whole. A larger one is forked by the supervisor itself.
	maxLaunchRequest = 64 << 10
	maxLaunchFDs     = 64 // the child's files and its v1 tasks files
	maxLaunchReply   = 4 << 10
	// launchReplyWait bounds the wait for a reply: a launcher that does not answer by then is
	// killed, and the launch forked here.
	launchReplyWait = 30 * time.Second
)

// launcherComm names the launcher's forking thread, and so every child it forks until its exec.
const launcherComm = "steward-launch"

// launchRequest asks the launcher for one contained fork. fds[:Files] become the child's
// descriptors 0.. in order; the fds after those are the domain's v1 tasks files, one per
// controller in V1, which the launcher's forking thread enters for the fork so that the child
// is born in them.
type launchRequest struct {
	Path       string       `json:"path"`
	Argv       []string     `json:"argv"`
	Env        []string     `json:"env"`
	Files      int          `json:"files"`
	V1         []string     `json:"v1"`
	Cloneflags uintptr      `json:"cloneflags"`
	UID        int          `json:"uid"`
	GID        int          `json:"gid"`
	CPUs       *unix.CPUSet `json:"cpus,omitempty"` // the forking thread's affinity (nil: unchanged)
}

// launchReply is the launcher's answer. Err set: no worker runs; Forked: a child may have
// existed (its exec failed), a zombie of the supervisor; Unborn: nothing was forked, as the
// thread could not enter the domain's groups (the supervisor forks it itself). Stuck: the
// thread could not leave them, and the launcher exits after this reply.
type launchReply struct {
	Pid    int    `json:"pid"`
	Err    string `json:"err,omitempty"`
	Errno  int    `json:"errno,omitempty"`
	Forked bool   `json:"forked,omitempty"`
	Unborn bool   `json:"unborn,omitempty"`
	Stuck  bool   `json:"stuck,omitempty"`
}

// launcherEnv is added to the launcher's environment (tests: launcherDieAfterFork).
var launcherEnv []string

// launcherDieAfterFork, set to "1" in the launcher's environment, makes it exit right after its
// next fork, without answering: the crash the supervisor must clean up after (tests only).
const launcherDieAfterFork = "STEWARD_TEST_LAUNCHER_DIE_AFTER_FORK"

// errLauncher wraps a failure of the launcher itself (not of the launch it was asked for).
var errLauncher = errors.New("isolation: launcher")

// launcher is the supervisor's end of a running launcher.
type launcher struct {
	mu     sync.Mutex // one request at a time; guards sock and broken
	sock   int
	broken bool
	pid    int
	exited chan struct{} // closed once the launcher process was reaped
	forked atomic.Int64  // workers it forked
}

// startLauncher starts the launcher from cfg's worker executable. Its parent is a thread
// locked for the launcher's whole life (PDEATHSIG fires when the creating thread exits), which
// then reaps it.
func startLauncher(cfg Config) (*launcher, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: socketpair: %w", errLauncher, err)
	}
	theirs := os.NewFile(uintptr(pair[1]), "launcher")
	devnull, err := devNull()
	if err != nil {
		unix.Close(pair[0])
		theirs.Close()
		return nil, err
	}
	tv := unix.NsecToTimeval(launchReplyWait.Nanoseconds())
	if err := unix.SetsockoptTimeval(pair[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(pair[0])
		theirs.Close()
		return nil, fmt.Errorf("%w: reply timeout: %w", errLauncher, err)
	}
	l := &launcher{sock: pair[0], exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the launcher's reap
		defer close(l.exited)
		argv := append([]string{cfg.WorkerPath}, cfg.WorkerArgs...)
		p, err := os.StartProcess(cfg.WorkerPath, argv, &os.ProcAttr{
			Env:   append([]string{EnvLauncher + "=3"}, launcherEnv...),
			Files: []*os.File{devnull, devnull, os.Stderr, theirs},
			Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
		})
		theirs.Close()
		if err != nil {
			started <- err
			return
		}
		l.pid = p.Pid
		started <- nil
		_, _ = p.Wait()
	}()
	if err := <-started; err != nil {
		unix.Close(pair[0])
		return nil, fmt.Errorf("%w: start %s: %w", errLauncher, cfg.WorkerPath, err)
	}
	return l, nil
}

// close ends the launcher (its socket closes, it exits) and waits for its reap.
func (l *launcher) close() {
	l.mu.Lock()
	if l.sock >= 0 {
		unix.Close(l.sock)
		l.sock = -1
	}
	l.broken = true
	l.mu.Unlock()
	select {
	case <-l.exited:
	case <-time.After(5 * time.Second):
		_ = unix.Kill(l.pid, unix.SIGKILL) // not reaped, so the pid is still the launcher's
		<-l.exited
	}
}

// usable reports whether launches may still go through l.
func (l *launcher) usable() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.broken
}

// launch sends req with fds and returns the launcher's reply. An error wraps errLauncher: the
// launcher is then broken for good (the supervisor forks itself from then on).
func (l *launcher) launch(req launchRequest, fds []int) (launchReply, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return launchReply{}, fmt.Errorf("%w: encode request: %w", errLauncher, err)
	}
	if len(b) > maxLaunchRequest || len(fds) > maxLaunchFDs {
		// This launch's size, not the launcher's fault: the supervisor forks it itself, and
		// the launcher stays for the next.
		return launchReply{}, fmt.Errorf("%w: request of %d bytes and %d descriptors is over its bounds", errLauncher, len(b), len(fds))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken {
		return launchReply{}, fmt.Errorf("%w: not running", errLauncher)
	}
	fail := func(op string, err error) (launchReply, error) {
		// Broken for good, and stopped, so that it forks nothing more (the pid is still its
		// own: only its thread reaps it).
		l.broken = true
		_ = unix.Kill(l.pid, unix.SIGKILL)
		return launchReply{}, fmt.Errorf("%w: %s: %w", errLauncher, op, err)
	}
	if err := sysRetry(func() error { return unix.Sendmsg(l.sock, b, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL) }); err != nil {
		return fail("send request", err)
	}
	buf := make([]byte, maxLaunchReply)
	var n, flags int
	if err := sysRetry(func() (err error) { n, _, flags, _, err = unix.Recvmsg(l.sock, buf, nil, 0); return }); err != nil {
		return fail("read reply", err) // EAGAIN: no reply within launchReplyWait
	}
	if n == 0 {
		return fail("read reply", errors.New("launcher exited"))
	}
	if flags&unix.MSG_TRUNC != 0 {
		return fail("read reply", errors.New("reply too long"))
	}
	var rep launchReply
	if err := json.Unmarshal(buf[:n], &rep); err != nil {
		return fail("decode reply", err)
	}
	if rep.Stuck {
		l.broken = true // it exits after this reply
	}
	if rep.Err == "" && rep.Pid <= 0 {
		return fail("decode reply", fmt.Errorf("pid %d", rep.Pid))
	}
	return rep, nil
}

// err is the launch error a reply reports, its errno kept for errors.Is.
func (r launchReply) err() error {
	if r.Errno != 0 {
		return fmt.Errorf("%s: %w", r.Err, syscall.Errno(r.Errno))
	}
	return errors.New(r.Err)
}

// startVia is start through the launcher (see launcher): the child is born as start's would
// be (same attributes, on cpus, in the domain's v1 groups), as this process's child, and
// placed in a unified group after birth. An error wrapping errLauncher means nothing of the
// launch is left but what reapStrays finds: the caller forks the worker itself.
func (d *Domain) startVia(l *launcher, path string, argv []string, attr *os.ProcAttr, cg *domainCgroups, cpus *unix.CPUSet) (bornV1 bool, _ error) {
	req := launchRequest{Path: path, Argv: argv, Env: attr.Env, Files: len(attr.Files), V1: cg.v1.controllers,
		Cloneflags: attr.Sys.Cloneflags, UID: -1, GID: -1, CPUs: cpus}
	if m := attr.Sys.UidMappings; len(m) == 1 {
		req.UID = m[0].HostID
	}
	if m := attr.Sys.GidMappings; len(m) == 1 {
		req.GID = m[0].HostID
	}
	fds := make([]int, 0, len(attr.Files)+len(req.V1))
	for _, f := range attr.Files {
		fds = append(fds, int(f.Fd()))
	}
	for _, c := range req.V1 {
		fd, err := openFile(filepath.Join(cg.v1.dirs[c], "tasks"), unix.O_WRONLY)
		if err != nil {
			return false, fmt.Errorf("%w: %w", errLauncher, err)
		}
		defer unix.Close(fd)
		fds = append(fds, fd)
	}
	rep, err := l.launch(req, fds)
	runtime.KeepAlive(attr.Files)
	switch {
	case err != nil:
		return false, err
	case rep.Unborn:
		return false, fmt.Errorf("%w: %s", errLauncher, rep.Err)
	case rep.Err != "":
		if rep.Forked {
			reapFailed(rep.Pid)
			reapStrays(cg, l.pid) // anything else, should the launcher not have found it
		}
		return false, rep.err()
	}
	// The child is ours and unreaped, so its pid cannot have been reused: FindProcess's pidfd
	// is the child's.
	p, err := os.FindProcess(rep.Pid)
	if err != nil {
		return false, err
	}
	d.proc, d.pid, d.started = p, rep.Pid, time.Now()
	l.forked.Add(1)
	exit := exitNotice(rep.Pid)
	go func() {
		if exit != nil {
			awaitExit(exit)
		}
		d.reap()
	}()
	return true, nil
}

// reapStrays kills and reaps what a failed launch through launcher (its pid) may leave among
// this process's children: a zombie whose exec failed (still named launcherComm), or, from a
// launcher that died before it answered, a child alive in the domain's v1 groups (it was born
// there). Each is pinned by a pidfd before it is proven to be one, so a reused pid is never
// touched.
func reapStrays(cg *domainCgroups, launcher int) {
	self := os.Getpid()
	for _, pid := range childrenByPpid(self) {
		if pid == launcher { // named launcherComm too, and reaped by its own thread
			continue
		}
		fd, err := pidfdOpen(pid)
		if err != nil {
			continue
		}
		if strayOf(cg, pid, self) {
			_ = pidfdSignal(fd, unix.SIGKILL)
			var info unix.Siginfo
			_ = sysRetry(func() error { return unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED, nil) })
		}
		unix.Close(fd)
	}
}

// reapFailed reaps pid if it is this process's zombie child still named launcherComm: the
// child whose exec failed, as the launcher found it.
func reapFailed(pid int) {
	if pid <= 0 {
		return
	}
	fd, err := pidfdOpen(pid)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if st, err := readProcStat(pid); err == nil && st.ppid == os.Getpid() && st.state == 'Z' && commOf(pid) == launcherComm {
		var info unix.Siginfo
		_ = sysRetry(func() error { return unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED, nil) })
	}
}

// strayOf reports whether pid, a child of self, is a stray of a launch into cg.
func strayOf(cg *domainCgroups, pid, self int) bool {
	st, err := readProcStat(pid)
	if err != nil || st.ppid != self {
		return false
	}
	if st.state == 'Z' {
		return commOf(pid) == launcherComm
	}
	p, ok := procCgroupPath(pid, hPids)
	return ok && cg.v1 != nil && p == "/"+cg.v1.rels[hPids]
}

// serveLauncher is the launcher process: it serves launch requests on the socket fd until it
// closes, and returns the exit code.
//
// The forks happen on a thread other than the main one: /proc/<pid>/cgroup shows the main
// thread's groups, so the launcher is never seen in a domain's while its forking thread is in
// them for a fork. Both are named launcherComm (the process's name is the main thread's).
func serveLauncher(fdEnv string) int {
	fd, err := strconv.Atoi(fdEnv)
	if err != nil || fd < 3 {
		fmt.Fprintln(os.Stderr, "steward launcher: bad", EnvLauncher)
		return 2
	}
	unix.CloseOnExec(fd)
	runtime.LockOSThread() // the main thread stays here, so the goroutine below runs on another
	if err := nameThread(); err != nil {
		fmt.Fprintln(os.Stderr, "steward launcher:", err)
		return 2
	}
	code := make(chan int, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is the forking thread for good
		code <- serveOn(fd)
	}()
	return <-code
}

// nameThread names the calling thread launcherComm.
func nameThread() error {
	name := append([]byte(launcherComm), 0)
	if err := unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NAME: %w", err)
	}
	return nil
}

// serveOn serves launch requests on fd from the calling (locked) thread, which every fork
// happens on: its no_new_privs, affinity and name are the child's.
func serveOn(fd int) int {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "steward launcher: PR_SET_NO_NEW_PRIVS:", err)
		return 2
	}
	if err := nameThread(); err != nil {
		fmt.Fprintln(os.Stderr, "steward launcher:", err)
		return 2
	}
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		fmt.Fprintln(os.Stderr, "steward launcher: affinity:", err)
		return 2
	}
	dieAfterFork := os.Getenv(launcherDieAfterFork) == "1"
	buf := make([]byte, maxLaunchRequest)
	oob := make([]byte, unix.CmsgSpace(4*maxLaunchFDs))
	for {
		var n, oobn, flags int
		err := sysRetry(func() (err error) { n, oobn, flags, _, err = unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC); return })
		if err != nil || n == 0 {
			return 0 // the supervisor closed its end, or is gone
		}
		fds := rightsOf(oob[:oobn])
		var rep launchReply
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			rep = launchReply{Err: "launch request truncated", Errno: int(unix.E2BIG)}
		} else {
			rep = launchOne(buf[:n], fds, &all)
			if dieAfterFork && rep.Pid > 0 {
				return 9
			}
		}
		for _, f := range fds {
			unix.Close(f)
		}
		b, _ := json.Marshal(rep)
		if err := sysRetry(func() error { return unix.Sendmsg(fd, b, nil, nil, unix.MSG_NOSIGNAL) }); err != nil {
			return 0
		}
		if rep.Stuck {
			return 3
		}
	}
}

// rightsOf returns the descriptors an SCM_RIGHTS message carried.
func rightsOf(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}

// launchOne performs one request on the calling (locked) thread.
func launchOne(b []byte, fds []int, all *unix.CPUSet) launchReply {
	var req launchRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return launchReply{Err: "malformed launch request: " + err.Error(), Errno: int(unix.EINVAL)}
	}
	if req.Files < 0 || req.Files+len(req.V1) != len(fds) || len(req.V1) == 0 || len(req.Argv) == 0 {
		return launchReply{Err: fmt.Sprintf("malformed launch request: %d files, %d v1 groups, %d descriptors", req.Files, len(req.V1), len(fds)), Errno: int(unix.EINVAL)}
	}
	if req.CPUs != nil {
		if err := unix.SchedSetaffinity(0, req.CPUs); err != nil {
			return launchReply{Err: "cpu affinity of the forking thread: " + err.Error(), Errno: errnoOf(err), Unborn: true}
		}
		defer unix.SchedSetaffinity(0, all)
	}
	// Born in the domain's v1 groups: the thread enters them for the fork (see v1Group.enterSelf).
	back, err := homeTasks(req.V1)
	if err != nil {
		return launchReply{Err: "home cgroups: " + err.Error(), Unborn: true}
	}
	for i, tfd := range fds[req.Files:] {
		if err := writeFD(tfd, req.V1[i]+" tasks", "0"); err != nil {
			if lerr := goHome(back[:i]); lerr != nil {
				return launchReply{Err: "leave cgroup: " + lerr.Error(), Stuck: true, Unborn: true}
			}
			return launchReply{Err: "enter cgroup: " + err.Error(), Unborn: true}
		}
	}
	sys := &syscall.SysProcAttr{Setpgid: true, Cloneflags: req.Cloneflags | unix.CLONE_PARENT}
	if req.UID >= 0 && req.GID >= 0 {
		guestMaps(sys, req.UID, req.GID)
	}
	files := make([]uintptr, req.Files)
	for i := range files {
		files[i] = uintptr(fds[i])
	}
	pid, err := syscall.ForkExec(req.Path, req.Argv, &syscall.ProcAttr{Env: req.Env, Files: files, Sys: sys})
	rep := launchReply{Pid: pid}
	if lerr := goHome(back); lerr != nil {
		rep.Stuck = true // the child, if it runs, is born in place: the supervisor has it
	}
	if err != nil {
		// The child reports its failure before it exits: it is found here and waited for, so
		// that the supervisor reaps a zombie, not a process still on its way out.
		rep = launchReply{Err: "fork/exec " + req.Path + ": " + err.Error(), Errno: errnoOf(err), Stuck: rep.Stuck}
		rep.Pid, rep.Forked = awaitFailedChild()
	}
	return rep
}

// awaitFailedChild finds the child whose exec just failed — a child of the launcher's parent
// (CLONE_PARENT) still named launcherComm, other than the launcher itself: the launches before
// it were renamed by their exec or reaped before their reply — and waits for its exit through a pidfd, at most failedChildWait.
// It returns its pid, and whether a child was forked at all (0, false when the fork failed).
func awaitFailedChild() (int, bool) {
	self, parent := os.Getpid(), os.Getppid()
	for _, pid := range childrenByPpid(parent) {
		if pid == self || commOf(pid) != launcherComm { // the launcher is its parent's child by that name too
			continue
		}
		fd, err := pidfdOpen(pid)
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err == nil && st.ppid == parent && commOf(pid) == launcherComm {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			_ = sysRetry(func() error { _, err := unix.Poll(fds, int(failedChildWait.Milliseconds())); return err })
			unix.Close(fd)
			return pid, true
		}
		unix.Close(fd)
	}
	return 0, false
}

// failedChildWait bounds the wait for a child whose exec failed: it only has to exit.
const failedChildWait = 5 * time.Second

// childrenByPpid lists the processes whose parent is the process parent, by their
// /proc/<pid>/stat. Not childrenOf: a launcher's children are those of the thread that started
// it, and when that thread ends (the launcher died) they move to another thread's list, a move
// a read of the lists can miss; their parent pid stays the process's throughout.
func childrenByPpid(parent int) []int {
	names, _ := readDirNames("/proc")
	var out []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if st, err := readProcStat(pid); err == nil && st.ppid == parent {
			out = append(out, pid)
		}
	}
	return out
}

// commOf is pid's name ("" if gone).
func commOf(pid int) string {
	b, err := readFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func errnoOf(err error) int {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return int(errno)
	}
	return 0
}
