package isolation

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Domain is one launched worker with its cgroups and every process it spawns.
type Domain struct {
	id      string
	cfg     Config
	cg      *domainCgroups
	proc    *os.Process // holds the worker's pidfd
	pid     int
	started time.Time
	onClose func(*Domain)
	// lifeline is the barrier's write end of a contained worker, open until Close: the worker
	// checks it once its PDEATHSIG is set, to know the supervisor was alive at that moment.
	lifeline *os.File
	innerPid int // the worker's own pid in its PID namespace (1), or 0 when it shares ours
	// held are a contained domain's IPC, mount and network namespaces, open from its start until
	// Close or CloseHolding's release (holdNamespaces).
	held []*os.File
	// gw is the gateway hand-off of a domain started with Spec.Gateway (nil without).
	gw *gateway

	exited  chan struct{} // closed after the main process was reaped
	state   *os.ProcessState
	waitErr error
	wall    time.Duration
	copiers sync.WaitGroup // stdout/stderr copy goroutines

	// settled is set by the first Wait that finds no live task left after the main process's
	// reap: the memory counters it read are final then (no task is left to allocate or to be
	// OOM-killed), and a domain found so stays so; teardown reuses them instead of reading again.
	settled atomic.Pointer[settledCounters]

	mu       sync.Mutex // serialises teardown and Close
	tr       *tracker
	final    *Outcome
	finalErr error
	closed   bool
}

// ID is the domain's cgroup directory name.
func (d *Domain) ID() string { return d.id }

// Pid is the worker's pid, for logs only: every signal and wait goes through its pidfd.
func (d *Domain) Pid() int { return d.pid }

// WorkerPid is the pid the worker sees as its own (getpid in the worker): 1 for a contained
// worker, the init of its own PID namespace; Pid otherwise. An engine's hello carries it.
func (d *Domain) WorkerPid() int {
	if d.innerPid != 0 {
		return d.innerPid
	}
	return d.pid
}

// PeakMemory is the most memory the domain has held so far (v1 memory.max_usage_in_bytes, v2
// memory.peak); 0 if unknown. Read while the domain lives (an idle spare's footprint).
func (d *Domain) PeakMemory() int64 { return d.cg.peak() }

// Done is closed when the main process has exited and been reaped.
func (d *Domain) Done() <-chan struct{} { return d.exited }

// Wait waits until the main process exits and returns what is known then: exit code or signal
// and wall time (OOMKilled and PeakMemory as of now). Other processes of the domain may still
// run: Terminate, Kill or Close bring them down and return the final Outcome.
func (d *Domain) Wait(ctx context.Context) (Outcome, error) {
	select {
	case <-d.exited:
	case <-ctx.Done():
		return d.mainOutcome(), ctx.Err()
	}
	o := d.mainOutcome()
	if c := d.settled.Load(); c != nil {
		o.OOMKilled, o.PeakMemory = c.oomKilled, c.peak
		return o, d.waitErr
	}
	empty := !d.cg.populated() // before the counters: an empty domain's are final
	o.OOMKilled = d.cg.oomKilled()
	o.PeakMemory = d.cg.peak()
	if empty {
		d.settled.CompareAndSwap(nil, &settledCounters{oomKilled: o.OOMKilled, peak: o.PeakMemory})
	}
	return o, d.waitErr
}

// settledCounters are a domain's final memory counters, read once it had no live task left.
type settledCounters struct {
	oomKilled bool
	peak      int64
}

// mainOutcome reads the main process's exit facts; ExitCode is -1 until it has exited.
func (d *Domain) mainOutcome() Outcome {
	o := Outcome{ExitCode: -1}
	select {
	case <-d.exited:
	default:
		return o
	}
	o.Wall = d.wall
	if d.state == nil {
		return o
	}
	ws, _ := d.state.Sys().(syscall.WaitStatus)
	switch {
	case ws.Exited():
		o.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		o.Signal = int(ws.Signal())
		o.SignalName = unix.SignalName(ws.Signal())
	}
	return o
}

// Close brings the domain down if Terminate/Kill has not (SIGKILL, no grace), then removes its
// cgroups and releases its namespaces. Idempotent.
func (d *Domain) Close() error {
	release, err := d.CloseHolding()
	release()
	return err
}

// CloseHolding is Close, except that a contained domain's IPC, mount and network namespaces
// stay held until release is called. By then no process of the domain is left, so nothing can
// enter them (only a descriptor can, and the supervisor holds the only ones); what their last
// reference sets off is the kernel's destruction work (free_ipc and cleanup_net on kernel work
// queues, with RCU grace periods; the mount namespace's unmounts wait out an expedited grace
// period in the last task's exit itself), and run at the worker's exit it competed for the CPUs
// with the supervisor's own teardown and answer, or delayed the exit the answer waits for. A
// caller that answers first calls release right after. release is idempotent and safe to call
// from any goroutine.
func (d *Domain) CloseHolding() (release func(), err error) {
	d.mu.Lock()
	release = d.takeHeld()
	if d.closed {
		d.mu.Unlock()
		return release, nil
	}
	var errs []error
	if d.final == nil {
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.ReapBound)
		_, err := d.teardownLocked(ctx, false)
		cancel()
		errs = append(errs, err)
	}
	held, counters := release, d.cg.takeCounters()
	release = func() { held(); counters() }
	errs = append(errs, d.cg.remove())
	d.tr.close()
	if d.lifeline != nil {
		_ = d.lifeline.Close()
	}
	d.gw.close()
	d.closed = true
	d.mu.Unlock()
	d.copiers.Wait() // every writer of the output pipes is dead now
	if d.onClose != nil {
		d.onClose(d)
	}
	return release, errors.Join(errs...)
}

// takeHeld hands the namespaces the domain holds over to the function it returns, which closes
// them once however often it is called.
func (d *Domain) takeHeld() func() {
	held := d.held
	d.held = nil
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, f := range held {
				_ = f.Close()
			}
		})
	}
}

// holdNamespaces opens the IPC and mount namespaces of a contained worker just born, and its
// network namespace unless it keeps the host's, so that CloseHolding can keep them past the
// domain's end. The worker waits at its barrier here, so /proc/<pid> is still it (and it sets
// its mounts up after exec, in the mount namespace it was born in: the one held). A namespace
// that cannot be opened is simply not held: it is then destroyed at the worker's exit, as
// without holding.
func (d *Domain) holdNamespaces(network bool) {
	kinds := []string{"ipc", "mnt", "net"}
	if network {
		kinds = kinds[:2]
	}
	for _, ns := range kinds {
		if f, err := os.Open("/proc/" + strconv.Itoa(d.pid) + "/ns/" + ns); err == nil {
			d.held = append(d.held, f)
		}
	}
}
