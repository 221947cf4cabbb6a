//go:build !linux

package isolation

import (
	"context"
	"net"
	"runtime"
	"strconv"
)

// errUnsupported names the platform so a host log says why.
var errUnsupported = &Error{Op: "isolation on " + runtime.GOOS, Err: ErrUnsupported}

// Supervisor is unavailable off Linux.
type Supervisor struct{}

// Domain is unavailable off Linux.
type Domain struct{}

// Probe reports that no mode is available.
func Probe(cfg Config) Report {
	return Report{Mode: ModeNone, Host: "unavailable", Reason: errUnsupported.Error()}
}

// New fails with ErrUnsupported and ErrIsolationUnavailable.
func New(cfg Config) (*Supervisor, error) {
	return nil, &PreflightError{Report: Probe(cfg)}
}

// EnterWorker fails with ErrUnsupported.
func EnterWorker() error { return errUnsupported }

// WidenCPUs has nothing to widen off Linux: no worker is started on fewer CPUs.
func WidenCPUs() ([]int, error) { return nil, nil }

func (s *Supervisor) Report() Report              { return Probe(Config{}) }
func (s *Supervisor) Mode() Mode                  { return ModeNone }
func (s *Supervisor) Config() Config              { return Config{} }
func (s *Supervisor) Leftovers() []string         { return nil }
func (s *Supervisor) CgroupPath(d *Domain) string { return "" }
func (s *Supervisor) Contained() bool             { return false }
func (s *Supervisor) LauncherFrom(string) error   { return nil }
func (s *Supervisor) CPUs() []int                 { return nil }
func (s *Supervisor) Start(ctx context.Context, spec Spec) (*Domain, error) {
	return nil, errUnsupported
}
func (s *Supervisor) Close(ctx context.Context) error { return nil }

func (d *Domain) ID() string            { return "" }
func (d *Domain) Pid() int              { return 0 }
func (d *Domain) WorkerPid() int        { return 0 }
func (d *Domain) Done() <-chan struct{} { return nil }
func (d *Domain) PeakMemory() int64     { return 0 }
func (d *Domain) Wait(ctx context.Context) (Outcome, error) {
	return Outcome{ExitCode: -1}, errUnsupported
}
func (d *Domain) Terminate(ctx context.Context) (Outcome, error) {
	return Outcome{ExitCode: -1}, errUnsupported
}
func (d *Domain) Kill(ctx context.Context) (Outcome, error) {
	return Outcome{ExitCode: -1}, errUnsupported
}
func (d *Domain) Close() error { return nil }

// Gateway fails with ErrUnsupported: no domain runs off Linux.
func (d *Domain) Gateway(ctx context.Context) (net.Listener, error) { return nil, errUnsupported }

// Freeze and Thaw are unsupported off Linux.
func (d *Domain) Freeze(ctx context.Context) error { return errUnsupported }
func (d *Domain) Thaw(ctx context.Context) error   { return errUnsupported }

// CloseHolding does nothing.
func (d *Domain) CloseHolding() (release func(), err error) { return func() {}, nil }

// OwnerName off Linux cannot read a start time: "<pid>-0", which OwnerAlive never declares dead.
func OwnerName(pid int) (string, error) { return strconv.Itoa(pid) + "-0", nil }

// OwnerAlive off Linux cannot tell a dead owner from a live one: it reports every owner alive,
// so nothing named after one is ever removed.
func OwnerAlive(name string) bool { return true }

// ProbeExecutable fails with ErrUnsupported: no worker runs off Linux.
func ProbeExecutable(ctx context.Context, path string, args []string) error { return errUnsupported }
