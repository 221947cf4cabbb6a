package isolation

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testenv"
)

// TestWorkerBornOnOneCPUWidens starts a worker on one of the supervisor's CPUs and reads, from
// outside, the affinity of each of its threads: all on that CPU at birth (GOMAXPROCS 1), all on
// every CPU of the supervisor after WidenCPUs, the threads it started afterwards included
// (GOMAXPROCS follows). Uncontained and contained (WidenCPUs runs under seccomp there, with
// every capability dropped), in each real mode.
func TestWorkerBornOnOneCPUWidens(t *testing.T) {
	needCgroups(t)
	for _, mode := range realModes(t) {
		for _, contain := range []Containment{ContainOff, ContainRequire} {
			t.Run(fmt.Sprintf("%s/%s", mode, contain), func(t *testing.T) {
				s := newSupervisor(t, mode, func(c *Config) { c.Containment = contain })
				all := s.CPUs()
				if len(all) < 2 {
					testenv.Unavailable(t, fmt.Sprintf("one CPU only (%v): nothing to narrow", all))
				}
				one := all[len(all)-1]
				rep, repW, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				goR, goW, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer rep.Close()
				defer goW.Close()
				env := []string{}
				if contain == ContainRequire {
					env = append(env, "STEWARD_TEST_CONTAIN=1")
				}
				d, err := s.Start(context.Background(), Spec{Env: workerEnv("cpus", env...), ExtraFiles: []*os.File{repW, goR}, CPUs: []int{one}})
				repW.Close()
				goR.Close()
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				br := bufio.NewReader(rep)
				next := func(want string) string {
					t.Helper()
					_ = rep.SetReadDeadline(time.Now().Add(20 * time.Second))
					l, err := br.ReadString('\n')
					if err != nil || !strings.HasPrefix(l, want) {
						t.Fatalf("report %q (%v), want %s…", l, err, want)
					}
					return strings.Fields(l)[0]
				}
				if got, want := next("born-"), "born-1"; got != want {
					t.Fatalf("GOMAXPROCS at birth: %s, want %s", got, want)
				}
				born := threadCPUs(t, d.Pid())
				for tid, cpus := range born {
					if !slices.Equal(cpus, []int{one}) {
						t.Fatalf("thread %d born on %v, want [%d] (all: %v)", tid, cpus, one, born)
					}
				}
				if _, err := goW.Write([]byte{1}); err != nil {
					t.Fatal(err)
				}
				if got, want := next("widened-"), "widened-"+strconv.Itoa(len(all)); got != want {
					t.Fatalf("GOMAXPROCS after WidenCPUs: %s, want %s", got, want)
				}
				// The eight locked threads block right after reporting, some of them on threads
				// the runtime has to create: wait until a thread born after the widening is there.
				newThreads := func(now map[int][]int) (n int) {
					for tid := range now {
						if _, ok := born[tid]; !ok {
							n++
						}
					}
					return n
				}
				wide := threadCPUs(t, d.Pid())
				for deadline := time.Now().Add(10 * time.Second); newThreads(wide) == 0; wide = threadCPUs(t, d.Pid()) {
					if time.Now().After(deadline) {
						t.Fatalf("no thread started after WidenCPUs: %d threads, %d at birth", len(wide), len(born))
					}
					time.Sleep(time.Millisecond)
				}
				for tid, cpus := range wide {
					if !slices.Equal(cpus, all) {
						t.Fatalf("thread %d on %v after WidenCPUs, want %v (all: %v)", tid, cpus, all, wide)
					}
				}
				if _, err := goW.Write([]byte{1}); err != nil {
					t.Fatal(err)
				}
				if o, err := d.Wait(context.Background()); err != nil || o.ExitCode != 0 {
					t.Fatalf("worker: %+v %v", o, err)
				}
				if _, err := d.Terminate(context.Background()); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// threadCPUs reads Cpus_allowed_list of every thread of pid (host view).
func threadCPUs(t *testing.T, pid int) map[int][]int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]int{}
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "status"))
		if err != nil {
			continue // exited meanwhile
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				cpus, err := parseCPURanges(strings.TrimSpace(v))
				if err != nil {
					t.Fatal(err)
				}
				out[tid] = cpus
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no threads read under %s", dir)
	}
	return out
}

// parseCPURanges reads the kernel's list format ("0-2,5").
func parseCPURanges(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// TestStartRefusesForeignCPUs: Spec.CPUs may only narrow the supervisor's own set.
func TestStartRefusesForeignCPUs(t *testing.T) {
	needCgroups(t)
	s := newSupervisor(t, ModeAuto, nil)
	all := s.CPUs()
	if len(all) == 0 {
		t.Fatal("supervisor reports no CPUs")
	}
	for _, cpus := range [][]int{{all[len(all)-1] + 1}, {-1}, {all[0], all[0]}} {
		d, err := s.Start(context.Background(), Spec{Env: workerEnv("noop"), CPUs: cpus})
		if !errors.Is(err, ErrInvalidSpec) || d != nil {
			t.Fatalf("Start with CPUs %v = %v, %v; want ErrInvalidSpec", cpus, d, err)
		}
	}
	// The whole set is no narrowing: the worker runs as without it, with nothing to widen to.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d, err := s.Start(context.Background(), Spec{Env: workerEnv("envcheck"), ExtraFiles: []*os.File{w}, CPUs: all})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var rep envReport
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	if o, err := d.Wait(context.Background()); err != nil || o.ExitCode != 0 {
		t.Fatalf("worker: %+v %v", o, err)
	}
	for _, kv := range rep.Env {
		if strings.HasPrefix(kv, EnvCPUs+"=") {
			t.Fatalf("a worker started on every CPU got %s", kv)
		}
	}
}
