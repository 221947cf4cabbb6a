package hostile

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// unifiedRoot is where the unified hierarchy is mounted (hybrid: /sys/fs/cgroup/unified).
func unifiedRoot() string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return "/sys/fs/cgroup"
	}
	return "/sys/fs/cgroup/unified"
}

// hierarchyRoots are the mounted hierarchies the engine tries, by the name /proc/<pid>/cgroup uses.
func hierarchyRoots() map[string]string {
	return map[string]string{"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids",
		"freezer": "/sys/fs/cgroup/freezer", "": unifiedRoot()}
}

// cgroupsOf reads /proc/<pid>/cgroup: hierarchy name ("" = unified) → path.
func cgroupsOf(pid string) map[string]string {
	b, err := os.ReadFile("/proc/" + pid + "/cgroup")
	out := map[string]string{}
	if err != nil {
		return out
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

func (r *run) cgroups(_ context.Context) {
	own := cgroupsOf("self")
	roots := hierarchyRoots()
	r.emit(r.raiseLimit(own, roots, "cgroup.raise-memory", // v1: the memory+swap limit first (memory.limit_in_bytes may not exceed it).
		[]limitFile{{"memory", "memory.memsw.limit_in_bytes"}, {"memory", "memory.limit_in_bytes"}, {"", "memory.max"}}, func(old string) string {
			n, err := strconv.ParseInt(old, 10, 64)
			if err != nil {
				return ""
			}
			return strconv.FormatInt(n*4, 10)
		}))
	r.emit(r.raiseLimit(own, roots, "cgroup.raise-pids", []limitFile{{"pids", "pids.max"}, {"", "pids.max"}}, func(old string) string {
		if old == "max" {
			return ""
		}
		return "max"
	}))
	r.emit(r.escape(own, roots))
}

type limitFile struct{ hierarchy, file string }

// raiseLimit writes a higher limit into the domain's own cgroup files, reads it back, and puts
// the old value back (the attack is that the write is possible at all).
func (r *run) raiseLimit(own, roots map[string]string, attack string, files []limitFile, up func(string) string) Finding {
	tried := "find its cgroups in /proc/self/cgroup and raise"
	var ev []string
	raised := false
	var lastErr error
	var restores []func() error
	for _, lf := range files {
		tried += " " + lf.file
		p, ok := own[lf.hierarchy]
		if !ok {
			continue
		}
		file := filepath.Join(roots[lf.hierarchy], p, lf.file)
		old, err := os.ReadFile(file)
		if err != nil {
			ev = append(ev, fmt.Sprintf("%s: %s", file, errno(err)))
			if lastErr == nil {
				lastErr = err
			}
			continue
		}
		o := strings.TrimSpace(string(old))
		want := up(o)
		if want == "" {
			ev = append(ev, fmt.Sprintf("%s: %q, nothing to raise", file, o))
			continue
		}
		if err := os.WriteFile(file, []byte(want), 0); err != nil {
			ev = append(ev, fmt.Sprintf("%s: %s → %s refused: %s", file, o, want, errno(err)))
			lastErr = err
			continue
		}
		now, _ := os.ReadFile(file)
		n := strings.TrimSpace(string(now))
		ok = n == want
		raised = raised || ok
		ev = append(ev, fmt.Sprintf("%s: %s → %s accepted, read back %s", file, o, want, n))
		restores = append(restores, func() error { return os.WriteFile(file, []byte(o), 0) })
	}
	// Put the old values back, last raised first (memsw after the memory limit under it).
	for i := len(restores) - 1; i >= 0; i-- {
		if err := restores[i](); err != nil {
			ev = append(ev, "restore: "+errno(err))
		}
	}
	f := Finding{Attack: attack, Tried: tried, Verdict: verdict(raised), Evidence: strings.Join(ev, "; ")}
	if len(ev) == 0 {
		f.Verdict, f.Evidence = Blocked, fmt.Sprintf("no such hierarchy in /proc/self/cgroup: %v", own)
	}
	if !raised && lastErr != nil {
		f.Errno = errno(lastErr)
	}
	return f
}

// escape starts a lingering double-forked child, creates a cgroup at the root of every
// hierarchy it can see and moves the child there, out of its domain.
func (r *run) escape(own, roots map[string]string) Finding {
	const attack = "cgroup.escape"
	tried := "start a double-forked setsid child, mkdir a cgroup at the root of each hierarchy, write the child into its cgroup.procs"
	marker := MarkerPrefix + r.inv + ":escape"
	pid, err := spawnLinger(marker)
	if err != nil {
		return blocked(attack, tried, fmt.Errorf("could not start the child: %w", err))
	}
	f := Finding{Attack: attack, Tried: tried, Left: []string{"marker:" + marker}}
	var ev []string
	var lastErr error
	name := "hostile-escape-" + r.inv
	for h, root := range roots {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			ev = append(ev, fmt.Sprintf("mkdir %s: %s", dir, errno(err)))
			lastErr = err
			continue
		}
		f.Left = append(f.Left, dir)
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			ev = append(ev, fmt.Sprintf("move into %s: %s", dir, errno(err)))
			lastErr = err
			continue
		}
		ev = append(ev, fmt.Sprintf("moved into %s (hierarchy %q)", dir, h))
	}
	theirs := cgroupsOf(strconv.Itoa(pid))
	escaped := []string{}
	for h := range roots {
		mine, ok := own[h]
		if !ok || theirs[h] == "" {
			continue
		}
		if theirs[h] != mine && !strings.HasPrefix(theirs[h], strings.TrimSuffix(mine, "/")+"/") {
			escaped = append(escaped, fmt.Sprintf("%q: %s (domain %s)", h, theirs[h], mine))
		}
	}
	f.Verdict = verdict(len(escaped) > 0)
	f.Evidence = fmt.Sprintf("child %d; %s; out of its domain in: %v", pid, strings.Join(ev, "; "), escaped)
	if len(escaped) == 0 && lastErr != nil {
		f.Errno = errno(lastErr)
	}
	return f
}

func (r *run) processes(_ context.Context) {
	marker := MarkerPrefix + r.inv + ":orphan"
	pid, err := spawnLinger(marker)
	f := Finding{Attack: "process.orphan", Tried: "leave a double-forked setsid child that ignores SIGTERM and SIGHUP running past the answer"}
	if err != nil {
		f = blocked(f.Attack, f.Tried, fmt.Errorf("could not start it: %w", err))
	} else {
		f.Verdict, f.Left = Pending, []string{"marker:" + marker}
		f.Evidence = fmt.Sprintf("left pid %d (in this engine's view); the test looks for it after the answer", pid)
	}
	r.emit(f)
	r.emit(r.inheritedFDs())
}

// spawnLinger starts `hostile linger MARKER` (which double-forks) and returns the grandchild's pid.
func spawnLinger(marker string) (int, error) {
	cmd := helper("linger", marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.Output()
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}

// linger is the helper: "linger MARKER" starts "linger MARKER stay" in a new session, prints its
// pid and exits (the double fork); "stay" ignores SIGTERM and SIGHUP and sleeps ten minutes.
func linger(args []string) int {
	if len(args) == 1 {
		cmd := helper("linger", args[0], "stay")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "linger:", err)
			return 1
		}
		fmt.Println(cmd.Process.Pid)
		return 0
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
	time.Sleep(10 * time.Minute)
	return 0
}

// noNewPrivs starts children from several OS threads and reads NoNewPrivs of each, and of every
// thread of the engine itself.
func (r *run) noNewPrivs(_ context.Context) {
	const threads = 8
	var mu sync.Mutex
	var lacking, seen []string
	var wg sync.WaitGroup
	for i := 0; i < threads; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			runtime.LockOSThread() // fork from this very thread; never unlocked, the thread dies after
			cmd := helper("sleep")
			if err := cmd.Start(); err != nil {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("thread %d: start: %v", i, err))
				mu.Unlock()
				return
			}
			v := statusField(strconv.Itoa(cmd.Process.Pid), "NoNewPrivs")
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			mu.Lock()
			seen = append(seen, fmt.Sprintf("child %d NoNewPrivs=%s", cmd.Process.Pid, v))
			if v == "0" {
				lacking = append(lacking, "child "+strconv.Itoa(cmd.Process.Pid))
			}
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		// "0" only: a thread that exited meanwhile (the locked threads above) reads empty.
		if v := statusField("self/task/"+t.Name(), "NoNewPrivs"); v == "0" {
			lacking = append(lacking, "thread "+t.Name())
		}
	}
	r.emit(Finding{Attack: "nnp.children", Verdict: verdict(len(lacking) > 0),
		Tried:    fmt.Sprintf("start a child from each of %d locked OS threads and read NoNewPrivs in its /proc/<pid>/status, and in each of the engine's own %d threads", threads, len(tasks)),
		Evidence: fmt.Sprintf("without NoNewPrivs: %v; %s", lacking, strings.Join(seen, ", "))})
}
