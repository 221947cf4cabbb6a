package isolation

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"
)

// procStat is the part of /proc/<pid>/stat isolation needs.
type procStat struct {
	state   byte
	ppid    int
	session int
	start   uint64 // starttime in clock ticks since boot: with the pid, a process identity
}

func readProcStat(pid int) (procStat, error) {
	b, err := readFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// comm may contain spaces and ')': the fields start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var st procStat
	st.state = f[0][0]
	st.ppid, _ = strconv.Atoi(f[1])
	st.session, _ = strconv.Atoi(f[3])
	st.start, _ = strconv.ParseUint(f[19], 10, 64)
	return st, nil
}

// tgidOf is the thread-group id (the process) of the task tid, from /proc/<tid>/status: a
// thread's /proc entry resolves though readdir does not list it.
func tgidOf(tid int) (int, error) {
	b, err := readFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no Tgid in /proc/%d/status", tid)
}

// OwnerName identifies a live process across pid reuse: "<pid>-<starttime>" (its start in clock
// ticks since boot). Isolation names its cgroup owner directories so, the sidecar its temp
// directory; OwnerAlive tells a later process whether that owner still runs.
func OwnerName(pid int) (string, error) {
	st, err := readProcStat(pid)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d-%d", pid, st.start), nil
}

// OwnerAlive reports whether the process named by an OwnerName still exists: false once the pid
// is gone, is a zombie, or belongs to a later process with another start time.
func OwnerAlive(name string) bool {
	p, start, ok := strings.Cut(name, "-")
	if !ok {
		return false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return false
	}
	st, err := readProcStat(pid)
	return err == nil && strconv.FormatUint(st.start, 10) == start && st.state != 'Z' && st.state != 'X'
}

// readProcCgroup returns pid's v1 paths by controller and its unified path. A zombie keeps its
// unified path (with " (deleted)" once the cgroup is gone) but shows "/" in v1 hierarchies.
func readProcCgroup(pid int) (map[string]string, string, error) {
	// readFile, not the library's os.Open: the runtime's poller would take 5 more system
	// calls on the launch path to register the file and back off.
	b, err := readFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return nil, "", err
	}
	v1, unified, err := cgroups.ParseCgroupFromReaderUnified(bytes.NewReader(b))
	return v1, strings.TrimSuffix(unified, " (deleted)"), err
}

// procCgroupPath is pid's path in one hierarchy of /proc/<pid>/cgroup: a v1 controller's, or
// the unified one's for controller "" (without the " (deleted)" a zombie's may carry). It is
// the membership test the ladder runs for every process, so it parses just the line it needs.
func procCgroupPath(pid int, controller string) (string, bool) {
	return cgroupPathIn("/proc/"+strconv.Itoa(pid)+"/cgroup", controller)
}

// cgroupPathIn is procCgroupPath of a cgroup file: /proc/<pid>/cgroup, or a thread's
// /proc/<pid>/task/<tid>/cgroup.
func cgroupPathIn(file, controller string) (string, bool) {
	b, err := readFile(file)
	if err != nil {
		return "", false
	}
	for len(b) > 0 {
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		_, rest, ok := bytes.Cut(line, []byte(":"))
		ctrls, path, ok2 := bytes.Cut(rest, []byte(":"))
		if !ok || !ok2 {
			continue
		}
		if controller == "" && len(ctrls) == 0 {
			return strings.TrimSuffix(string(path), " (deleted)"), true
		}
		if controller != "" {
			for _, c := range bytes.Split(ctrls, []byte(",")) {
				if string(c) == controller {
					return string(path), true
				}
			}
		}
	}
	return "", false
}

// ownChildren lists the children of this process's thread-group leader. An orphan re-parents
// to the first live thread of its subreaper, which is the leader (the Go runtime never lets the
// main thread exit), so every re-parented descendant of a domain is listed here. A worker itself
// is the child of its launcher thread and is reaped by its own Wait, not found through this.
func ownChildren() ([]int, error) {
	return readPids(fmt.Sprintf("/proc/self/task/%d/children", os.Getpid()))
}

// childrenOf lists pid's children (including zombies) from its threads' children files.
func childrenOf(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, _ := readDirNames(dir)
	var out []int
	for _, tid := range tasks {
		b, err := readFile(dir + tid + "/children")
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// readDirNames lists a /proc directory in one open (filepath.Glob would also stat each entry).
func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// allPids lists every process on the host.
func allPids() []int {
	ents, _ := os.ReadDir("/proc")
	out := make([]int, 0, len(ents))
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// pidfdOpen pins a process: signals and waits through the fd can never reach a later process
// that reuses the number.
func pidfdOpen(pid int) (int, error) {
	for {
		fd, err := unix.PidfdOpen(pid, 0)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// pidfdSignal sends sig through fd; a process already gone is not an error.
func pidfdSignal(fd int, sig unix.Signal) error {
	err := unix.PidfdSendSignal(fd, sig, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

// pidfdReap reaps the process behind fd if it is an exited child of ours. It returns reaped
// (it was reaped now), gone (it no longer exists for us to reap: reaped by someone else or
// not our child and dead), or neither (still running, or a zombie of another parent).
func pidfdReap(fd int) (reaped, gone bool, err error) {
	var info unix.Siginfo
	for {
		info = unix.Siginfo{}
		err = unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return info.Signo == int32(unix.SIGCHLD), false, nil
	case errors.Is(err, unix.ECHILD):
		// Not our child (yet): it is gone only if it can no longer be signalled.
		return false, errors.Is(unix.PidfdSendSignal(fd, 0, nil, 0), unix.ESRCH), nil
	default:
		return false, false, err
	}
}
