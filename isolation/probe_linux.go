package isolation

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containerd/cgroups/v3"
)

var probeSeq atomic.Uint64

// Probe is the preflight: it finds the cgroup parent (Config.Parent, or under ParentAuto the
// process's own delegated cgroups, moving itself into a leaf where it is alone), then for each
// candidate mode (Config.Mode, or best first under ModeAuto) it creates a probe cgroup under the
// parent, writes the limits and reads them back, launches WorkerPath WorkerArgs as a probe child
// (held behind a barrier; EnterWorker exits with a probe code),
// verifies /proc/<pid>/cgroup, and removes it all. The first mode that passes is reported, with
// one Check per requirement.
//
// Probe is a check: it leaves the cgroup tree as it found it, on success and on failure. What it
// changed outside its own directories (its move into the leaf, the leaf and parents it created,
// controllers it enabled in a subtree_control it found) is undone last first before it returns;
// the last Check, "cgroups restored", says what was undone or what could not be. A Supervisor
// keeps those changes instead: they are what its domains run in.
func Probe(cfg Config) Report {
	cfg = cfg.WithDefaults()
	owner, err := OwnerName(os.Getpid())
	if err != nil {
		return Report{Mode: ModeNone, Host: hostLayout(), Reason: err.Error()}
	}
	j := &changes{}
	t, pr, err := parentTree(cfg, j)
	if err != nil {
		r := failedReport(cfg, pr, err)
		r.Checks = append(r.Checks, j.restoreCheck())
		return r
	}
	r := probe(context.Background(), cfg, t, owner, pr)
	_ = removeOwnerDirs(t, owner) // errors mean a live Supervisor of this process uses it (tests)
	r.Checks = append(r.Checks, j.restoreCheck())
	return r
}

// failedReport is the report when no parent could be found at all.
func failedReport(cfg Config, pr parentResult, err error) Report {
	r := Report{Mode: ModeNone, Host: hostLayout(), Reason: err.Error(), Parent: pr.report}
	r.Checks = append(layoutChecks(r.Host), pr.checks...)
	r.Checks = append(r.Checks, processChecks(cfg)...)
	r.Checks = append(r.Checks, Check{Name: "isolation", Detail: err.Error(), Fix: "fix the failed checks above"})
	return r
}

func hostLayout() string {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return "unified"
	case cgroups.Hybrid:
		return "hybrid"
	case cgroups.Legacy:
		return "legacy"
	default:
		return "unavailable"
	}
}

// candidates lists the modes to try, best first: v2 kills atomically and needs no barrier,
// hybrid still gets birth placement and cgroup.kill, v1 has neither.
func candidates(forced Mode, host string) []Mode {
	if forced != ModeAuto {
		return []Mode{forced}
	}
	switch host {
	case "unified":
		return []Mode{ModeV2}
	case "hybrid":
		return []Mode{ModeV2, ModeHybrid, ModeV1}
	case "legacy":
		return []Mode{ModeV1}
	}
	return nil
}

func probe(ctx context.Context, cfg Config, t tree, owner string, pr parentResult) Report {
	r := Report{Mode: ModeNone, Host: hostLayout(), Parent: pr.report}
	var contained bool
	r.Containment, contained = probeContainment(cfg)
	var failures []error
	for _, m := range candidates(cfg.Mode, r.Host) {
		err := probeMode(ctx, cfg, m, t, owner, pr, &r, contained, nil)
		a := Attempt{Mode: m, Passed: err == nil}
		if err != nil {
			a.Error = err.Error()
			failures = append(failures, fmt.Errorf("%s: %w", m, err))
		}
		r.Attempts = append(r.Attempts, a)
		if err == nil {
			r.Mode, r.Verified = m, true
			break
		}
	}
	if len(failures) > 0 {
		r.Reason = errors.Join(failures...).Error()
		if !r.Verified && errors.Is(errors.Join(failures...), fs.ErrPermission) {
			r.Reason = fmt.Sprintf("%s\n%s", permissionHint(cfg.Parent), r.Reason)
		}
	} else if !r.Verified {
		r.Reason = "no cgroup hierarchy mounted"
	}
	hs := hierarchiesOf(r.Mode)
	if !r.Verified {
		hs = t.hierarchies()
	}
	r.Parent.Dirs = nil
	for _, h := range hs {
		r.Parent.Dirs = append(r.Parent.Dirs, t.abs(h))
	}
	r.Checks = append(layoutChecks(r.Host), pr.checks...)
	r.Checks = append(r.Checks, processChecks(cfg)...)
	iso := Check{Name: "isolation", OK: r.Verified, Detail: "mode " + string(r.Mode) + " verified: limits read back, probe child placed"}
	if !r.Verified {
		iso.Detail, iso.Fix = r.Reason, "index.mutate is refused until a mode verifies: fix the failed checks above"
	}
	if pidfdErr := checkPidfd(); pidfdErr != nil && r.Verified {
		r.Verified, r.Mode = false, ModeNone
		r.Reason = pidfdErr.Error()
		iso.OK, iso.Detail, iso.Fix = false, r.Reason, "steward identifies processes by pidfd only: run on Linux ≥ 5.3 (pidfd_open)"
	}
	r.Checks = append(r.Checks, iso)
	if r.Verified {
		r.Checks = append(r.Checks, domainLimitsCheck(r.DomainLimits))
	}
	r.Checks = append(r.Checks, containmentChecks(cfg, r.Containment)...)
	if missing := r.Containment.Missing(); cfg.Containment == ContainRequire && len(missing) > 0 && r.Verified {
		r.Verified, r.Mode = false, ModeNone
		r.Reason = fmt.Sprintf("%v: containment required, missing: %s", ErrContainment, strings.Join(missing, ", "))
	}
	return r
}

// containmentChecks turns the containment layers into doctor lines; a missing layer fails only
// under ContainRequire (index.mutate is refused then), else it is reported with its fix.
func containmentChecks(cfg Config, cr ContainmentReport) []Check {
	var out []Check
	for _, l := range cr.Layers {
		c := Check{Name: "containment " + l.Name, OK: l.Enforced || cfg.Containment != ContainRequire, Detail: l.Detail}
		if !l.Enforced {
			c.Detail = "not enforced: " + l.Detail
			c.Fix = "workers run with less containment: a kernel with user namespaces (kernel.unprivileged_userns_clone=1 or root), Landlock ABI ≥ 4 and seccomp; --require-containment refuses to start without them"
		}
		out = append(out, c)
	}
	return out
}

// available checks the mounts a mode needs before touching anything.
func available(m Mode) error {
	switch m {
	case ModeV2:
		mount := unifiedMount()
		if mount == "" {
			return errors.New("no cgroup2 hierarchy mounted")
		}
		have := map[string]bool{}
		for _, c := range v2Controllers(mount) {
			have[c] = true
		}
		if !have["memory"] || !have["pids"] {
			return fmt.Errorf("cgroup2 at %s does not offer memory and pids (controllers: %v)", mount, v2Controllers(mount))
		}
	case ModeHybrid, ModeV1:
		need := []string{"memory", "pids"}
		if m == ModeV1 {
			need = append(need, "freezer")
		} else if unifiedMount() != filepath.Join(v1Root, "unified") {
			return errors.New("no cgroup2 hierarchy at /sys/fs/cgroup/unified beside v1")
		}
		for _, c := range need {
			if !v1Mounted(c) {
				return fmt.Errorf("v1 %s controller not mounted", c)
			}
		}
	default:
		return fmt.Errorf("%w: unknown mode %q", ErrInvalidSpec, m)
	}
	return nil
}

// via, if set, is the launcher the probe child is forked by.
func probeMode(ctx context.Context, cfg Config, m Mode, t tree, owner string, pr parentResult, r *Report, contained bool, via *launcher) error {
	if err := available(m); err != nil {
		return err
	}
	for _, h := range hierarchiesOf(m) {
		if _, ok := t.parent[h]; !ok {
			return fmt.Errorf("no cgroup parent in the %s hierarchy: %w", h, pr.errs[h])
		}
	}
	id := fmt.Sprintf("probe-%d", probeSeq.Add(1))
	cg, err := newDomainCgroups(m, t, path.Join(owner, id), cfg.MemoryLimit, cfg.PidsLimit)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	argv := append([]string{cfg.WorkerPath}, cfg.WorkerArgs...)
	d, err := launch(ctx, cfg, id, cg, launchSpec{path: cfg.WorkerPath, argv: argv, env: []string{EnvProbe + "=1"}, barrier: true, contain: contained, via: via})
	if err != nil {
		_ = cg.remove()
		if errors.Is(err, ErrPlacement) {
			// Typically the child never blocked on the barrier and already exited.
			err = fmt.Errorf("%w (the probe child must call EnterWorker first: check Config.WorkerArgs)", err)
		}
		return err
	}
	o, werr := d.Wait(ctx)
	_, kerr := d.Kill(ctx)
	cerr := d.Close()
	switch {
	case werr != nil:
		return fmt.Errorf("probe child did not exit: %w", werr)
	case o.ExitCode != probeExitCode:
		return fmt.Errorf("%w: probe child %s exited %d signal %d: it must call EnterWorker first (Config.WorkerArgs)",
			ErrPlacement, cfg.WorkerPath, o.ExitCode, o.Signal)
	case kerr != nil:
		return kerr
	case cerr != nil:
		return cerr
	}
	r.MemoryLimit, r.SwapLimit, r.PidsLimit, r.DomainLimits = cg.mem, cg.swap, cg.pids, cg.limits
	r.BornInCgroup = cg.v2 != nil
	r.Barrier = cg.needsBarrier()
	switch m {
	case ModeV2:
		r.Controllers = []string{"memory", "pids"}
	case ModeHybrid:
		r.Controllers = []string{"memory", "pids", "unified"}
	case ModeV1:
		r.Controllers = []string{"memory", "pids", "freezer"}
	}
	return nil
}

// permissionHint tells a person without the rights what steward needs, ahead of the raw errors.
func permissionHint(parent string) string {
	if parent == ParentAuto {
		return fmt.Sprintf("uid %d may not create cgroups in its own cgroups (--cgroup-parent auto): run steward as root, or "+
			"start it in a cgroup delegated to its user (systemd Delegate=yes on v2; on v1/hybrid a subtree chowned to it "+
			"in memory and pids, plus freezer or the unified hierarchy)", os.Geteuid())
	}
	return fmt.Sprintf("uid %d may not create cgroups under %q: run steward as root, or give its user a "+
		"writable (delegated) cgroup subtree and use --cgroup-parent auto (or name the subtree) in every hierarchy it uses "+
		"(memory and pids, plus freezer or the unified hierarchy)", os.Geteuid(), parent)
}
