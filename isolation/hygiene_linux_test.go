package isolation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func init() {
	helpers["ceiling"] = func() {
		enter()
		c, err := OwnMemoryCeiling()
		if err != nil {
			report("ceiling-error")
		} else {
			report(fmt.Sprintf("ceiling:%d:%s", c.Bytes, c.Source))
		}
		sleepForever()
	}
}

// TestOwnMemoryCeilingInADomain: a process in a domain with a 96 MiB memory limit reads its
// ceiling from that real cgroup (v1 memory.limit_in_bytes, v2 memory.max), in every mode.
func TestOwnMemoryCeilingInADomain(t *testing.T) {
	needCgroups(t)
	for _, mode := range realModes(t) {
		t.Run(string(mode), func(t *testing.T) {
			s := newSupervisor(t, mode, nil)
			const mem = 96 << 20
			d, read := startReporting(t, s, "ceiling", Spec{MemoryLimit: mem})
			if got, want := read(1)[0].kind, fmt.Sprintf("ceiling:%d:%s", mem, CeilingCgroup); got != want {
				t.Fatalf("the domain's process read %q, want %q", got, want)
			}
			o, err := d.Kill(context.Background()) // no SIGTERM stage: its grace is timing
			assertReaped(t, o, err, "kill")
		})
	}
}

// TestMemoryCeilingFakeCgroupfs computes the ceiling over fake cgroup trees: the lowest limit on
// the path up to the root wins, "max" and absent files are no limit, a path that is not visible
// is walked from its visible ancestors, and without any limit below MemTotal the machine is the
// ceiling.
func TestMemoryCeilingFakeCgroupfs(t *testing.T) {
	const memTotal = "MemTotal:        8000000 kB\nSwapTotal: 0 kB\n"
	cases := []struct {
		name   string
		cgroup string
		files  map[string]string
		want   int64
		source string
		detail string
	}{
		{name: "v2 limit at the own cgroup", cgroup: "0::/a/b\n",
			files: map[string]string{"sys/fs/cgroup/cgroup.controllers": "memory pids", "sys/fs/cgroup/a/memory.max": "max", "sys/fs/cgroup/a/b/memory.max": "1073741824"},
			want:  1 << 30, source: CeilingCgroup, detail: "/sys/fs/cgroup/a/b/memory.max"},
		{name: "v2 lower limit at an ancestor", cgroup: "0::/a/b\n",
			files: map[string]string{"sys/fs/cgroup/cgroup.controllers": "memory", "sys/fs/cgroup/a/memory.max": "536870912", "sys/fs/cgroup/a/b/memory.max": "1073741824"},
			want:  512 << 20, source: CeilingCgroup, detail: "/sys/fs/cgroup/a/memory.max"},
		{name: "v2 all max: the machine", cgroup: "0::/a\n",
			files: map[string]string{"sys/fs/cgroup/cgroup.controllers": "memory", "sys/fs/cgroup/a/memory.max": "max"},
			want:  8000000 * 1024, source: CeilingMachine, detail: "/proc/meminfo MemTotal"},
		{name: "v1 limit, path not visible below its ancestor", cgroup: "4:memory:/pod/c1\n0::/\n",
			files: map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712", "sys/fs/cgroup/memory/pod/memory.limit_in_bytes": "2147483648", "sys/fs/cgroup/unified/cgroup.controllers": ""},
			want:  2 << 30, source: CeilingCgroup, detail: "/sys/fs/cgroup/memory/pod/memory.limit_in_bytes"},
		{name: "v1 unlimited: the machine", cgroup: "9:cpu,memory:/x\n",
			files: map[string]string{"sys/fs/cgroup/memory/x/memory.limit_in_bytes": "9223372036854771712"},
			want:  8000000 * 1024, source: CeilingMachine, detail: "/proc/meminfo MemTotal"},
		{name: "a limit above MemTotal: the machine", cgroup: "0::/big\n",
			files: map[string]string{"sys/fs/cgroup/cgroup.controllers": "memory", "sys/fs/cgroup/big/memory.max": "99999999999999"},
			want:  8000000 * 1024, source: CeilingMachine, detail: "/proc/meminfo MemTotal"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"proc/meminfo": memTotal, "proc/self/cgroup": c.cgroup}
			for k, v := range c.files {
				files[k] = v
			}
			for p, v := range files {
				if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, p), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := memoryCeiling(root)
			if err != nil || got.Bytes != c.want || got.Source != c.source || got.Detail != c.detail {
				t.Fatalf("memoryCeiling = %+v, %v; want %d from %s (%s)", got, err, c.want, c.source, c.detail)
			}
		})
	}
}

// TestDomainLimitsVerifiedOrRejected: in every mode this machine runs, the preflight lists each
// domain limit (memory, swap off, swappiness, group OOM kill, pids), every enforced one with a
// file holds in a started domain what the report says, what the mode cannot do is listed as not
// enforced (v1 and hybrid: no group OOM kill; v2: no per-cgroup swappiness), and a limit the
// kernel refuses fails the start with nothing left behind.
func TestDomainLimitsVerifiedOrRejected(t *testing.T) {
	needCgroups(t)
	for _, mode := range realModes(t) {
		t.Run(string(mode), func(t *testing.T) {
			s := newSupervisor(t, mode, nil)
			lims := map[string]DomainLimit{}
			for _, l := range s.Report().DomainLimits {
				lims[l.Name] = l
			}
			for _, n := range []string{LimitMemory, LimitSwapOff, LimitSwappiness, LimitOOMGroup, LimitPids} {
				if _, ok := lims[n]; !ok {
					t.Fatalf("report lists %+v: no %q", s.Report().DomainLimits, n)
				}
			}
			if got := lims[LimitOOMGroup].Enforced; got != (mode == ModeV2) {
				t.Errorf("oom group enforced %v in mode %s: %+v", got, mode, lims[LimitOOMGroup])
			}
			if !lims[LimitMemory].Enforced || !lims[LimitPids].Enforced {
				t.Errorf("memory or pids not enforced: %+v", s.Report().DomainLimits)
			}
			var doctor *Check
			for i, c := range s.Report().Checks {
				if c.Name == "domain limits" {
					doctor = &s.Report().Checks[i]
				}
			}
			if doctor == nil || !doctor.OK || !strings.Contains(doctor.Detail, LimitPids) {
				t.Errorf("doctor's domain limits line: %+v", doctor)
			}
			if sw := lims[LimitSwapOff]; !sw.Enforced && machineSwap() == 0 {
				t.Errorf("swap off not enforced on a machine without swap: %+v", sw)
			}

			const mem, pids = 40 << 20, 24
			d, read := startReporting(t, s, "ignoreterm-no", Spec{MemoryLimit: mem, PidsLimit: pids})
			read(1)
			want := map[string]int64{}
			for _, l := range d.cg.limits {
				if l.Enforced && l.File != "" {
					want[l.File] = l.Value
				}
			}
			if want[lims[LimitMemory].File] != mem || want["pids.max"] != pids {
				t.Fatalf("domain limits %+v, want memory %d and pids %d", d.cg.limits, mem, pids)
			}
			for file, v := range want {
				got, err := readInt(filepath.Join(limitDir(s, d, file), file))
				if err != nil || got != v {
					t.Errorf("%s = %d, %v; the domain's report says %d", file, got, err, v)
				}
			}
			o, err := d.Kill(context.Background()) // no SIGTERM stage: its grace is timing
			assertReaped(t, o, err, "kill")

			// pids.max refuses values at or above PID_MAX_LIMIT: the start fails, nothing stays.
			_, err = s.Start(context.Background(), Spec{ID: "toomany", Env: workerEnv("noop"), PidsLimit: 1 << 40})
			if err == nil || !strings.Contains(err.Error(), "pids.max") {
				t.Fatalf("Start with pids.max 2^40 = %v, want a refused write of pids.max", err)
			}
			for _, root := range hierarchyRoots() {
				if _, err := os.Stat(filepath.Join(root, testParent, s.owner, "toomany")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a refused domain left %s: %v", filepath.Join(root, testParent, s.owner, "toomany"), err)
				}
			}
		})
	}
}

// limitDir is the directory of d that holds the interface file.
func limitDir(s *Supervisor, d *Domain, file string) string {
	if s.Mode() == ModeV2 {
		return domainDir(s, d)
	}
	c := "memory"
	if strings.HasPrefix(file, "pids.") {
		c = "pids"
	}
	return filepath.Join(v1Root, c, s.CgroupPath(d))
}

// TestMeminfoBytes reads /proc/meminfo's "key: N kB" lines.
func TestMeminfoBytes(t *testing.T) {
	text := "MemTotal:       25276194816 kB\nSwapTotal:             0 kB\nHugePages_Total:       3\n"
	for _, c := range []struct {
		key  string
		want int64
		ok   bool
	}{{"MemTotal", 25276194816 * 1024, true}, {"SwapTotal", 0, true}, {"HugePages_Total", 3, true}, {"Nope", 0, false}} {
		if got, ok := meminfoBytes(text, c.key); got != c.want || ok != c.ok {
			t.Errorf("%s = %d, %v; want %d, %v", c.key, got, ok, c.want, c.ok)
		}
	}
}
