package hostile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccomp makes each call a seccomp filter must refuse, with arguments under which the call
// either does something harmless and is undone, or fails only after the kernel's privilege check
// (the errno then says the call got past it: EINVAL/ENOEXEC count as reached).
func (r *run) seccomp(_ context.Context) {
	r.emit(r.sysPtraceChild())
	r.emit(r.sysVMReadvSelf())
	r.emit(r.sysMount())
	r.emit(r.sysBPF())
	r.emit(r.sysPerf())
	r.emit(reached("seccomp.kexec_load", "kexec_load(0, 1000 segments, NULL, 0): EPERM if refused, EINVAL once past CAP_SYS_BOOT",
		func() error {
			_, _, e := unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, 1000, 0, 0, 0, 0)
			return errOrNil(e)
		}, unix.EINVAL))
	r.emit(reached("seccomp.init_module", "init_module(empty image): EPERM if refused, ENOEXEC/EFAULT once past CAP_SYS_MODULE",
		func() error { return unix.InitModule([]byte{}, "") }, unix.ENOEXEC, unix.EFAULT, unix.EINVAL))
	r.emit(r.sysKeyctl())
	r.emit(r.sysSetns())
	r.emit(r.sysUnshareUser())
	r.emit(r.sysIOUring())
	r.emit(r.sysUserfaultfd())
}

func errOrNil(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// reached is the finding of a call that is harmful only if it gets past its privilege check:
// success, or one of the errnos that the kernel returns only after that check, is Succeeded.
func reached(attack, tried string, call func() error, after ...syscall.Errno) Finding {
	err := call()
	if err == nil {
		return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: "returned 0"}
	}
	for _, e := range after {
		if errors.Is(err, e) {
			return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Errno: errno(err),
				Evidence: fmt.Sprintf("%s: the call got past the kernel's privilege check", errno(err))}
		}
	}
	return blocked(attack, tried, err)
}

func (r *run) sysPtraceChild() Finding {
	const attack, tried = "seccomp.ptrace", "PTRACE_SEIZE a child of its own (then kill it)"
	cmd := helper("sleep")
	if err := cmd.Start(); err != nil {
		return blocked(attack, tried, fmt.Errorf("no child to trace: %w", err))
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the tracer thread; dies with the goroutine
		ch <- unix.PtraceSeize(cmd.Process.Pid)
	}()
	if err := <-ch; err != nil {
		return blocked(attack, tried, err)
	}
	return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("seized child %d", cmd.Process.Pid)}
}

var vmProbe = []byte("hostile process_vm_readv probe")

func (r *run) sysVMReadvSelf() Finding {
	const attack, tried = "seccomp.process_vm_readv", "process_vm_readv of its own memory"
	buf := make([]byte, len(vmProbe))
	n, err := unix.ProcessVMReadv(os.Getpid(), []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}},
		[]unix.RemoteIovec{{Base: uintptr(unsafe.Pointer(&vmProbe[0])), Len: len(vmProbe)}}, 0)
	if err != nil {
		return blocked(attack, tried, err)
	}
	return Finding{Attack: attack, Tried: tried, Verdict: verdict(string(buf[:n]) == string(vmProbe)), Evidence: fmt.Sprintf("read %d bytes", n)}
}

// sysMount mounts a tmpfs in its temp dir and unmounts it; umount is also tried on a directory
// that is no mount point when the mount was refused (EINVAL: past CAP_SYS_ADMIN).
func (r *run) sysMount() Finding {
	const attack, tried = "seccomp.mount", "mount a tmpfs on TMPDIR/mnt, then umount2 it (or umount2 a non-mount point: EINVAL once past CAP_SYS_ADMIN)"
	dir := filepath.Join(r.tmp, "mnt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return Finding{Attack: attack, Tried: tried, Verdict: Inconclusive, Errno: errno(err), Evidence: err.Error()}
	}
	defer os.Remove(dir)
	if err := unix.Mount("hostile", dir, "tmpfs", 0, "size=1m"); err != nil {
		um := unix.Unmount(dir, 0)
		f := blocked(attack, tried, err)
		f.Evidence += fmt.Sprintf("; umount2 of a non-mount point: %s", errno(um))
		if errors.Is(um, unix.EINVAL) {
			f.Verdict, f.Evidence = Succeeded, f.Evidence+" (umount reached the kernel as privileged)"
		}
		return f
	}
	um := unix.Unmount(dir, unix.MNT_DETACH)
	return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("mounted a tmpfs; umount2: %v", um)}
}

// opened is the finding of a call that returns a new fd when it is allowed (closed at once).
func opened(attack, tried, what string, fd int, err error) Finding {
	if err != nil {
		return blocked(attack, tried, err)
	}
	unix.Close(fd)
	return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("%s %d", what, fd)}
}

// rawFD makes a raw syscall that returns an fd.
func rawFD(trap, a1, a2, a3 uintptr) (int, error) {
	fd, _, e := unix.Syscall(trap, a1, a2, a3)
	return int(fd), errOrNil(e)
}

func (r *run) sysBPF() Finding {
	attr := struct {
		mapType, keySize, valueSize, maxEntries, flags uint32
	}{2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1, 0}
	fd, err := rawFD(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	return opened("seccomp.bpf", "bpf(BPF_MAP_CREATE) of a one-entry array map", "map fd", fd, err)
}

func (r *run) sysPerf() Finding {
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK,
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Bits: unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	return opened("seccomp.perf_event_open", "perf_event_open of a software cpu-clock counter on itself (user space only)", "event fd", fd, err)
}

func (r *run) sysKeyctl() Finding {
	const attack, tried = "seccomp.keyctl", "keyctl(KEYCTL_GET_KEYRING_ID, session keyring, create)"
	id, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, true)
	if err != nil {
		return blocked(attack, tried, err)
	}
	return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("keyring %d", id)}
}

// sysSetns re-enters its own network namespace from a locked thread that is then thrown away.
func (r *run) sysSetns() Finding {
	const attack, tried = "seccomp.setns", "setns into its own network namespace (/proc/self/ns/net), on a thread that is then discarded"
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- fmt.Errorf("open: %w", err)
			return
		}
		defer unix.Close(fd)
		ch <- unix.Setns(fd, unix.CLONE_NEWNET)
	}()
	if err := <-ch; err != nil {
		return blocked(attack, tried, err)
	}
	return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: "setns returned 0"}
}

// sysUnshareUser: unshare(CLONE_NEWUSER) needs a single-threaded caller, so a child makes the
// call between fork and exec (Go's SysProcAttr.Unshareflags) and runs `hostile nop`.
func (r *run) sysUnshareUser() Finding {
	const attack, tried = "seccomp.unshare-user", "unshare(CLONE_NEWUSER) in a child before it execs"
	cmd := helper("nop")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWUSER}
	if err := cmd.Run(); err != nil {
		return blocked(attack, tried, err)
	}
	return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: "the child ran in a new user namespace"}
}

func (r *run) sysIOUring() Finding {
	var params [120]byte // struct io_uring_params
	fd, err := rawFD(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	return opened("seccomp.io_uring_setup", "io_uring_setup(1 entry)", "ring fd", fd, err)
}

func (r *run) sysUserfaultfd() Finding {
	fd, err := rawFD(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0)
	return opened("seccomp.userfaultfd", "userfaultfd(O_CLOEXEC) (extra: a classic exploit primitive)", "uffd", fd, err)
}
