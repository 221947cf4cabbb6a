package isolation

import (
	"io"
	"os"
	"time"
)

// Mode names a cgroup layout.
type Mode string

const (
	// ModeAuto (the zero value) probes the modes the host can offer, best first: v2, hybrid, v1.
	ModeAuto Mode = ""
	// ModeV2: unified hierarchy with delegated memory+pids; children born in their cgroup,
	// killed through cgroup.kill.
	ModeV2 Mode = "v2"
	// ModeHybrid: limits in v1 memory+pids cgroups, placement, kill and "populated" in a
	// controller-less cgroup of the unified hierarchy (/sys/fs/cgroup/unified).
	ModeHybrid Mode = "hybrid"
	// ModeV1: v1 memory+pids+freezer only; barrier placement, freeze-kill-thaw.
	ModeV1 Mode = "v1"
	// ModeNone is reported when nothing verified.
	ModeNone Mode = "none"
)

// ParentAuto as Config.Parent finds the parent instead of naming it: in every hierarchy, the
// process's own cgroup, if its uid may write it (a delegated subtree). See Report.Parent.
const ParentAuto = "auto"

// LeafName is the cgroup a process alone in its delegated cgroup moves itself into under
// ParentAuto, so that on cgroup v2 its own cgroup holds no process and may enable controllers for
// the worker domains beside the leaf. It is left in place when the process exits (it cannot move
// back out); whoever delegated the subtree removes it with the subtree.
const LeafName = "supervisor"

// Defaults applied by Config.WithDefaults.
const (
	DefaultParent      = "steward"
	DefaultMemoryLimit = 1 << 30
	DefaultPidsLimit   = 256
	DefaultTermGrace   = 10 * time.Second
	DefaultReapBound   = 11 * time.Second
	DefaultNoFile      = 1024
	DefaultWorkerPath  = "/proc/self/exe"
)

// Config is the Supervisor's configuration. The zero value plus WithDefaults is usable.
type Config struct {
	// Parent is the cgroup directory, relative to each hierarchy's root, under which every
	// sidecar keeps its per-process directory, or ParentAuto ("auto"): the process's own,
	// delegated cgroup in each hierarchy (the process moves itself into a leaf of it first when
	// it is alone there). Default "steward" (what root uses; `steward serve` defaults to auto
	// when not root).
	Parent string
	// MemoryLimit is the per-domain memory limit in bytes, swap disabled. Default 1 GiB.
	MemoryLimit int64
	// PidsLimit is the per-domain limit on tasks (pids.max). Default 256.
	PidsLimit int64
	// TermGrace is how long Terminate waits after SIGTERM before killing the domain. Default 10s.
	TermGrace time.Duration
	// ReapBound is how long the kill and reap stage may take before Terminate/Kill report
	// ErrReapBound. Default 11s.
	ReapBound time.Duration
	// NoFile is the worker's RLIMIT_NOFILE (soft and hard), applied by EnterWorker. Default 1024.
	NoFile uint64
	// Mode forces a cgroup mode; ModeAuto (default) picks the best one that verifies.
	Mode Mode
	// WorkerPath is the executable the preflight probe launches and the default Spec.Path.
	// Default "/proc/self/exe" (never $PATH).
	WorkerPath string
	// WorkerArgs are the arguments (argv[1:]) under which WorkerPath calls EnterWorker first
	// thing, e.g. []string{"worker"}. Used by the probe. Default none.
	WorkerArgs []string
	// Containment selects the containment beyond cgroups (see Containment). Default
	// ContainAuto: every layer the kernel offers.
	Containment Containment
	// GuestUID and GuestGID are the host identity contained workers run as (the root of their
	// user namespace maps to it). Default: DefaultGuestID when the supervisor is root, else the
	// supervisor's own uid and gid (the only identity an unprivileged process can map).
	GuestUID, GuestGID int
	// TempDirBytes is the size of a contained domain's temp dir (Spec.TempDir): a tmpfs of its
	// own in the domain's mount namespace, whose pages are charged to the domain's memory
	// cgroup. Default 0: half the domain's memory limit (512 MiB at the default 1 GiB), so that
	// a write past it fails with ENOSPC while the domain still has the other half to run in;
	// a size at or above the memory limit leaves the memory limit the only bound (an OOM kill).
	TempDirBytes int64
	// ForkHere makes the supervisor fork contained workers itself instead of through its
	// launcher process (see launcher_linux.go), which it uses by default in the modes with v1
	// groups (hybrid, v1). The tests run the containment suite both ways.
	ForkHere bool
}

// DomainLimits are the memory and pids limits of a domain whose Spec asks for memory and pids:
// each is the configured one where the Spec's is 0 (Spec.MemoryLimit, Spec.PidsLimit). The one
// place that decides it: Start, and a caller that accounts for a domain before starting it.
func (c Config) DomainLimits(memory, pids int64) (int64, int64) {
	if memory <= 0 {
		memory = c.MemoryLimit
	}
	if pids <= 0 {
		pids = c.PidsLimit
	}
	return memory, pids
}

// WithDefaults returns c with every zero field replaced by its documented default.
func (c Config) WithDefaults() Config {
	if c.Parent == "" {
		c.Parent = DefaultParent
	}
	if c.MemoryLimit <= 0 {
		c.MemoryLimit = DefaultMemoryLimit
	}
	if c.PidsLimit <= 0 {
		c.PidsLimit = DefaultPidsLimit
	}
	if c.TermGrace <= 0 {
		c.TermGrace = DefaultTermGrace
	}
	if c.ReapBound <= 0 {
		c.ReapBound = DefaultReapBound
	}
	if c.NoFile == 0 {
		c.NoFile = DefaultNoFile
	}
	if c.WorkerPath == "" {
		c.WorkerPath = DefaultWorkerPath
	}
	return c
}

// tempDirBytes is the size of the temp dir of a domain with memory limit mem.
func (c Config) tempDirBytes(spec, mem int64) int64 {
	switch {
	case spec > 0:
		return spec
	case c.TempDirBytes > 0:
		return c.TempDirBytes
	}
	return mem / 2
}

// Spec describes one worker launch.
type Spec struct {
	// ID names the domain's cgroup directory ([A-Za-z0-9._-], at most 64 bytes, unique per
	// Supervisor). Default: a generated "w<n>".
	ID string
	// Path is the executable. Default Config.WorkerPath ("/proc/self/exe").
	Path string
	// Args are argv[1:]; argv[0] is Path.
	Args []string
	// Env is the worker's whole environment ("KEY=value"); nothing is inherited. Build it with
	// AllowEnv. Start appends the STEWARD_ISOLATION_* variables itself and rejects entries that
	// use those names or go-plugin's PLUGIN_* names.
	Env []string
	// ExtraFiles are the only descriptors the worker inherits besides stdio: ExtraFiles[i] is
	// fd ExtraFD(i) (3+i) in the worker.
	ExtraFiles []*os.File
	// Stdout and Stderr receive the worker's output; nil means /dev/null.
	Stdout, Stderr io.Writer
	// MemoryLimit and PidsLimit override the Config defaults for this domain when > 0.
	MemoryLimit, PidsLimit int64
	// Network keeps the host's network namespace for a contained domain (an S3 store); false
	// gives it one of its own without interfaces.
	Network bool
	// Gateway, when not 0, is a TCP port: the domain gets a network namespace of its own (as
	// without Network) with lo up and a listener on 127.0.0.1:Gateway there, which the
	// supervisor takes over (Domain.Gateway) before any engine code runs; Contain lets the
	// worker connect to that port only. It needs contained domains and Network false (else
	// ErrInvalidSpec). Default 0: none.
	Gateway uint16
	// Policy is what the contained worker may reach once it calls Contain (which may add to it).
	Policy Policy
	// TempDir is the domain's private temp dir (a host path): a contained domain gets a tmpfs
	// of its own mounted there in its mount namespace (noexec, nosuid, nodev; nothing of it
	// reaches the host's directory), with TMPDIR, HOME and the working directory there.
	TempDir string
	// TempDirBytes, when > 0, is the size of the temp dir's tmpfs for this domain. Default
	// Config.TempDirBytes, or half the domain's memory limit.
	TempDirBytes int64
	// CPUs, when it names fewer CPUs than the supervisor runs on (Supervisor.CPUs), are the
	// only ones the worker is born allowed on; its threads and children inherit them until it
	// calls WidenCPUs. A CPU the supervisor does not run on fails Start with ErrInvalidSpec.
	CPUs []int
}

// Outcome is what is known about a domain once it is down. Facts about the cgroup (OOMKilled,
// PeakMemory) are read after every process was reaped, never from asynchronous events.
type Outcome struct {
	// ExitCode of the main process, or -1 if a signal ended it or it has not exited.
	ExitCode int `json:"exit_code"`
	// Signal that ended the main process (0 if none), and its name ("SIGKILL").
	Signal     int    `json:"signal,omitempty"`
	SignalName string `json:"signal_name,omitempty"`
	// OOMKilled: the domain's oom_kill counter rose during its life.
	OOMKilled bool `json:"oom_killed"`
	// PeakMemory in bytes (v1 memory.max_usage_in_bytes, v2 memory.peak); 0 if unknown.
	PeakMemory int64 `json:"peak_memory"`
	// Wall is the time from launch to the main process's exit.
	Wall time.Duration `json:"wall_ns"`
	// Stage is how far the kill ladder went: "exited" (nothing to signal), "term", "kill".
	Stage string `json:"stage,omitempty"`
	// AllReaped: the cgroup is empty and every descendant the domain can be proven to own was
	// reaped.
	AllReaped bool `json:"all_reaped"`
	// Survivors counts processes of the domain still alive or unreaped when the ladder ended.
	Survivors int `json:"survivors"`
}

// Report is the preflight's result, returned to hosts by steward.hello. Plain JSON, no steward
// types.
type Report struct {
	// Mode that verified, or "none".
	Mode Mode `json:"mode"`
	// Verified: a probe child was placed and every limit read back as written.
	Verified bool `json:"verified"`
	// Host is the layout detected: "unified", "hybrid", "legacy" or "unavailable".
	Host string `json:"host"`
	// Controllers used by the verified mode (e.g. "memory", "pids", "freezer", "unified").
	Controllers []string `json:"controllers,omitempty"`
	// Limits read back from the probe cgroup.
	MemoryLimit int64 `json:"memory_limit,omitempty"`
	SwapLimit   int64 `json:"swap_limit"`
	PidsLimit   int64 `json:"pids_limit,omitempty"`
	// DomainLimits lists each limit and setting written into every domain's cgroups (memory,
	// swap off, swappiness, group OOM kill, pids) and whether the mode enforces it.
	DomainLimits []DomainLimit `json:"domain_limits,omitempty"`
	// BornInCgroup: workers are created inside their cgroup (CLONE_INTO_CGROUP), so limits and
	// kill cover them from their first instruction.
	BornInCgroup bool `json:"born_in_cgroup"`
	// Barrier: workers wait on a barrier pipe until placed in v1 cgroups.
	Barrier bool `json:"barrier"`
	// Cgroups are this supervisor's own cgroup directories, one per hierarchy the verified mode
	// uses: <hierarchy root>/<Parent>/<pid>-<start time>. Every worker domain is a child
	// directory of each; all of them are removed when the supervisor closes, and a later
	// supervisor removes those of a dead one (their owner no longer runs).
	Cgroups []string `json:"cgroups,omitempty"`
	// Reason the verified mode was not better, or why nothing verified.
	Reason string `json:"reason,omitempty"`
	// Parent says under which cgroups the worker domains live and why.
	Parent ParentReport `json:"parent"`
	// Checks are the requirements of isolation, each ok or not with what to do: what
	// `steward doctor` prints, from this same preflight.
	Checks []Check `json:"checks,omitempty"`
	// Attempts lists each mode tried and why it failed, best first.
	Attempts []Attempt `json:"attempts,omitempty"`
	// Containment lists the layers enforced on every worker domain beyond its cgroups.
	Containment ContainmentReport `json:"containment"`
}

// Attempt is one mode's preflight result.
type Attempt struct {
	Mode   Mode   `json:"mode"`
	Error  string `json:"error,omitempty"`
	Passed bool   `json:"passed"`
}

// ParentReport says which cgroup parent the supervisor used and why.
type ParentReport struct {
	// Source is "configured" (Config.Parent names it) or "delegated" (ParentAuto found it).
	Source string `json:"source"`
	// Dirs are the parent directories, one per hierarchy the verified mode uses (all mounted
	// ones when nothing verified).
	Dirs []string `json:"dirs,omitempty"`
	// Leaf are the cgroups the process moved itself into (ParentAuto, alone in its cgroup).
	Leaf []string `json:"leaf,omitempty"`
	// Why explains the choice per hierarchy ("memory: own cgroup /x is delegated to uid 998; ...").
	Why []string `json:"why,omitempty"`
}

// Check is one requirement of worker isolation.
type Check struct {
	// Name of the requirement: "cgroup mode", "delegation", "controller memory", "pidfd", ...
	Name string `json:"name"`
	// OK: the requirement is met.
	OK bool `json:"ok"`
	// Detail is what was found.
	Detail string `json:"detail,omitempty"`
	// Fix says what to do when it is not met.
	Fix string `json:"fix,omitempty"`
	// Optional: a missing optional requirement costs a better mode, not isolation itself.
	Optional bool `json:"optional,omitempty"`
}
