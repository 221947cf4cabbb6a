package hostile

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// startFDs is what /proc/self/fd held when Main began, before this engine opened anything: the
// descriptors the sidecar's launch left it.
var startFDs map[int]string

// recordStartFDs fills startFDs. Main calls it first, with raw system calls: an os.File would
// start Go's poller, whose epoll and eventfd descriptors would then be counted as inherited.
func recordStartFDs() {
	dir, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(dir)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.ReadDirent(dir, buf)
		if err != nil {
			return
		}
		if n == 0 {
			break
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
	startFDs = map[int]string{}
	link := make([]byte, 512)
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd == dir {
			continue
		}
		n, err := unix.Readlinkat(dir, name, link)
		target := string(link[:max(n, 0)])
		if err != nil {
			target = "unreadable: " + err.Error()
		}
		startFDs[fd] = target
	}
}

// inheritedFDs looks for a descriptor the launch let through beyond ENGINE.md's five: 0 and 1
// on /dev/null, 2 the log pipe, 3 and 4 the request and answer channels. Any other (a store's
// file, a socket of the sidecar, a listener) is a way out of the domain's walls, and 0 or 1 on
// anything but /dev/null is a channel the contract does not name.
func (r *run) inheritedFDs() Finding {
	const attack = "process.inherited-fds"
	const tried = "list /proc/self/fd as the engine started: anything beyond 0, 1 (/dev/null), 2, 3 and 4 is a descriptor leaked from the sidecar"
	if startFDs == nil {
		return Finding{Attack: attack, Tried: tried, Verdict: Inconclusive, Evidence: "/proc/self/fd was unreadable at the start"}
	}
	var fds []int
	for fd := range startFDs {
		fds = append(fds, fd)
	}
	sort.Ints(fds)
	var all, wrong []string
	for _, fd := range fds {
		target := startFDs[fd]
		all = append(all, fmt.Sprintf("%d→%s", fd, target))
		switch {
		case fd <= 1 && target != "/dev/null":
			wrong = append(wrong, fmt.Sprintf("fd %d is %s, not /dev/null", fd, target))
		case fd == 2 && !strings.HasPrefix(target, "pipe:"):
			wrong = append(wrong, fmt.Sprintf("fd 2 is %s, not the log pipe", target))
		case fd > 4:
			wrong = append(wrong, fmt.Sprintf("fd %d is %s", fd, target))
		}
	}
	for fd := 0; fd <= 4; fd++ {
		if _, ok := startFDs[fd]; !ok {
			wrong = append(wrong, fmt.Sprintf("fd %d was not open", fd))
		}
	}
	ev := "at the start: " + strings.Join(all, ", ")
	if len(wrong) > 0 {
		return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: strings.Join(wrong, "; ") + "; " + ev}
	}
	return Finding{Attack: attack, Tried: tried, Verdict: Blocked, Evidence: "exactly ENGINE.md's descriptors; " + ev}
}
