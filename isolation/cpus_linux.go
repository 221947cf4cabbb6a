package isolation

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// A worker can be born on fewer CPUs than its supervisor runs on (Spec.CPUs) and widen itself
// to all of them (WidenCPUs) once it has work that wants them. A Go worker born on one CPU
// starts with GOMAXPROCS 1 and keeps its threads there, so its exit — the unmapping of its
// address space, on the answer's path — runs on that CPU alone: no TLB-shootdown IPIs to the
// other CPUs its threads would have touched, and the others stay free for the sidecar.

// ownCPUs lists the CPUs the calling thread may run on.
func ownCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// CPUs lists the CPUs this supervisor runs on (its affinity when New ran): what a worker
// started with Spec.CPUs widens to.
func (s *Supervisor) CPUs() []int { return slices.Clone(s.cpus) }

// checkCPUs accepts a Spec.CPUs made of distinct CPUs the supervisor runs on; narrowed reports
// whether it leaves any of them out (otherwise the worker is started as without it).
func (s *Supervisor) checkCPUs(cpus []int) (narrowed bool, err error) {
	seen := map[int]bool{}
	for _, c := range cpus {
		if !slices.Contains(s.cpus, c) || seen[c] {
			return false, fmt.Errorf("%w: cpu %d is not one of the supervisor's %s (or is listed twice)", ErrInvalidSpec, c, formatCPUs(s.cpus))
		}
		seen[c] = true
	}
	return len(cpus) > 0 && len(cpus) < len(s.cpus), nil
}

func cpuSet(cpus []int) *unix.CPUSet {
	set := new(unix.CPUSet)
	for _, c := range cpus {
		set.Set(c)
	}
	return set
}

// formatCPUs writes cpus as a comma-separated list ("0,2,3").
func formatCPUs(cpus []int) string {
	parts := make([]string, len(cpus))
	for i, c := range cpus {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

// parseCPUs reads formatCPUs' output.
func parseCPUs(s string) ([]int, error) {
	var cpus []int
	for _, p := range strings.Split(s, ",") {
		c, err := strconv.Atoi(p)
		if err != nil || c < 0 || c >= len(unix.CPUSet{})*64 {
			return nil, fmt.Errorf("isolation: bad cpu %q in %s", p, EnvCPUs)
		}
		cpus = append(cpus, c)
	}
	return cpus, nil
}

// WidenCPUs lets every thread of this worker run on all of its supervisor's CPUs, when the
// supervisor started it on fewer (Spec.CPUs), and sets GOMAXPROCS to the runtime's default for
// them unless the environment sets GOMAXPROCS. Threads and processes started afterwards
// inherit the wider set. It returns the calling thread's CPUs as read back afterwards, or nil
// for a worker started on every CPU (nothing to do); calling it again is harmless.
func WidenCPUs() ([]int, error) {
	v := os.Getenv(EnvCPUs)
	if v == "" {
		return nil, nil
	}
	cpus, err := parseCPUs(v)
	if err != nil {
		return nil, err
	}
	set := cpuSet(cpus) // on the heap: psx hands its address to every thread
	// One broadcast: psx runs the call on each thread of the process, so no thread the
	// runtime starts meanwhile is left behind (it inherits from a thread already widened, or
	// is reached by the broadcast).
	_, _, errno := psx.Syscall3(unix.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(*set), uintptr(unsafe.Pointer(set)))
	runtime.KeepAlive(set)
	if errno != 0 {
		return nil, fmt.Errorf("isolation: widen to cpus %s: %w", v, errno)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.SetDefaultGOMAXPROCS()
	}
	return ownCPUs()
}
