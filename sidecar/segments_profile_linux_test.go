package sidecar_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/enginetest"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/rpc"
)

// BenchmarkLanceSegmentProfile: where the wall of BenchmarkLanceSegments' parallel/BTREE job
// goes (20,000,000 rows in 8 fragments, local store), for K = 2 and K = 4 segments sent together
// to a sidecar with 2 executors (2w) or one after another (1w), the four interleaved in each
// iteration. Not part of make bench (it measures phases, not goals; its name is not matched by
// make bench's -bench LanceSegments): run it by hand, e.g.
//
//	STEWARD_REQUIRE_REAL=1 go test -run '^$' -bench LanceSegmentProfile -benchtime 2x ./sidecar/
//
// Per variant it logs the medians over the iterations, in ms: the job (plan, the span of its
// SEGMENTs, the COMMIT_SEGMENTS round trip) and, over all its SEGMENT invocations, the phases of
// the sidecar's "invocation timing" line and the engine's own timing line (sidecarPhases):
// queued for an executor, to the request (thaw, gateway), the engine (open, then the segment's
// build and record until its answer), teardown, the decision, and the RPC's rest;
// seg.prestarted is the share of SEGMENTs that ran on a spare, seg.written-MB the bytes a
// SEGMENT wrote through its gateway (gateway_bytes: writes only), and cpu.* the CPU ms spent
// during the job by the workers and spares, the sidecar and the whole machine (jobCPU). With -v
// it also logs each job's start and end (Unix seconds), to match against samples of processes.
func BenchmarkLanceSegmentProfile(b *testing.B) {
	testenv.NeedRoot(b)
	l := newLanceSidecar(b, false, "--worker-memory", "1073741824", "--executors", "2", "--log-level", "debug")
	src, err := enginetest.CachedLanceFragments(l.python, l.dir, 20_000_000, 0, 8)
	if err != nil {
		b.Fatal(err)
	}
	type variant struct {
		k        int
		parallel bool
	}
	name := func(v variant) string {
		return fmt.Sprintf("K%d/%dw", v.k, map[bool]int{false: 1, true: 2}[v.parallel])
	}
	variants := []variant{{2, true}, {2, false}, {4, false}, {4, true}}
	all := map[string]map[string][]float64{}
	for _, v := range variants {
		all[name(v)] = map[string][]float64{}
	}
	for i := 0; i < b.N; i++ {
		for _, v := range variants {
			path := randID("seg-")
			if err := enginetest.LinkCopy(src, filepath.Join(l.root, path)); err != nil {
				b.Fatal(err)
			}
			testenv.GuestOwn(b, filepath.Join(l.root, path))
			cpu0 := jobCPU(b, l)
			start := time.Now()
			job, err := l.segmentJob(path, 8, v.k, v.parallel, "id", "BTREE", nil, 0, 0)
			if err != nil {
				b.Fatal(err)
			}
			wall := time.Since(start)
			cpu1 := jobCPU(b, l)
			if testing.Verbose() {
				b.Logf("job %s: %.3f to %.3f (Unix s)", name(v), float64(start.UnixMicro())/1e6, float64(start.Add(wall).UnixMicro())/1e6)
			}
			add := func(k string, x float64) { all[name(v)][k] = append(all[name(v)][k], x) }
			for k := range cpu1 {
				add("cpu."+k, cpu1[k]-cpu0[k])
			}
			add("job", ms(wall))
			add("plan", ms(job.plan))
			var commit time.Duration
			for _, c := range job.calls {
				if c.op == rpc.OpCommitSegments {
					commit = c.wall
					for k, x := range sidecarPhases(b, l, c.invocation, c.wall) {
						add("commit."+k, x)
					}
					continue
				}
				for k, x := range sidecarPhases(b, l, c.invocation, c.wall) {
					add("seg."+k, x)
				}
				t := timingLine(b, l, c.invocation)
				add("seg.prestarted", map[bool]float64{true: 1}[t["prestarted"] == true])
				if n, ok := t["gateway_bytes"].(float64); ok {
					add("seg.written-MB", n/1e6)
				}
			}
			add("commit", ms(commit))
			add("segments", ms(wall-job.plan-commit))
		}
	}
	for _, v := range variants {
		phases := all[name(v)]
		keys := make([]string, 0, len(phases))
		for k := range phases {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var line strings.Builder
		for _, k := range keys {
			if k == "seg.prestarted" {
				var n float64
				for _, x := range phases[k] {
					n += x
				}
				fmt.Fprintf(&line, " %s=%.2f", k, n/float64(len(phases[k])))
				continue
			}
			fmt.Fprintf(&line, " %s=%.0f", k, median(phases[k]))
		}
		b.Logf("profile %s:%s", name(v), line.String())
	}
}

// jobCPU is the CPU time, in ms, used so far by the sidecar's workers and spares (its cgroup
// parent's cpu.stat on the unified hierarchy), by the sidecar process itself, and by the whole
// machine (/proc/stat: every process, other helpers' too).
func jobCPU(b *testing.B, l *lanceSidecar) map[string]float64 {
	b.Helper()
	out := map[string]float64{}
	stat, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/unified", l.parent, "cpu.stat"))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "usage_usec" {
			v, _ := strconv.ParseFloat(f[1], 64)
			out["workers"] = v / 1000
		}
	}
	// The sidecar: the one process whose arguments name the parent and that is not inside it.
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmd, err1 := os.ReadFile(p + "/cmdline")
		cg, err2 := os.ReadFile(p + "/cgroup")
		if err1 != nil || err2 != nil || !strings.Contains(string(cmd), "--cgroup-parent\x00"+l.parent) || strings.Contains(string(cg), l.parent) {
			continue
		}
		st, err := os.ReadFile(p + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64) // utime, stime: fields 14 and 15 of stat
		sy, _ := strconv.ParseFloat(f[12], 64)
		out["sidecar"] = (ut + sy) * 10 // USER_HZ 100
	}
	busy, _, err := testenv.MachineCPU()
	if err != nil {
		b.Fatal(err)
	}
	out["machine"] = float64(busy.Milliseconds())
	return out
}

// timingLine is invocation inv's "invocation timing" line from the sidecar's log.
func timingLine(b *testing.B, l *lanceSidecar, inv string) map[string]any {
	b.Helper()
	for _, line := range strings.Split(l.logs.String(), "\n") {
		var m map[string]any
		if strings.Contains(line, inv) && json.Unmarshal([]byte(line), &m) == nil && m["@message"] == "invocation timing" {
			return m
		}
	}
	b.Fatalf("no timing line for %s", inv)
	return nil
}
