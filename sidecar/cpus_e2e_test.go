package sidecar_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
)

// TestIdleSpareBornOnOneCPU: the spare an idle executor starts runs, every thread of it, on the
// last of the sidecar's CPUs; the build it then serves runs on all of them (the worker reports
// the CPUs and GOMAXPROCS its engine call got, after isolation.WidenCPUs, contained as always).
func TestIdleSpareBornOnOneCPU(t *testing.T) {
	testenv.NeedRoot(t)
	all := sidecarCPUs(t)
	e := newSidecar(t, "--executors", "1")
	e.makeDataset("cpus", 2000)
	// The spare born before any call has the network; the one started after this first call
	// is born for its dataset (a local folder), and serves the next call on it.
	first := e.params(randID("inv-"), "cpus", 1, rpc.OpCreate, "ix0", "id", rpc.IndexBTree)
	if res := e.mutate(first); res.CompletionReason != rpc.CompletionCommitted {
		t.Fatalf("first build: %+v", res)
	}
	waitFor(t, func() bool { return e.domains() == 1 })
	var pids []string
	waitFor(t, func() bool { pids = testsidecar.ProcessesIn(e.parent + "/*/"); return len(pids) > 0 })
	last := fmt.Sprint(all[len(all)-1])
	for _, pid := range pids {
		tasks, err := os.ReadDir(filepath.Join("/proc", pid, "task"))
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			b, err := os.ReadFile(filepath.Join("/proc", pid, "task", task.Name(), "status"))
			if err != nil {
				continue // exited meanwhile
			}
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) != last {
					t.Fatalf("idle spare %s thread %s on cpus %q, want %s", pid, task.Name(), strings.TrimSpace(v), last)
				}
			}
		}
	}
	p := e.params(randID("inv-"), "cpus", 2, rpc.OpCreate, "ix", "id", rpc.IndexBTree)
	if res := e.mutate(p); res.CompletionReason != rpc.CompletionCommitted {
		t.Fatalf("build on the spare: %+v", res)
	}
	assertSpareWidened(t, e, p.InvocationID, all)
}

// sidecarCPUs lists the CPUs this test (and the sidecar it starts) may run on; fewer than two
// leave nothing to narrow.
func sidecarCPUs(t *testing.T) []int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var all []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			all = append(all, c)
		}
	}
	if len(all) < 2 {
		testenv.Unavailable(t, fmt.Sprintf("one CPU only (%v): nothing to narrow", all))
	}
	return all
}

// assertSpareWidened checks in the sidecar's log that inv was served by a prestarted worker
// whose engine call ran on all the CPUs and with GOMAXPROCS to match.
func assertSpareWidened(t *testing.T, e *sidecarEnv, inv string, all []int) {
	t.Helper()
	want := fmt.Sprintf("engine call on cpus %v (GOMAXPROCS %d)", all, len(all))
	lines := strings.Split(e.logs.String(), "\n")
	if !slices.ContainsFunc(lines, func(l string) bool {
		return strings.Contains(l, inv) && strings.Contains(l, `"prestarted":true`)
	}) {
		t.Fatalf("%s was not served by the spare:\n%s", inv, e.logs.String())
	}
	if !slices.ContainsFunc(lines, func(l string) bool {
		return strings.Contains(l, inv) && strings.Contains(l, want)
	}) {
		t.Fatalf("no %q for %s in the sidecar's log:\n%s", want, inv, e.logs.String())
	}
}
