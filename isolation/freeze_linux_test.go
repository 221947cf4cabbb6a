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
func TestFreezeThaw(t *testing.T) {
	needCgroups(t)
	for _, mode := range realModes(t) {
		t.Run(string(mode), func(t *testing.T) {
			s := newSupervisor(t, mode, nil)
			d, read := startReporting(t, s, "spin", Spec{})
			read(1)
			used := func() time.Duration {
				before := cpuTime(t, d.Pid())
				time.Sleep(300 * time.Millisecond)
				return cpuTime(t, d.Pid()) - before
			}
			if u := used(); u < 100*time.Millisecond {
				t.Fatalf("the spinning worker used %v of CPU in 300 ms: the check below would prove nothing", u)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := d.Freeze(ctx); err != nil {
				t.Fatal(err)
			}
			if u := used(); u > 20*time.Millisecond {
				t.Errorf("frozen, the worker used %v of CPU in 300 ms", u)
			}
			if err := d.Thaw(ctx); err != nil {
				t.Fatal(err)
			}
			if u := used(); u < 100*time.Millisecond {
				t.Errorf("thawed, the worker used only %v of CPU in 300 ms", u)
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
