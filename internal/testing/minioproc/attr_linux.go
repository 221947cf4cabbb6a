package minioproc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// serverAttr puts MinIO in its own process group and kills it when the thread that started it
// exits (PDEATHSIG), so a crashed test or campaign never leaves a server behind.
func serverAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux architecture
// Go supports (the kernel's sysconf(_SC_CLK_TCK)).
const clockTicks = 100

// cpuOf is the user and system CPU time of process pid so far, all its threads, live and
// exited (/proc/<pid>/stat, to the clock tick).
func cpuOf(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// comm may hold spaces and ')': the fields start after the last ')', state first, so
	// utime and stime (fields 14 and 15) are the 12th and 13th after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var ticks uint64
	for _, v := range f[11:13] {
		t, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += t
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}
