package isolation

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// EnterWorker must be the first call in the worker's main, before it reads any input. It waits
// until the supervisor has placed the process in its cgroups (when there is a barrier), makes
// the process non-dumpable (no core, no ptrace by same-uid peers, /proc/<pid>/mem closed) and
// no_new_privs, sets RLIMIT_CORE=0 and the configured RLIMIT_NOFILE (soft and hard), and checks
// that its parent is still the supervisor that launched it.
//
// On error the worker must exit at once, with ExitRefused. For the preflight probe child
// (EnvProbe=1) EnterWorker does not return: it exits with probeExitCode after its checks, a
// code a binary that never called EnterWorker is unlikely to produce.
func EnterWorker() error {
	parent, err := strconv.Atoi(os.Getenv(EnvParent))
	if err != nil || parent <= 0 {
		return ErrNotWorker
	}
	if s := os.Getenv(EnvBarrierFD); s != "" {
		if err := waitBarrier(s); err != nil {
			return err
		}
	}
	if err := hardenSelf(); err != nil {
		return err
	}
	// The supervisor died between fork and here (PDEATHSIG covers it only from the prctl
	// onwards, and we may have been re-parented to a subreaper or init).
	if got := os.Getppid(); got != parent {
		return fmt.Errorf("%w: parent %d, want %d", ErrParentMismatch, got, parent)
	}
	if os.Getenv(EnvProbe) == "1" {
		os.Exit(probeExitCode)
	}
	return nil
}

// waitBarrier blocks until the supervisor writes one byte (placed) or closes the pipe (refused).
func waitBarrier(s string) error {
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
