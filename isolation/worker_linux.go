package isolation

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// A contained worker's main goroutine runs on the process's first thread, its leader, for good:
// locked in an init function, main starts there (runtime.LockOSThread). EnterWorker and Contain,
// called from main, then set up that thread — the one an engine is exec'd from, whose
// per-thread state (the capability bounding set) is what /proc/<pid>/status shows — whatever
// system calls in between let the runtime move a goroutine (the cgroup namespace's all-thread
// setns did, and the bounding set was then dropped on another thread than the leader).
func init() {
	if os.Getenv(EnvContain) == "1" {
		runtime.LockOSThread()
	}
}

// EnterWorker must be the first call in the worker's main, before it reads any input. It waits
// until the supervisor has placed the process in its cgroups (when there is a barrier), makes
// the process non-dumpable (no core, no ptrace by same-uid peers, /proc/<pid>/mem closed) and
// no_new_privs, sets RLIMIT_CORE=0 and the configured RLIMIT_NOFILE (soft and hard), and checks
// that its parent is still the supervisor that launched it. A contained worker (born in its own
// user, PID, mount, IPC and UTS namespaces) also builds its mount namespace here and enters its
// own cgroup namespace, and, launched with Spec.Gateway, hands the supervisor a listener in its
// network namespace (gateway_linux.go); the engine code must not run before Contain.
//
// On error the worker must exit at once, with ExitRefused. For the preflight probe child
// (EnvProbe=1) EnterWorker does not return: it exits with probeExitCode after its checks, a
// code a binary that never called EnterWorker is unlikely to produce.
func EnterWorker() error {
	if s := os.Getenv(EnvLauncher); s != "" {
		os.Exit(serveLauncher(s)) // the supervisor's launcher: never a worker
	}
	parent, err := strconv.Atoi(os.Getenv(EnvParent))
	if err != nil || parent <= 0 {
		return ErrNotWorker
	}
	contained := os.Getenv(EnvContain) == "1"
	if contained {
		go seccompFilter() // ends once assembled; Contain's loadSeccomp waits for it
	}
	if s := os.Getenv(EnvExecFD); s != "" {
		if fd, err := strconv.Atoi(s); err == nil && fd >= FirstExtraFD {
			_ = unix.Close(fd)
		}
		_ = os.Unsetenv(EnvExecFD)
	}
	if s := os.Getenv(EnvBarrierFD); s != "" {
		if err := waitBarrier(s, contained); err != nil {
			return err
		}
	} else if contained {
		return fmt.Errorf("%w: a contained worker needs its barrier", ErrBarrier)
	}
	if err := hardenSelf(); err != nil {
		return err
	}
	if contained {
		if err := enterNamespaces(); err != nil {
			return err
		}
		// Still root of its user namespace, and no engine code has run: the moment to listen
		// for the supervisor in the domain's network namespace (gateway_linux.go).
		if err := handOffGateway(); err != nil {
			return err
		}
	} else if got := os.Getppid(); got != parent {
		// The supervisor died between fork and here (PDEATHSIG covers it only from the prctl
		// onwards, and we may have been re-parented to a subreaper or init).
		return fmt.Errorf("%w: parent %d, want %d", ErrParentMismatch, got, parent)
	}
	if os.Getenv(EnvProbe) == "1" {
		if err := Contain(Policy{}); err != nil {
			return err
		}
		os.Exit(probeExitCode)
	}
	return nil
}

// waitBarrier blocks until the supervisor writes one byte (placed) or closes the pipe (refused).
// A contained worker (in its own PID namespace, where getppid is 0) then sets its PDEATHSIG and
// proves the supervisor still lives by its end of the pipe: the supervisor holds it open until
// the domain is reaped, so a hang-up means it died before the prctl could cover it.
func waitBarrier(s string, contained bool) error {
	fd, err := strconv.Atoi(s)
	if err != nil || fd < FirstExtraFD {
		return fmt.Errorf("%w: bad %s=%q", ErrBarrier, EnvBarrierFD, s)
	}
	defer unix.Close(fd)
	_ = os.Unsetenv(EnvBarrierFD)
	var b [1]byte
	for {
		n, err := unix.Read(fd, b[:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("%w: %w", ErrBarrier, err)
		case n != 1:
			return ErrBarrier
		}
		if contained {
			return watchParent(fd)
		}
		return nil
	}
}

func watchParent(fd int) error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("isolation: PR_SET_PDEATHSIG: %w", err)
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: poll barrier: %w", ErrBarrier, err)
		}
		if fds[0].Revents&unix.POLLHUP != 0 {
			return fmt.Errorf("%w: the supervisor is gone", ErrParentMismatch)
		}
		return nil
	}
}

func hardenSelf() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("isolation: PR_SET_DUMPABLE: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("isolation: PR_SET_NO_NEW_PRIVS: %w", err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{}); err != nil {
		return fmt.Errorf("isolation: RLIMIT_CORE: %w", err)
	}
	nofile, err := strconv.ParseUint(os.Getenv(EnvNoFile), 10, 64)
	if err != nil || nofile == 0 {
		nofile = DefaultNoFile
	}
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur); err != nil {
		return fmt.Errorf("isolation: RLIMIT_NOFILE: %w", err)
	}
	nofile = min(nofile, cur.Max) // can only lower the hard limit without privilege
	// syscall.Setrlimit (not unix's) so the Go runtime records the value it hands to children.
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: nofile, Max: nofile}); err != nil {
		return fmt.Errorf("isolation: RLIMIT_NOFILE: %w", err)
	}
	return nil
}

// probeExitCode is how a probe child proves it ran EnterWorker to the end.
const probeExitCode = 86
