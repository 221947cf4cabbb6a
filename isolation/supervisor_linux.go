package isolation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Supervisor launches workers into verified cgroups. One per sidecar process.
type Supervisor struct {
	cfg       Config
	report    Report
	tree      tree     // the parent directory in each hierarchy
	owner     string   // <pid>-<starttime>: this supervisor's directory below each parent
	leftovers []string // owner directories of dead supervisors removed by New
	cpus      []int    // the CPUs New ran on: what Spec.CPUs narrows and WidenCPUs restores

	// fork is the launcher contained workers are forked by (nil: forked here; see launcher).
	fork *launcher
	pr   parentResult // New's, for the probes that prove a launcher

	mu       sync.Mutex
	seq      uint64
	domains  map[string]*Domain
	closed   bool
	starting sync.WaitGroup // Starts between their reservation and their domain's registration
}

// New makes this process a child subreaper (so a worker's orphaned descendants re-parent to it
// and can be reaped), removes cgroups left under Parent by supervisors that are no longer
// running (killing their processes first), and runs the preflight. If no mode verifies it
// returns an error wrapping ErrIsolationUnavailable, and the Report says why.
func New(cfg Config) (*Supervisor, error) {
	cfg = cfg.WithDefaults()
	unavailable := func(err error) error {
		return &PreflightError{Report: Report{Mode: ModeNone, Host: hostLayout(), Reason: err.Error()}}
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, unavailable(opErr("set child subreaper", "", "", ErrIsolationUnavailable, err))
	}
	owner, err := OwnerName(os.Getpid())
	if err != nil {
		return nil, unavailable(opErr("identify self", "", "", ErrIsolationUnavailable, err))
	}
	t, pr, err := parentTree(cfg, nil) // serve keeps its leaf and enabled controllers for its life
	if err != nil {
		return nil, &PreflightError{Report: failedReport(cfg, pr, err)}
	}
	cpus, err := ownCPUs()
	if err != nil {
		return nil, unavailable(opErr("read own cpus", "", "", ErrIsolationUnavailable, err))
	}
	s := &Supervisor{cfg: cfg, tree: t, owner: owner, domains: map[string]*Domain{}, cpus: cpus}
	// A leftover that cannot be removed is reported but does not stop this sidecar: its own
	// directories are separate.
	s.leftovers, err = removeLeftovers(context.Background(), t)
	s.report = probe(context.Background(), cfg, t, owner, pr)
	if !s.report.Verified {
		_ = removeOwnerDirs(t, owner)
		return nil, &PreflightError{Report: s.report}
	}
	if err != nil {
		s.report.Reason = "leftover cleanup: " + err.Error()
	}
	s.report.Cgroups = ownerDirs(s.report.Mode, t, owner)
	s.pr = pr
	s.startLauncher()
	return s, nil
}

// startLauncher starts the launcher contained workers are forked by, where the verified mode
// allows it (see launcher), from the worker executable; a launcher that fails to start or to
// fork the probe is stopped and the supervisor forks its workers itself. Either way the
// report's checks say which.
func (s *Supervisor) startLauncher() {
	check := Check{Name: "containment launcher", OK: true}
	defer func() { s.report.Checks = append(s.report.Checks, check) }()
	switch {
	case !s.Contained():
		check.Detail = "not used: workers are not contained"
		return
	case s.report.Mode == ModeV2:
		check.Detail = "not used on v2, where only the supervisor's fork is born in the worker's cgroup (CLONE_INTO_CGROUP): the supervisor forks contained workers"
		return
	case s.cfg.ForkHere:
		check.Detail = "not used (configured): the supervisor forks contained workers"
		return
	}
	l, err := s.provenLauncher(s.cfg.WorkerPath)
	if err != nil {
		check.Detail = "unavailable, the supervisor forks contained workers: " + err.Error()
		return
	}
	s.fork = l
	check.Detail = fmt.Sprintf("contained workers are forked by launcher pid %d (probe passed through it)", l.pid)
}

// provenLauncher starts a launcher from the executable at path and proves it with a probe
// forked through it.
func (s *Supervisor) provenLauncher(path string) (*launcher, error) {
	cfg := s.cfg
	cfg.WorkerPath = path
	l, err := startLauncher(cfg)
	if err != nil {
		return nil, err
	}
	var scratch Report
	err = probeMode(context.Background(), cfg, s.report.Mode, s.tree, s.owner, s.pr, &scratch, true, l)
	if err == nil && !l.usable() {
		err = errors.New("the probe fell back to a fork by the supervisor")
	}
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// LauncherFrom moves the launcher, if the supervisor uses one, to the executable at path (which
// must call EnterWorker first under Config.WorkerArgs, as WorkerPath does), proven by a probe
// through it; the launcher before it stays if that fails. Call it before any Start: the sidecar
// does with its worker image, so that the launcher is the small worker executable rather than
// the sidecar's own binary.
func (s *Supervisor) LauncherFrom(path string) error {
	if s.fork == nil {
		return nil
	}
	l, err := s.provenLauncher(path)
	if err != nil {
		return err
	}
	old := s.fork
	s.fork = l
	old.close()
	checks := slices.Clone(s.report.Checks) // Reports handed out share the old array
	for i, c := range checks {
		if c.Name == "containment launcher" {
			checks[i].Detail = fmt.Sprintf("contained workers are forked by launcher pid %d, started from %s (probe passed through it)", l.pid, path)
		}
	}
	s.report.Checks = checks
	return nil
}

// ownerDirs lists the owner directory in each hierarchy that mode uses.
func ownerDirs(mode Mode, t tree, owner string) []string {
	var dirs []string
	for _, h := range hierarchiesOf(mode) {
		dirs = append(dirs, t.abs(h, owner))
	}
	return dirs
}

func checkParent(p string) error {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("%w: cgroup parent %q must be a clean relative path", ErrInvalidSpec, p)
	}
	for _, part := range strings.Split(p, "/") {
		if !validName(part) {
			return fmt.Errorf("%w: cgroup parent %q", ErrInvalidSpec, p)
		}
	}
	return nil
}

// Report is the preflight result of New.
func (s *Supervisor) Report() Report { return s.report }

// Mode is the verified mode.
func (s *Supervisor) Mode() Mode { return s.report.Mode }

// Config is the effective configuration (defaults applied).
func (s *Supervisor) Config() Config { return s.cfg }

// Leftovers lists the cgroup directories of dead supervisors that New removed.
func (s *Supervisor) Leftovers() []string { return append([]string(nil), s.leftovers...) }

// CgroupPath returns the domain directory relative to the root of the hierarchy that holds its
// processes for killing (unified where the mode has it, else pids), e.g. "steward/4242-8812345/w7".
// Under a configured parent it is the same in every hierarchy.
func (s *Supervisor) CgroupPath(d *Domain) string {
	h := hPids
	if s.report.Mode != ModeV1 {
		h = hUnified
	}
	return s.tree.rel(h, s.owner, d.id)
}

// Start creates the domain's cgroups (limits read back), launches the worker inside them and
// returns its Domain. On any error nothing is left running and no cgroup remains.
func (s *Supervisor) Start(ctx context.Context, spec Spec) (_ *Domain, retErr error) {
	if err := checkEnv(spec.Env); err != nil {
		return nil, err
	}
	if err := spec.checkGateway(s.Contained()); err != nil {
		return nil, err
	}
	narrowed, err := s.checkCPUs(spec.CPUs)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	id := spec.ID
	if id == "" {
		s.seq++
		id = fmt.Sprintf("w%d", s.seq)
	}
	if !validName(id) || strings.HasPrefix(id, "probe-") {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: domain id %q", ErrInvalidSpec, id)
	}
	if _, dup := s.domains[id]; dup {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: domain id %q in use", ErrInvalidSpec, id)
	}
	s.domains[id] = nil // reserve the name while launching
	s.starting.Add(1)
	s.mu.Unlock()
	defer s.starting.Done()
	defer func() {
		if retErr != nil {
			s.forget(id)
		}
	}()

	mem, pids := s.cfg.DomainLimits(spec.MemoryLimit, spec.PidsLimit)
	cg, err := newDomainCgroups(s.report.Mode, s.tree, path.Join(s.owner, id), mem, pids)
	if err != nil {
		return nil, err
	}
	p := spec.Path
	if p == "" {
		p = s.cfg.WorkerPath
	}
	if err := spec.Policy.check(); err != nil {
		_ = cg.remove()
		return nil, err
	}
	d, err := launch(ctx, s.cfg, id, cg, launchSpec{
		path: p, argv: append([]string{p}, spec.Args...), env: spec.Env,
		extra: spec.ExtraFiles, stdout: spec.Stdout, stderr: spec.Stderr,
		contain: s.Contained(), network: spec.Network, gateway: spec.Gateway, policy: spec.policy(),
		tmp: spec.TempDir, tmpSize: s.cfg.tempDirBytes(spec.TempDirBytes, mem), via: s.fork,
	}.onCPUs(narrowed, spec.CPUs, s.cpus))
	if err != nil {
		_ = cg.remove()
		return nil, err
	}
	d.onClose = func(d *Domain) { s.forget(d.id) }
	s.mu.Lock()
	if s.closed { // Close ran while this domain was launching: it must not outlive the supervisor
		s.mu.Unlock()
		_, _ = d.Kill(ctx)
		_ = d.Close()
		return nil, ErrClosed
	}
	s.domains[id] = d
	s.mu.Unlock()
	return d, nil
}

// Contained reports whether worker domains are born contained (the user namespace layer
// verified; see Report.Containment).
func (s *Supervisor) Contained() bool { return s.report.Containment.Guest != "" }

func (s *Supervisor) forget(id string) {
	s.mu.Lock()
	delete(s.domains, id)
	s.mu.Unlock()
}

// Close kills and removes every open domain, then this supervisor's cgroup directories.
// Further Starts fail with ErrClosed.
func (s *Supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	var open []*Domain
	for _, d := range s.domains {
		if d != nil {
			open = append(open, d)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, d := range open {
		if _, err := d.Kill(ctx); err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, d.Close())
	}
	s.starting.Wait() // a launch in flight kills its own domain once it sees closed
	if s.fork != nil {
		s.fork.close()
	}
	errs = append(errs, removeOwnerDirs(s.tree, s.owner))
	return errors.Join(errs...)
}
