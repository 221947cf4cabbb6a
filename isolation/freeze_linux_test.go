package isolation

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cpuTime is the user+system time pid has used (its /proc stat, in clock ticks of 10 ms).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// TestFreezeThaw: a frozen domain's worker, spinning on a CPU, gets no CPU time until it is
// thawed; it spins again after Thaw; a domain frozen again is killed and reaped like any other.
// Spinning is judged by the time to 100 ms of CPU (at most 5 s), not by the CPU of a fixed window:
// on a loaded 2-core machine (load 14) the running worker got only 80–90 ms in 300 ms; frozen, it
// may use 20 ms of 1 s.
func TestFreezeThaw(t *testing.T) {
	needCgroups(t)
	for _, mode := range realModes(t) {
		t.Run(string(mode), func(t *testing.T) {
			s := newSupervisor(t, mode, nil)
			d, read := startReporting(t, s, "spin", Spec{})
			read(1)
			used := func(window time.Duration) time.Duration {
				before := cpuTime(t, d.Pid())
				time.Sleep(window)
				return cpuTime(t, d.Pid()) - before
			}
			spins := func() (time.Duration, bool) {
				t0, before := time.Now(), cpuTime(t, d.Pid())
				for time.Since(t0) < 5*time.Second {
					if cpuTime(t, d.Pid())-before >= 100*time.Millisecond {
						return time.Since(t0), true
					}
					time.Sleep(10 * time.Millisecond)
				}
				return time.Since(t0), false
			}
			if took, ok := spins(); !ok {
				t.Fatalf("the spinning worker used less than 100 ms of CPU in %v: the check below would prove nothing", took)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := d.Freeze(ctx); err != nil {
				t.Fatal(err)
			}
			if u := used(time.Second); u > 20*time.Millisecond {
				t.Errorf("frozen, the worker used %v of CPU in 1 s", u)
			}
			if err := d.Thaw(ctx); err != nil {
				t.Fatal(err)
			}
			if took, ok := spins(); !ok {
				t.Errorf("thawed, the worker used less than 100 ms of CPU in %v", took)
			}
			if err := d.Freeze(ctx); err != nil {
				t.Fatal(err)
			}
			o, err := d.Kill(context.Background())
			assertReaped(t, o, err, "kill")
			if err := d.Thaw(ctx); err == nil {
				t.Error("Thaw of a domain torn down: want an error")
			}
		})
	}
}
