package plugin

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ownerName names process pid as "<pid>-<start>", its start time in clock ticks since boot
// (/proc/<pid>/stat field 22): a later process with the same pid has another name.
func ownerName(pid int) (string, error) {
	start, _, err := procStart(pid)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d-%d", pid, start), nil
}

// ownerAlive reports whether the process an ownerName names still runs: false once the pid is
// gone, a zombie, or another process's.
func ownerAlive(name string) bool {
	p, start, ok := strings.Cut(name, "-")
	pid, err := strconv.Atoi(p)
	if !ok || err != nil || pid <= 0 {
		return false
	}
	got, state, err := procStart(pid)
	return err == nil && strconv.FormatUint(got, 10) == start && state != 'Z' && state != 'X'
}

// procStart reads pid's start time and state from /proc/<pid>/stat. The command name, field 2,
// may hold spaces and parentheses: the fields are counted from its last ')'.
func procStart(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 { // state is field 3, start time field 22
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0][0], err
}
