package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// MachineCPU is the CPU time all cores have spent since boot (/proc/stat's first line): busy is
// every state but idle and iowait (guest time is counted in user already, so not again), idle is
// idle and iowait. Differences over a run give the whole machine's share: every process, the
// kernel's threads too, which no process's rusage shows.
func MachineCPU() (busy, idle time.Duration, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: first line %q is not the cpu totals", line)
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on every architecture Go supports
	for i, s := range f[1:] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %q: %w", s, err)
		}
		switch {
		case i == 3 || i == 4:
			idle += time.Duration(v) * tick
		case i < 8:
			busy += time.Duration(v) * tick
		}
	}
	return busy, idle, nil
}
