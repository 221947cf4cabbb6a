package isolation

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// limitsRead are a domain's limits as read back, with the list hello reports (Report.DomainLimits).
type limitsRead struct {
	mem, swap, pids int64
	list            []DomainLimit
}

func (l *limitsRead) add(name, file string, v int64, enforced bool, detail string) {
	l.list = append(l.list, DomainLimit{Name: name, File: file, Value: v, Enforced: enforced, Detail: detail})
}

// readBack is the detail of a limit written and read back.
func readBack(file string, v int64) string {
	return fmt.Sprintf("%s written and read back as %d", file, v)
}

// swapUnbounded is the swap-off entry of a domain whose cgroups cannot bound swap (no
// memory.swap.max on v2, no memory.memsw.* on v1: a kernel without swap accounting). On a
// machine without swap it still holds: there is nothing to swap to.
func (l *limitsRead) swapUnbounded(missing string) {
	total := machineSwap()
	if total == 0 {
		l.add(LimitSwapOff, "", 0, true, fmt.Sprintf("no %s (the kernel does not account swap per cgroup); the machine has no swap (SwapTotal 0), so none can be used", missing))
		return
	}
	l.add(LimitSwapOff, "", 0, false, fmt.Sprintf("no %s (the kernel does not account swap per cgroup: boot with swapaccount=1); the machine has %d bytes of swap a domain may use beyond its memory limit", missing, total))
}

// exists reports whether dir/file exists.
func exists(dir, file string) bool {
	_, err := os.Stat(filepath.Join(dir, file))
	return err == nil
}

// swapTotal is the machine's SwapTotal in bytes, read once (-1 if unreadable: counted as swap).
var swapTotal struct {
	once  sync.Once
	bytes int64
}

func machineSwap() int64 {
	swapTotal.once.Do(func() {
		swapTotal.bytes = -1
		b, err := os.ReadFile("/proc/meminfo")
		if err != nil {
			return
		}
		if v, ok := meminfoBytes(string(b), "SwapTotal"); ok {
			swapTotal.bytes = v
		}
	})
	return swapTotal.bytes
}

// meminfoBytes finds "key:   N kB" in /proc/meminfo's text and returns N in bytes.
func meminfoBytes(text, key string) (int64, bool) {
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != key {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, false
		}
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		return n, true
	}
	return 0, false
}

// domainLimitsCheck is the doctor line of the domain limits: what every domain is held to, and
// what this mode cannot enforce (never a failure: the missing ones have what holds instead).
func domainLimitsCheck(ls []DomainLimit) Check {
	var on, off []string
	for _, l := range ls {
		if l.Enforced {
			on = append(on, l.Name)
		} else {
			off = append(off, l.Name)
		}
	}
	d := "written and read back in every domain: " + strings.Join(on, ", ")
	if len(off) > 0 {
		d += "; not enforced in this mode: " + strings.Join(off, ", ") + " (hello's isolation.domain_limits says why)"
	}
	return Check{Name: "domain limits", OK: true, Detail: d}
}
