package isolation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// parentResult is where domains go, as found before any mode is probed.
type parentResult struct {
	report ParentReport
	checks []Check
	errs   map[string]error // hierarchy → why it has no parent
}

// parentTree resolves Config.Parent: a configured name (checked, the same in every hierarchy)
// or ParentAuto (the process's own delegated cgroups). It reports one delegation check per
// mounted hierarchy.
func parentTree(cfg Config, j *changes) (tree, parentResult, error) {
	pr := parentResult{errs: map[string]error{}}
	if cfg.Parent == ParentAuto {
		d := resolveAuto(j)
		pr.report.Source = "delegated"
		pr.errs = d.errs
		for _, h := range mountedHierarchies() {
			c := Check{Name: "delegation " + h, Optional: h == hFreezer || h == hUnified}
			if err, bad := d.errs[h]; bad {
				c.Detail = err.Error()
				c.Fix = delegationFix(h)
				pr.report.Why = append(pr.report.Why, h+": "+err.Error())
			} else {
				c.OK, c.Detail = true, d.why[h]
				pr.report.Why = append(pr.report.Why, h+": "+d.why[h])
				if l, ok := d.leaf[h]; ok {
					pr.report.Leaf = append(pr.report.Leaf, filepath.Join(hierarchyRoot(h), l))
				}
			}
			pr.checks = append(pr.checks, c)
		}
		return d.tree, pr, nil
	}
	pr.report.Source = "configured"
	pr.report.Why = []string{fmt.Sprintf("--cgroup-parent %s: the same directory in every hierarchy", cfg.Parent)}
	if err := checkParent(cfg.Parent); err != nil {
		pr.checks = append(pr.checks, Check{Name: "cgroup parent", Detail: err.Error(), Fix: "give a clean relative path, or auto"})
		return tree{}, pr, err
	}
	t := fixedTree(cfg.Parent)
	t.changes = j
	for _, h := range mountedHierarchies() {
		c := Check{Name: "delegation " + h, Optional: h == hFreezer || h == hUnified}
		dir := t.abs(h)
		if err := writableAncestor(dir); err != nil {
			c.Detail, c.Fix = err.Error(), fmt.Sprintf("run as root, or use --cgroup-parent auto in a cgroup delegated to uid %d", os.Geteuid())
		} else {
			c.OK, c.Detail = true, fmt.Sprintf("%s can be created by uid %d", dir, os.Geteuid())
		}
		pr.checks = append(pr.checks, c)
	}
	return t, pr, nil
}

// writableAncestor checks that dir, or the nearest ancestor that exists, may be written.
func writableAncestor(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			return writable(d, false)
		}
		if d == "/" {
			return fmt.Errorf("%s: no existing ancestor", dir)
		}
	}
}

func delegationFix(h string) string {
	if h == hUnified && unifiedMount() == v1Root {
		return "start steward in a cgroup delegated to its user: systemd Delegate=yes (see deploy/systemd), " +
			"or a container with its own cgroup namespace and a writable /sys/fs/cgroup"
	}
	return fmt.Sprintf("chown the sidecar's cgroup (and its cgroup.procs) in the %s hierarchy to uid %d "+
		"and start steward in it (what Delegate=yes does on v2), or run as root", h, os.Geteuid())
}

// layoutChecks reports the cgroup layout and each controller isolation can use.
func layoutChecks(host string) []Check {
	out := []Check{{Name: "cgroup mode", OK: host != "unavailable", Detail: "host layout " + host,
		Fix: "mount cgroup2 at /sys/fs/cgroup (systemd.unified_cgroup_hierarchy=1) or the v1 memory and pids controllers"}}
	u := unifiedMount()
	var v2 []string
	if u != "" {
		v2 = v2Controllers(u)
	}
	for _, c := range []string{hMemory, hPids, hFreezer} {
		ck := Check{Name: "controller " + c, Optional: c == hFreezer}
		switch {
		case slices.Contains(v2, c):
			ck.OK, ck.Detail = true, "cgroup2 at "+u
		case v1Mounted(c):
			ck.OK, ck.Detail = true, "v1 at "+filepath.Join(v1Root, c)
		default:
			ck.Detail = "not mounted in v1 and not offered by cgroup2"
			ck.Fix = fmt.Sprintf("enable the %s controller (kernel config, cgroup_enable=%s, or delegate it: Delegate=%s)", c, c, c)
			if c == hFreezer {
				ck.Fix = "needed only by v1 mode (no unified hierarchy to kill through cgroup.kill)"
			}
		}
		out = append(out, ck)
	}
	uc := Check{Name: "unified hierarchy", Optional: true}
	if u != "" {
		uc.OK, uc.Detail = true, fmt.Sprintf("cgroup2 at %s, controllers [%s]", u, strings.Join(v2, " "))
	} else {
		uc.Detail, uc.Fix = "no cgroup2 mounted", "mount cgroup2 (at /sys/fs/cgroup/unified on hybrid) for birth placement and cgroup.kill"
	}
	return append(out, uc)
}

// processChecks reports the process primitives supervision rests on.
func processChecks(cfg Config) []Check {
	pc := Check{Name: "pidfd", OK: true, Detail: "pidfd_open works"}
	if err := checkPidfd(); err != nil {
		pc.OK, pc.Detail, pc.Fix = false, err.Error(), "Linux ≥ 5.3 is needed (pidfd_open, pidfd_send_signal)"
	}
	dc := Check{Name: "pdeathsig", OK: true, Detail: "a child started with PDEATHSIG SIGKILL died with the thread that started it"}
	if err := checkPdeathsig(cfg); err != nil {
		dc.OK, dc.Detail = false, err.Error()
		dc.Fix = "workers would outlive a crashed sidecar: check that WorkerPath runs and that no security module blocks prctl(PR_SET_PDEATHSIG)"
	}
	return []Check{pc, dc}
}

// checkPdeathsig proves PDEATHSIG the way supervision relies on it: a probe child (held on a
// barrier it is never given) is started from a locked thread that then exits; the kernel must
// SIGKILL the child. PR_GET_PDEATHSIG inside the child would not do: the setting belongs to the
// child's first thread, and a Go child may ask from any other.
func checkPdeathsig(cfg Config) error {
	cfg = cfg.WithDefaults()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer w.Close() // if PDEATHSIG failed, EOF on the barrier ends the child
	env := []string{EnvProbe + "=1", EnvParent + "=" + strconv.Itoa(os.Getpid()), EnvBarrierFD + "=3"}
	attr := &os.ProcAttr{Env: env, Files: []*os.File{devnull, devnull, devnull, r},
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
	started := make(chan *os.Process, 1)
	failed := make(chan error, 1)
	onDyingThread(func() {
		p, err := os.StartProcess(cfg.WorkerPath, append([]string{cfg.WorkerPath}, cfg.WorkerArgs...), attr)
		if err != nil {
			failed <- err
			return
		}
		started <- p
	})
	var p *os.Process
	select {
	case err := <-failed:
		_ = r.Close()
		return fmt.Errorf("start %s: %w", cfg.WorkerPath, err)
	case p = <-started:
	}
	_ = r.Close()
	done := make(chan *os.ProcessState, 1)
	go func() { st, _ := p.Wait(); done <- st }()
	select {
	case st := <-done:
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return nil
		}
		return fmt.Errorf("the PDEATHSIG probe child ended with %v, not SIGKILL", st)
	case <-time.After(5 * time.Second):
		_ = p.Signal(syscall.SIGKILL)
		<-done
		return errors.New("a child started with PDEATHSIG SIGKILL outlived the thread that started it by 5 s")
	}
}

func checkPidfd() error {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	return unix.Close(fd)
}

// onDyingThread runs fn on a goroutine locked to an OS thread that ends when fn returns. That
// thread must not be the process's main thread: the runtime never ends the main thread (it parks
// it instead), so a PDEATHSIG tied to it would never fire. A goroutine that finds itself there
// keeps the main thread locked, so that the retry lands on another thread, until fn returned.
func onDyingThread(fn func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			fn()
			return // still locked: the thread ends with this goroutine
		}
		done := make(chan struct{})
		onDyingThread(func() {
			defer close(done)
			fn()
		})
		<-done
		runtime.UnlockOSThread()
	}()
}

// ProbeExecutable starts path with args as a worker probe (EnvProbe: EnterWorker runs its
// checks, unplaced and uncontained, and exits with the probe's code) and reports whether it got
// there: whether this process can start workers from path at all. A file on a noexec mount, one
// a security module will not let this process execute, a damaged copy or another program fail
// it. ctx bounds the wait.
func ProbeExecutable(ctx context.Context, path string, args []string) error {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{EnvProbe + "=1", EnvParent + "=" + strconv.Itoa(os.Getpid())}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code == probeExitCode { // -1 when it never ran
		return nil
	} else if err == nil {
		err = fmt.Errorf("exit %d", code)
	}
	return fmt.Errorf("%w: %s as a worker probe: %w (want exit %d)", ErrNotExecutable, path, err, probeExitCode)
}
