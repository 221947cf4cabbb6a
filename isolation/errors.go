package isolation

import (
	"errors"
	"fmt"
)

// Sentinels. Callers classify with errors.Is; messages are for people only.
var (
	// ErrIsolationUnavailable: no cgroup mode verified, so nothing may be launched.
	ErrIsolationUnavailable = errors.New("isolation unavailable")
	// ErrUnsupported: the platform has no implementation (every non-Linux build).
	ErrUnsupported = errors.New("isolation not supported on this platform")
	// ErrLimitMismatch: a limit written to a cgroup did not read back as written.
	ErrLimitMismatch = errors.New("cgroup limit did not read back")
	// ErrPlacement: the child could not be placed in, or verified inside, its cgroups.
	ErrPlacement = errors.New("worker placement failed")
	// ErrNotExecutable: ProbeExecutable could not start workers from a file.
	ErrNotExecutable = errors.New("worker executable does not run")
	// ErrInvalidSpec: the Spec or Config is malformed (bad name, reserved or malformed env entry).
	ErrInvalidSpec = errors.New("invalid isolation spec")
	// ErrReapBound: the domain was not empty and fully reaped within Config.ReapBound.
	// The Outcome returned beside it is still filled in (Survivors > 0 or AllReaped false).
	ErrReapBound = errors.New("domain not reaped within reap bound")
	// ErrClosed: the Supervisor or Domain was already closed.
	ErrClosed = errors.New("isolation: closed")
	// ErrNotWorker: EnterWorker was called in a process not launched by a Supervisor.
	ErrNotWorker = errors.New("not launched as an isolated worker")
	// ErrParentMismatch: the worker's parent is not the supervisor that launched it (the
	// supervisor died before the worker started). The worker must exit.
	ErrParentMismatch = errors.New("worker parent is not the expected supervisor")
	// ErrBarrier: the supervisor closed the barrier without releasing it (placement failed).
	ErrBarrier = errors.New("worker barrier not released")
	// ErrContainment: a containment layer could not be set up (in the worker: it must exit;
	// in NewSupervisor under ContainRequire: a layer the kernel lacks).
	ErrContainment = errors.New("containment failed")
	// ErrGateway: a domain started with Spec.Gateway did not hand its listener over (it ended
	// first, or could not listen), or Domain.Gateway was called on a domain without one.
	ErrGateway = errors.New("gateway listener not handed over")
)

// Error carries the failing operation, the mode and (for cgroup files) the path.
type Error struct {
	Op   string // e.g. "create cgroup", "write memory.max", "attach"
	Mode Mode   // mode in use, may be empty
	Path string // file or directory involved, may be empty
	Err  error  // wraps a sentinel above and/or the OS error
}

func (e *Error) Error() string {
	s := "isolation: " + e.Op
	if e.Mode != "" {
		s += " (" + string(e.Mode) + ")"
	}
	if e.Path != "" {
		s += " " + e.Path
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// opErr wraps err with context; sentinel, if non-nil, is joined so errors.Is matches both.
func opErr(op string, mode Mode, path string, sentinel, err error) error {
	switch {
	case sentinel != nil && err != nil:
		err = fmt.Errorf("%w: %w", sentinel, err)
	case sentinel != nil:
		err = sentinel
	}
	return &Error{Op: op, Mode: mode, Path: path, Err: err}
}

// PreflightError is New's error when no mode verified (or the preflight could not run): its
// Report says what was tried and why each attempt failed. It wraps ErrIsolationUnavailable.
type PreflightError struct {
	Report Report
}

func (e *PreflightError) Error() string { return "isolation: preflight: " + e.Report.Reason }

func (e *PreflightError) Unwrap() error { return ErrIsolationUnavailable }

// ReportOf returns the preflight report New's error carries; for any other error, a report of
// mode none whose reason is the error.
func ReportOf(err error) Report {
	var pe *PreflightError
	if errors.As(err, &pe) {
		return pe.Report
	}
	return Report{Mode: ModeNone, Reason: err.Error()}
}
