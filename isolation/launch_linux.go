package isolation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// launchSpec is a validated Spec plus what the launch path adds.
type launchSpec struct {
	path    string
	argv    []string
	env     []string
	extra   []*os.File
	stdout  io.Writer
	stderr  io.Writer
	barrier bool   // hold the child behind a barrier even when it could be born in place (probe)
	contain bool   // born in its own namespaces as the guest (Config.Containment not off, verified)
	network bool   // contained: keep the host's network namespace
	gateway uint16 // contained, without network: the port of the listener handed over (Spec.Gateway)
	policy  Policy
	tmp     string       // contained: host path of the private temp dir (a tmpfs in the domain)
	tmpSize int64        // contained: its size in bytes
	cpus    *unix.CPUSet // the launching thread's affinity for the fork (nil: unchanged)
	widen   string       // EnvCPUs for the worker when cpus is set
	via     *launcher    // contained: fork through it while it works (nil: fork here)
}

// onCPUs narrows the launch to cpus when narrowed, telling the worker all of its supervisor's.
func (ls launchSpec) onCPUs(narrowed bool, cpus, all []int) launchSpec {
	if narrowed {
		ls.cpus, ls.widen = cpuSet(cpus), formatCPUs(all)
	}
	return ls
}

// launch starts the worker in cg and returns its Domain. Any failure leaves nothing running:
// the child, if it exists, is killed through its pidfd and reaped before launch returns.
func launch(ctx context.Context, cfg Config, id string, cg *domainCgroups, ls launchSpec) (_ *Domain, retErr error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d := &Domain{id: id, cfg: cfg, cg: cg, exited: make(chan struct{})}

	var closeAfterStart []*os.File
	defer func() {
		for _, f := range closeAfterStart {
			_ = f.Close()
		}
	}()
	devnull, err := devNull()
	if err != nil {
		return nil, err
	}
	files := []*os.File{devnull, nil, nil}
	for i, w := range []io.Writer{ls.stdout, ls.stderr} {
		f, err := d.outputFile(w, devnull, &closeAfterStart)
		if err != nil {
			return nil, err
		}
		files[i+1] = f
	}
	files = append(files, ls.extra...)
	env := append([]string(nil), ls.env...)
	env = append(env, EnvParent+"="+strconv.Itoa(os.Getpid()), EnvNoFile+"="+strconv.FormatUint(cfg.NoFile, 10))
	if ls.cpus != nil {
		env = append(env, EnvCPUs+"="+ls.widen)
	}

	if ls.contain {
		if ls.tmp != "" {
			uid, gid := cfg.guest()
			if err := os.Chown(ls.tmp, uid, gid); err != nil {
				return nil, opErr("hand the temp dir to the guest", cg.mode, ls.tmp, ErrContainment, err)
			}
			env = append(env, EnvTmp+"="+ls.tmp, EnvTmpBytes+"="+strconv.FormatInt(ls.tmpSize, 10))
		}
		env = append(env, EnvContain+"=1", EnvPolicy+"="+ls.policy.encode())
	}
	// The barrier's write end: one byte = placed, EOF before it = refused. A contained worker
	// also learns from it that the supervisor lives, so its end stays open for the domain's life.
	var release *os.File
	if ls.barrier || ls.contain || cg.needsBarrier() {
		r, w, err := blockingPipe()
		if err != nil {
			return nil, err
		}
		closeAfterStart = append(closeAfterStart, r)
		release = w
		defer func() {
			if retErr != nil || !ls.contain {
				_ = release.Close() // on failure the child reads EOF and exits
			}
		}()
		env = append(env, EnvBarrierFD+"="+strconv.Itoa(len(files)))
		files = append(files, r)
	}
	if ls.gateway != 0 {
		g, theirs, err := newGateway(ls.gateway, cg.mode)
		if err != nil {
			return nil, err
		}
		closeAfterStart = append(closeAfterStart, theirs)
		d.gw = g
		defer func() {
			if retErr != nil {
				g.close()
			}
		}()
		env = append(env, EnvGatewayFD+"="+strconv.Itoa(len(files)), EnvGatewayPort+"="+strconv.Itoa(int(ls.gateway)))
		files = append(files, theirs)
	}

	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	execPath := ls.path
	if ls.contain {
		containAttr(cfg, sys, ls.network)
		exe, err := openExecutable(ls.path)
		if err != nil {
			return nil, opErr("open worker executable", cg.mode, ls.path, nil, err)
		}
		closeAfterStart = append(closeAfterStart, exe)
		execPath, files, env = execThrough(exe, files, env)
	}
	if fd, ok := cg.bornFD(); ok {
		sys.UseCgroupFD, sys.CgroupFD = true, fd
	}
	if err := sealInheritedFDs(); err != nil {
		return nil, err
	}
	attr := &os.ProcAttr{Env: env, Files: files, Sys: sys}
	var bornV1, bornV2 bool
	err = errLauncher // not tried
	if ls.via != nil && ls.contain && cg.v1 != nil && ls.via.usable() {
		bornV1, err = d.startVia(ls.via, execPath, ls.argv, attr, cg, ls.cpus)
		if errors.Is(err, errLauncher) {
			reapStrays(cg, ls.via.pid) // what a launcher that failed mid-request may have forked
		}
	}
	if errors.Is(err, errLauncher) {
		bornV1, err = d.start(execPath, ls.argv, attr, cg.enterSelf, ls.cpus)
		bornV2 = sys.UseCgroupFD
	}
	// The parent's copies of the child's ends go now, so output pipes see EOF once the
	// domain is dead and the copiers can finish.
	for _, f := range closeAfterStart {
		_ = f.Close()
	}
	closeAfterStart = nil
	if err != nil {
		d.copiers.Wait()
		return nil, opErr("start worker", cg.mode, ls.path, nil, err)
	}
	if ls.contain {
		d.lifeline = release
		d.innerPid = 1
		d.holdNamespaces(ls.network)
	}
	d.tr = newTracker(cg, d.pid)
	defer func() {
		if retErr != nil {
			_ = d.proc.Signal(syscall.SIGKILL) // pidfd_send_signal: cannot hit a reused pid
			_ = cg.killOnce(context.Background(), d.tr.mark)
			<-d.exited
			d.tr.close()
			d.copiers.Wait()
			d.takeHeld()()
		}
	}()
	if err := cg.place(d.pid, bornV1, bornV2); err != nil {
		return nil, err
	}
	if release != nil {
		if _, err := release.Write([]byte{1}); err != nil {
			return nil, opErr("release barrier", cg.mode, "", ErrPlacement, err)
		}
	}
	return d, nil
}

// start forks the worker from a goroutine locked to its OS thread, and keeps that goroutine
// (and thread) until the worker is reaped: PDEATHSIG fires when the creating thread exits, not
// the process (golang/go#27505), so the thread must outlive the worker. The reap is done by a
// goroutine the poller wakes with the exit (exitNotice), or, without PIDFD_NONBLOCK, by the
// forking thread itself, blocked in waitid. The thread sets no_new_privs on itself first, so
// the worker has it from birth, on every thread and in every process it starts; the goroutine
// ends locked, so the runtime retires the thread instead of handing it to other goroutines.
// enter moves the thread into the domain's v1 cgroups for the fork (see v1Group.enterSelf);
// bornV1 reports that the worker was born there.
// cpus, if set, becomes the thread's affinity first, so the worker is born with it (the thread
// is retired with the domain, so it is never undone).
func (d *Domain) start(path string, argv []string, attr *os.ProcAttr, enter func() (func() error, error), cpus *unix.CPUSet) (bornV1 bool, _ error) {
	type result struct {
		born bool
		err  error
	}
	started := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			started <- result{err: fmt.Errorf("isolation: PR_SET_NO_NEW_PRIVS on the forking thread: %w", err)}
			return
		}
		if cpus != nil {
			if err := unix.SchedSetaffinity(0, cpus); err != nil {
				started <- result{err: fmt.Errorf("isolation: cpu affinity of the forking thread: %w", err)}
				return
			}
		}
		leave, err := enter()
		if err != nil {
			started <- result{err: err}
			return // the thread may be in the domain's cgroups: it exits locked, and leaves them
		}
		p, err := os.StartProcess(path, argv, attr)
		if leave != nil {
			if lerr := leave(); lerr != nil {
				if err == nil {
					_ = p.Kill()
					_, _ = p.Wait()
				}
				started <- result{err: lerr}
				return
			}
		}
		if err != nil {
			started <- result{err: err}
			return // exits locked: the runtime discards the thread, harmless
		}
		d.proc, d.pid, d.started = p, p.Pid, time.Now()
		exit := exitNotice(p.Pid)
		started <- result{born: leave != nil}
		if exit == nil {
			d.reap() // blocks this thread in waitid(P_PIDFD) until the exit
			return
		}
		go func() {
			awaitExit(exit)
			d.reap() // the worker has exited: waitid returns at once
		}()
		<-d.exited // the thread stays until the reap (PDEATHSIG), parked
	}()
	r := <-started
	return r.born, r.err
}

// exitNotices is false only in tests of the reap without exit notices (kernels before 5.10).
var exitNotices = true

// reap waits for the main process (waitid(P_PIDFD): Go 1.23+ holds a pidfd for it) and records
// how it ended.
func (d *Domain) reap() {
	st, werr := d.proc.Wait()
	d.state, d.waitErr, d.wall = st, werr, time.Since(d.started)
	close(d.exited)
}

// exitNotice returns a non-blocking pidfd of pid served by the runtime's poller, which reports
// the process's exit as readable (nil where the kernel has no PIDFD_NONBLOCK, before 5.10).
//
// The exit of a worker is on the answer's path. Waited for in waitid on the forking thread, it
// reached the waiting goroutine by two hand-offs between threads: the forking goroutine, locked
// to its thread, wakes, closes Done and ends, its thread retires, and another thread must be
// woken to run the waiter. Through the poller, the thread that takes the notice reaps and runs
// the waiter itself.
func exitNotice(pid int) *os.File {
	if !exitNotices {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "pidfd")
}

// awaitExit returns once the process behind the pidfd f has exited (or f cannot be polled),
// and closes f.
func awaitExit(f *os.File) {
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		for {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			if !errors.Is(err, unix.EINTR) {
				return n > 0 || err != nil
			}
		}
	})
}

// devNull is /dev/null, opened once for every launch of the process (read and write: a
// worker's stdin, and its stdout and stderr when the Spec has no writer for them). Opening it
// for each launch (through the runtime's poller) was 8 system calls of the launch path.
var devNull = sync.OnceValues(func() (*os.File, error) {
	fd, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("isolation: open %s: %w", os.DevNull, err)
	}
	return os.NewFile(uintptr(fd), os.DevNull), nil
})

// blockingPipe is a pipe whose ends the runtime's poller does not manage: for the barrier, of
// which the child holds one end and the parent writes one byte to the other (os.Pipe would
// register both with the poller and take 6 more system calls to do it and 2 to undo it).
func blockingPipe() (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("isolation: pipe: %w", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// outputFile returns the *os.File to hand the child for w: w itself if it is a file, /dev/null
// for nil, else a pipe drained into w by a goroutine that ends when the last writer is gone.
func (d *Domain) outputFile(w io.Writer, devnull *os.File, closeAfter *[]*os.File) (*os.File, error) {
	if w == nil {
		return devnull, nil
	}
	if f, ok := w.(*os.File); ok {
		return f, nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	*closeAfter = append(*closeAfter, pw)
	d.copiers.Add(1)
	go func() {
		defer d.copiers.Done()
		_, _ = io.Copy(w, r)
		_ = r.Close()
	}()
	return pw, nil
}

// sealInheritedFDs sets close-on-exec on every descriptor ≥ 3 of this process. Go opens its own
// descriptors with O_CLOEXEC, but one created by cgo or a library without it would otherwise
// leak into every worker; the worker must receive only its stdio and Spec.ExtraFiles (which
// the fork path dup2s into place regardless of the flag). One close_range(2) call does it
// (Linux ≥ 5.11); older kernels get one fcntl per open descriptor.
func sealInheritedFDs() error {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return nil
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("isolation: list fds: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // closed meanwhile (e.g. the ReadDir fd itself) or already sealed
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("isolation: seal fd %d: %w", fd, err)
		}
	}
	return nil
}
