package isolation

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// Clone flags of a contained domain. CLONE_NEWCGROUP is not among them: the worker unshares
// its cgroup namespace itself once it is placed, so that the namespace's root is its domain
// and not the supervisor's cgroup (a v1/hybrid child is moved after birth).
const containCloneFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS

// guest returns the host uid and gid a contained domain runs as.
func (c Config) guest() (uid, gid int) {
	uid, gid = c.GuestUID, c.GuestGID
	if uid <= 0 {
		uid = os.Geteuid()
		if uid == 0 {
			uid = DefaultGuestID
		}
	}
	if gid <= 0 {
		gid = os.Getegid()
		if gid == 0 || c.GuestUID > 0 {
			gid = uid
		}
	}
	return uid, gid
}

// containAttr adds the namespaces and the guest identity to sys: the child is uid/gid 0 of a
// new user namespace whose only mapping is that root to the guest on the host, so it holds no
// capability in the initial namespace and owns nothing of the host but what the guest owns.
// PDEATHSIG is left to EnterWorker: Go's fork path compares getppid with the parent's pid, and
// in a new PID namespace getppid is 0, so the child would kill itself.
func containAttr(cfg Config, sys *syscall.SysProcAttr, network bool) {
	uid, gid := cfg.guest()
	sys.Cloneflags |= containCloneFlags
	if !network {
		sys.Cloneflags |= unix.CLONE_NEWNET
	}
	guestMaps(sys, uid, gid)
	sys.Pdeathsig = 0
}

// guestMaps makes the child root of its new user namespace, mapped to the guest's uid and gid
// (the launcher sets the same for the forks it does).
func guestMaps(sys *syscall.SysProcAttr, uid, gid int) {
	sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
	sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
	sys.GidMappingsEnableSetgroups = false
	sys.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}
}

// openExecutable opens the worker's executable (O_PATH) for execThrough.
func openExecutable(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// execThrough makes the child exec its executable through an inherited descriptor: the guest
// may lack search permission on the directories above it (a test binary in a 0700 build
// directory, a binary in the service user's home), but execve of /proc/self/fd/N checks only
// the file itself. EnterWorker closes the descriptor.
func execThrough(exe *os.File, files []*os.File, env []string) (string, []*os.File, []string) {
	n := strconv.Itoa(len(files))
	return "/proc/self/fd/" + n, append(files, exe), append(env, EnvExecFD+"="+n)
}

// systemRead are the trees every contained worker may read and execute: the system's binaries,
// libraries and configuration, and its own /proc (its PID namespace only).
var systemRead = []string{"/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys/devices/system/cpu"}

// systemDevices may be opened read-write by every contained worker.
var systemDevices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// enterCgroupNamespace puts every thread of the process in one new cgroup namespace rooted at
// the domain. unshare(CLONE_NEWCGROUP) moves only the calling thread, and a Go process has
// several: one thread unshares, then every thread (the first included, a no-op for it) joins
// that namespace through psx, so the threads the runtime starts later are cloned from threads
// already inside, and an execve from any thread keeps it.
func enterCgroupNamespace() error {
	fail := func(op string, err error) error {
		return fmt.Errorf("%w: own cgroup namespace: %s: %w", ErrContainment, op, err)
	}
	runtime.LockOSThread()
	err := unix.Unshare(unix.CLONE_NEWCGROUP)
	var fd int
	if err == nil {
		fd, err = unix.Open("/proc/thread-self/ns/cgroup", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	runtime.UnlockOSThread()
	if err != nil {
		return fail("unshare", err)
	}
	defer unix.Close(fd)
	if _, _, e := psx.Syscall3(unix.SYS_SETNS, uintptr(fd), unix.CLONE_NEWCGROUP, 0); e != 0 {
		return fail("join it on every thread", e)
	}
	return nil
}

// Contain is the last step before engine code runs in a worker launched by a Supervisor: it
// makes the launch's policy (EnvPolicy) merged with extra hold for every thread of the process
// and everything it starts afterwards — the write paths bound writable, then a Landlock domain
// (read and execute: the system's trees and Policy.Read; write, never execute: the temp dir
// and Policy.Write; TCP connect: Policy.Connect only; no signals or abstract sockets out of the
// domain, and from ABI 9 no pathname socket made outside it), every capability dropped for
// good, and the seccomp filter. A path of extra that the mount namespace hides (it shows the
// system's trees and the launch's Policy only) is ErrInvalidSpec. It is a no-op when the
// worker was not born contained (ContainOff). It may be called once.
func Contain(extra Policy) error {
	if os.Getenv(EnvContain) != "1" {
		return nil
	}
	base, err := decodePolicy(os.Getenv(EnvPolicy))
	if err != nil {
		return err
	}
	if err := extra.check(); err != nil {
		return err
	}
	if err := checkShown(extra); err != nil {
		return err
	}
	p := base.merge(extra)
	runtime.LockOSThread() // for good: see dropCapabilities
	for _, d := range p.mounts() {
		if err := bindTree(d); err != nil {
			return err
		}
	}
	if err := restrictLandlock(p); err != nil {
		return err
	}
	if err := dropCapabilities(); err != nil {
		return err
	}
	if err := loadSeccomp(); err != nil {
		return err
	}
	_ = os.Unsetenv(EnvContain)
	_ = os.Unsetenv(EnvPolicy)
	return nil
}

// writableAccess is what a contained worker may do in its temp dir and Policy.Write: read,
// write, create and remove files, directories, symlinks and sockets, never execute what it
// can write, make a FIFO or a device node. A variable for the tests that take one layer of the
// temp dir's no-exec rule away to prove the other still holds.
var writableAccess landlock.AccessFSSet = ll.AccessFSReadFile | ll.AccessFSReadDir | ll.AccessFSWriteFile | ll.AccessFSTruncate |
	ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSym | ll.AccessFSMakeSock

func restrictLandlock(p Policy) error {
	abi, err := ll.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return nil // reported by the probe; ContainRequire refused to start without it
	}
	readable := existing(append(append([]string(nil), systemRead...), p.Read...))
	read := landlock.RODirs(readable...)
	if p.Exec != nil { // nothing runs but the engine itself
		read = landlock.PathAccess(ll.AccessFSReadFile|ll.AccessFSReadDir, readable...)
	}
	rules := []landlock.Rule{
		read,
		landlock.PathAccess(ll.AccessFSExecute|ll.AccessFSReadFile, existing(p.Exec)...),
		landlock.RWFiles(existing(systemDevices)...),
		landlock.PathAccess(writableAccess, existing(append([]string{tempDir}, p.Write...))...).WithRefer(),
	}
	for _, port := range p.Connect {
		rules = append(rules, landlock.ConnectTCP(port))
	}
	// V9 where the kernel has it: connect(2) and sendmsg(2) to a pathname unix socket made
	// outside the domain refused (no rule grants it); below ABI 9 only the mount namespace
	// keeps the host's sockets out of reach (mounts_linux.go).
	fd, flags, err := landlock.V9.BestEffort().NewRulesetFD(rules...)
	if err != nil {
		return fmt.Errorf("%w: landlock: %w", ErrContainment, err)
	}
	if fd < 0 {
		return nil // nothing this kernel can restrict
	}
	defer unix.Close(fd)
	// Every thread at once: one call with TSYNC (ABI 8), else one psx broadcast. Restrict would
	// broadcast no_new_privs first, which every thread has had since the worker's birth.
	if abi >= 8 {
		err = ll.LandlockRestrictSelf(fd, flags|ll.FlagRestrictSelfTSync)
	} else {
		err = ll.AllThreadsLandlockRestrictSelf(fd, flags)
	}
	if err != nil {
		return fmt.Errorf("%w: landlock: %w", ErrContainment, err)
	}
	return nil
}

// ExecClosure is what executing path needs from Landlock: the file it resolves to and, for an
// ELF executable, its program interpreter (the dynamic loader the kernel opens for execution),
// resolved too. It is for Policy.Exec.
func ExecClosure(path string) []string {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil
	}
	out := []string{real}
	f, err := elf.Open(real)
	if err != nil {
		return out // a script: its interpreter line is the caller's to list
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, min(prog.Filesz, 4096))
		if _, err := prog.ReadAt(b, 0); err == nil {
			if interp, err := filepath.EvalSymlinks(strings.TrimRight(string(b), "\x00")); err == nil {
				out = append(out, interp)
			}
		}
	}
	return out
}

// existing keeps the paths that exist (Landlock refuses a rule on a missing path).
func existing(paths []string) []string {
	out := paths[:0:0]
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// Securebits: root of the user namespace gains nothing at execve, and nothing can undo it.
// NOROOT, NO_SETUID_FIXUP and NO_CAP_AMBIENT_RAISE set and locked; KEEP_CAPS locked off.
const lockedNoRoot = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<5 | 1<<6 | 1<<7

// dropCapabilities empties the capability sets of every thread (psx: one broadcast per call):
// securebits first, set and locked, so that the user namespace's root regains nothing at execve
// and nothing can undo it; then the permitted/effective/inheritable sets, which empties the
// ambient set too (the kernel keeps ambient ⊆ permitted ∩ inheritable at capset). The
// bounding set, which only bounds what an execve may grant, is emptied on the calling thread
// alone — 41 broadcasts cost milliseconds per launch, and with NOROOT locked and no_new_privs
// (no file capabilities) no execve on any thread can grant anything. Contain locks the calling
// goroutine to its thread, so a trampoline's execve leaves from the thread whose set is empty.
func dropCapabilities() error {
	all := func(name string, nr, a1, a2, a3 uintptr) error {
		if _, _, e := psx.Syscall6(nr, a1, a2, a3, 0, 0, 0); e != 0 { // prctl wants its unused arguments 0
			return fmt.Errorf("%w: %s: %w", ErrContainment, name, e)
		}
		return nil
	}
	if err := all("securebits", unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, lockedNoRoot, 0); err != nil {
		return err
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("%w: drop bounding cap %d: %w", ErrContainment, c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	return all("capset", unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
}

// refusedSyscalls fail with EPERM in every contained worker: debugging and memory access to
// other processes, mounts and namespaces, kernel code and keys, io_uring (which bypasses the
// filter), and the clock and machine-wide switches. Names must exist on amd64 and arm64.
var refusedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"setns", "unshare",
	"bpf", "perf_event_open", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"keyctl", "add_key", "request_key",
	"io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd",
	"open_by_handle_at", "name_to_handle_at",
	"swapon", "swapoff", "reboot", "syslog", "acct", "quotactl", "vhangup",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
}

// namespaceCloneFlags are refused in clone(2); clone3 passes its flags in memory the filter
// cannot read, so it fails with ENOSYS and libc falls back to clone.
var namespaceCloneFlags = []uint64{unix.CLONE_NEWUSER, unix.CLONE_NEWNS, unix.CLONE_NEWPID, unix.CLONE_NEWNET,
	unix.CLONE_NEWIPC, unix.CLONE_NEWUTS, unix.CLONE_NEWCGROUP}

// socketFamilies are the only families socket(2) may create in a contained worker: unix (the
// protocol's and Python multiprocessing's sockets), inet and inet6 (the gateway on lo), and
// netlink (libc's getaddrinfo and Go's net list interfaces through it). Every other family —
// AF_VSOCK (the hypervisor's host), AF_PACKET, AF_ALG, AF_BLUETOOTH, … — fails EAFNOSUPPORT,
// as on a kernel built without it. socketpair(2) may make unix pairs only.
var socketFamilies = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// refuseExecMemfd: memfd_create(2) without MFD_NOEXEC_SEAL fails with EPERM, so that no memfd
// a worker makes can be executed (execve of /proc/self/fd/N or execveat): a memfd lives on no
// mount the domain has, so neither the temp dir's noexec nor Landlock (which leaves the
// kernel's internal mounts alone) would stop a program written into one. A sealed memfd works
// as before but for its execute bits. A variable for the test that takes it away.
var refuseExecMemfd = true

// memfdFlagsArg is memfd_create(2)'s flags argument.
const memfdFlagsArg = 1

// socketFamilyArg is the family argument of socket(2) and socketpair(2).
const socketFamilyArg = 0

// onlyFamilies matches a call of the syscall name whose family is none of families. The
// comparison is of the whole 64-bit register: a family with high bits set (which the kernel
// would truncate to an allowed-looking int) matches too, and is refused.
func onlyFamilies(name string, families []uint64) seccomp.NameWithConditions {
	nc := seccomp.NameWithConditions{Name: name}
	for _, f := range families {
		nc.Conditions = append(nc.Conditions, seccomp.Condition{Argument: socketFamilyArg, Operation: seccomp.NotEqual, Value: f})
	}
	return nc
}

func seccompPolicy() seccomp.Policy {
	var clone []seccomp.NameWithConditions
	for _, f := range namespaceCloneFlags {
		clone = append(clone, seccomp.NameWithConditions{Name: "clone",
			Conditions: []seccomp.Condition{{Argument: cloneFlagsArg, Operation: seccomp.BitsSet, Value: f}}})
	}
	families := []seccomp.NameWithConditions{onlyFamilies("socket", socketFamilies), onlyFamilies("socketpair", socketFamilies[:1])}
	var memfd []seccomp.NameWithConditions
	if refuseExecMemfd {
		memfd = append(memfd, seccomp.NameWithConditions{Name: "memfd_create",
			Conditions: []seccomp.Condition{{Argument: memfdFlagsArg, Operation: seccomp.BitsNotSet, Value: unix.MFD_NOEXEC_SEAL}}})
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: refusedSyscalls},
			{Action: seccomp.ActionErrno, NamesWithCondtions: clone},
			{Action: errnoAction(unix.ENOSYS), Names: []string{"clone3"}},
			{Action: errnoAction(unix.EAFNOSUPPORT), NamesWithCondtions: families},
			{Action: seccomp.ActionErrno, NamesWithCondtions: memfd},
		},
	}
}

func errnoAction(e unix.Errno) seccomp.Action {
	return seccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(e))
}

// seccompProgram is the filter a contained worker loads: the policy's program behind a check
// that refuses (ENOSYS) every system call made through another ABI than the native one. The
// policy's own program lets a foreign ABI through untouched (its arch check jumps to the
// default action, allow), and on amd64 the i386 ABI (int 0x80) stays open to any process where
// the kernel has IA32 emulation: socketcall, unshare, io_uring_setup and every other refused
// call would pass that way.
func seccompProgram() ([]unix.SockFilter, error) {
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, err
	}
	p := seccompPolicy()
	insts, err := p.Assemble()
	if err != nil {
		return nil, err
	}
	const archOffset = 4 // seccomp_data.arch
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: archOffset},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 1, K: uint32(native.ID)},
		{Code: unix.BPF_RET | unix.BPF_K, K: uint32(errnoAction(unix.ENOSYS))},
	}
	for _, in := range insts { // jumps are relative: the prefix moves none of them
		raw, err := in.Assemble()
		if err != nil {
			return nil, err
		}
		prog = append(prog, unix.SockFilter{Code: raw.Op, Jt: raw.Jt, Jf: raw.Jf, K: raw.K})
	}
	return prog, nil
}

// seccompFilter is seccompProgram, assembled once per process (0.1 ms of a contained launch):
// EnterWorker starts it in the background, beside the wait at the barrier and the mounts, and
// loadSeccomp takes the result.
var seccompFilter = sync.OnceValues(seccompProgram)

// loadSeccomp installs the filter on every thread (TSYNC); no_new_privs is set on all of them
// since the worker's birth.
func loadSeccomp() error {
	if !seccomp.Supported() {
		return nil // reported by the probe
	}
	fail := func(err error) error { return fmt.Errorf("%w: seccomp: %w", ErrContainment, err) }
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil { // set since birth; the kernel wants it on the caller
		return fail(err)
	}
	prog, err := seccompFilter()
	if err != nil {
		return fail(err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	switch {
	case e != 0:
		return fail(e)
	case r != 0: // TSYNC: the thread that could not be synchronised
		return fail(fmt.Errorf("thread %d could not take the filter", r))
	}
	return nil
}

// cloneFlagsArg is clone(2)'s flags argument on amd64 and arm64.
const cloneFlagsArg = 0

// probeContainment finds which layers this kernel and identity offer: it starts WorkerPath as
// a contained probe child (no cgroup: that is the mode probe's job) that builds its mount
// namespace and applies Contain before it exits with probeExitCode. ok reports whether workers
// can be born contained; the report lists every layer either way.
func probeContainment(cfg Config) (rep ContainmentReport, ok bool) {
	rep.Mode = string(cfg.Containment)
	if rep.Mode == "" {
		rep.Mode = "auto"
	}
	if cfg.Containment == ContainOff {
		rep.Layers = []Layer{{Name: "containment", Detail: "off (--containment off): workers share the sidecar's namespaces and uid"}}
		return rep, false
	}
	uid, gid := cfg.guest()
	err := runContainedProbe(cfg)
	ns := Layer{Name: "user namespace", Enforced: err == nil,
		Detail: fmt.Sprintf("the worker is root of its own user namespace, mapped to host %d:%d; no capability in the initial namespace", uid, gid)}
	if err != nil {
		ns.Detail = fmt.Sprintf("a contained probe child failed: %v", err)
	} else {
		rep.Guest = fmt.Sprintf("%d:%d", uid, gid)
	}
	rep.Layers = append(rep.Layers, ns,
		Layer{Name: "namespaces", Enforced: err == nil, Detail: "pid (the worker is init of its own), mount, ipc, uts, cgroup (rooted at its domain); network: a namespace of its own with no interface but lo, down unless the domain has a gateway"},
		Layer{Name: "gateway", Enforced: err == nil, Detail: "a domain started with a gateway port reaches storage only through it: in its own network namespace, lo alone, where the sidecar accepts on 127.0.0.1:<port> (a listener the domain's entry code made and handed over before any engine code ran, keeping no copy); TCP connect to that port only and no TCP bind (Landlock), no socket family but unix, inet, inet6 and netlink (seccomp)"},
		Layer{Name: "mounts", Enforced: err == nil, Detail: "every mount read-only and nosuid but its temp dir; /proc of its own PID namespace; its working directory its temp dir"},
		Layer{Name: "host paths", Enforced: err == nil, Detail: fmt.Sprintf("every entry of / but %s lies under an empty read-only tmpfs (a file under /dev/null), and so do /dev/shm, /dev/mqueue and the sockets in /dev; only the trees its launch names (an engine's installation) are shown again: no pathname unix socket of the host (/tmp, /run and /var/run, /dev/shm, /home, the sidecar's own directories) has a name in the domain, whatever its mode. Sockets below the system's trees stay reachable as their mode allows; %s", strings.Join(keptRoot, ", "), unixSocketLandlock())},
		Layer{Name: "temp dir", Enforced: err == nil, Detail: fmt.Sprintf("a tmpfs of its own at its temp dir (TMPDIR, HOME), %d bytes by default (half the domain's memory limit, whose charge its pages share: a write past it fails ENOSPC, not an OOM kill), mounted noexec, nosuid and nodev; Landlock lets it read, write and make files, directories, symlinks and sockets there, never execute, make a FIFO or a device node; gone with the domain's mount namespace", cfg.tempDirBytes(0, cfg.MemoryLimit))},
		Layer{Name: "no_new_privs", Enforced: true, Detail: "from birth: set on the thread that forks the worker, so every thread and child has it"},
	)
	abi, lerr := ll.LandlockGetABIVersion()
	land := Layer{Name: "landlock", Enforced: err == nil && lerr == nil && abi >= 4,
		Detail: fmt.Sprintf("ABI %d: read the system's trees and the engine's, execute only an engine's own command (the built-in worker: the system's) and nothing it can write, write its temp dir, TCP connect to the store's or gateway's port only, no TCP bind, no signals or abstract sockets out of its domain", abi)}
	if lerr != nil || abi < 4 {
		land.Detail = fmt.Sprintf("Landlock ABI ≥ 4 is needed (filesystem and TCP rules); this kernel offers %d", abi)
		if lerr != nil {
			land.Detail += " (" + lerr.Error() + ")"
		} else if abi >= 1 {
			land.Detail += ": its filesystem rules are applied all the same; TCP rules and scoping are not, and the domain's own network and PID namespaces keep it from other hosts' ports, signals and abstract sockets"
		}
	}
	sc := Layer{Name: "seccomp", Enforced: err == nil && seccomp.Supported(),
		Detail: fmt.Sprintf("%d syscalls refused (EPERM: ptrace, process_vm_*, mount family, setns/unshare, bpf, perf_event_open, kexec, modules, keys, io_uring, clocks), namespace flags refused in clone, clone3 ENOSYS, socket families but unix, inet, inet6 and netlink EAFNOSUPPORT (socketpair: unix only), memfd_create without MFD_NOEXEC_SEAL EPERM (no executable memfd), every call through a foreign ABI (i386 on amd64) ENOSYS", len(refusedSyscalls))}
	if !seccomp.Supported() {
		sc.Detail = "the kernel has no seccomp filter mode"
	}
	caps := Layer{Name: "capabilities", Enforced: err == nil, Detail: "none, even inside its user namespace: ambient, permitted and effective sets empty on every thread, bounding set empty on the thread that runs the engine, securebits locked (root regains nothing at execve)"}
	rep.Layers = append(rep.Layers, land, sc, caps)
	if err == nil {
		rep.TempDirBytes = cfg.tempDirBytes(0, cfg.MemoryLimit)
	}
	return rep, err == nil
}

// unixSocketLandlock says what Landlock adds for pathname unix sockets on this kernel.
func unixSocketLandlock() string {
	abi, err := ll.LandlockGetABIVersion()
	if err == nil && abi >= 9 {
		return fmt.Sprintf("Landlock ABI %d also refuses connect(2) and sendmsg(2) to a pathname socket made outside the domain", abi)
	}
	return fmt.Sprintf("Landlock ABI %d covers no connect(2) to a pathname socket (ABI 9 does) and seccomp cannot read the path: the mount namespace alone keeps them out of reach", abi)
}

// runContainedProbe starts the contained probe child and waits for it (bounded).
func runContainedProbe(cfg Config) error {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer w.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		r.Close()
		return err
	}
	defer errR.Close()
	// The probe hands a gateway listener over as a worker of Spec.Gateway does.
	gw, gwChild, err := newGateway(probeGatewayPort, "")
	if err != nil {
		r.Close()
		errW.Close()
		return err
	}
	defer gw.close()
	closeChildEnds := func() {
		r.Close()
		errW.Close()
		gwChild.Close()
	}
	// It builds its mount namespace as every domain does, a temp dir's tmpfs included.
	tmp, err := os.MkdirTemp("", "steward-probe-")
	if err != nil {
		closeChildEnds()
		return err
	}
	defer os.Remove(tmp)
	env := []string{EnvProbe + "=1", EnvParent + "=" + strconv.Itoa(os.Getpid()), EnvBarrierFD + "=3", EnvContain + "=1",
		EnvNoFile + "=" + strconv.FormatUint(cfg.NoFile, 10), EnvGatewayFD + "=4", EnvGatewayPort + "=" + strconv.Itoa(probeGatewayPort),
		EnvTmp + "=" + tmp, EnvTmpBytes + "=" + strconv.FormatInt(cfg.tempDirBytes(0, cfg.MemoryLimit), 10)}
	sys := &syscall.SysProcAttr{Setpgid: true}
	containAttr(cfg, sys, false)
	exe, err := openExecutable(cfg.WorkerPath)
	if err != nil {
		closeChildEnds()
		return err
	}
	defer exe.Close()
	execPath, files, env := execThrough(exe, []*os.File{devnull, devnull, errW, r, gwChild}, env)
	attr := &os.ProcAttr{Env: env, Files: files, Sys: sys}
	started := make(chan *os.Process, 1)
	failed := make(chan error, 1)
	done := make(chan *os.ProcessState, 1)
	onDyingThread(func() {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			failed <- err
			return
		}
		p, err := os.StartProcess(execPath, append([]string{cfg.WorkerPath}, cfg.WorkerArgs...), attr)
		if err != nil {
			failed <- err
			return
		}
		started <- p
		st, _ := p.Wait()
		done <- st
	})
	var p *os.Process
	select {
	case err := <-failed:
		closeChildEnds()
		return err
	case p = <-started:
	}
	closeChildEnds()          // the child holds its own copies now
	_, _ = w.Write([]byte{1}) // a child that died already is reported by its exit below
	stderr := make(chan string, 1)
	go func() { // ends at EOF: once the child (and anything it started) is gone
		b, _ := io.ReadAll(io.LimitReader(errR, 4096))
		stderr <- strings.TrimSpace(string(b))
	}()
	var st *os.ProcessState
	select {
	case st = <-done:
	case <-time.After(10 * time.Second):
		_ = p.Kill()
		st = <-done
	}
	msg := <-stderr
	if code := st.ExitCode(); code != probeExitCode {
		return fmt.Errorf("exited %v: %s", st, msg)
	}
	// The child has exited: its message, if it sent one, is queued already.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = gw.listener(ctx)
	return err
}

// probeGatewayPort is the port the contained probe listens on in its own network namespace.
const probeGatewayPort = 9

// KillSelf ends the calling process with SIGKILL, as a crash would, also when it is the init of
// its own PID namespace (a contained worker is), where the kernel drops a kill(2) of itself: the
// signal is queued to the calling thread with si_code SI_KERNEL (rt_tgsigqueueinfo), which a
// thread may do only to itself and which the kernel does not let init ignore. It does not return.
func KillSelf() {
	runtime.LockOSThread() // the thread that queues is the thread named
	var info [128]byte     // siginfo_t: si_signo, si_errno, si_code
	*(*int32)(unsafe.Pointer(&info[0])) = int32(unix.SIGKILL)
	*(*int32)(unsafe.Pointer(&info[8])) = siKernel
	_, _, _ = unix.Syscall6(unix.SYS_RT_TGSIGQUEUEINFO, uintptr(os.Getpid()), uintptr(unix.Gettid()), uintptr(unix.SIGKILL), uintptr(unsafe.Pointer(&info[0])), 0, 0)
	_ = unix.Kill(os.Getpid(), unix.SIGKILL) // not contained: the plain way works as well
	select {}
}

const siKernel = 0x80
