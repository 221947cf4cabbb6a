// Package testsidecar is the one harness for tests that need a real `steward serve` process
// (go-plugin's single helperProcess is the model): the flags every test wants (test faults,
// short kill-ladder timings, a private cgroup parent), log capture, and in every cleanup the
// leftover check — no process and no cgroup of the sidecar may remain, and the cgroup parent it
// used is removed, so a test run leaves nothing under /sys/fs/cgroup.
package testsidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storecfg"
	"github.com/hashicorp/go-hclog"
)

// Roots are the mounted cgroup hierarchy roots a sidecar may use: the v1 memory, pids and
// freezer hierarchies and the unified one (at /sys/fs/cgroup/unified on hybrid, /sys/fs/cgroup on
// pure v2).
func Roots() []string {
	var roots []string
	for _, h := range []string{"memory", "pids", "freezer", "unified"} {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", h, "cgroup.procs")); err == nil {
			roots = append(roots, filepath.Join("/sys/fs/cgroup", h))
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		roots = append(roots, "/sys/fs/cgroup")
	}
	return roots
}

// FastArgs are the serve flags of the tests: test faults on and a short kill ladder. The kill
// budget is 100 ms + 500 ms + 3 s, plus a 300 ms runnable window.
func FastArgs(parent string) []string {
	return []string{"--test-faults", "--cgroup-parent", parent, "--term-grace", "500ms",
		"--reap-bound", "3s", "--clock-skew", "100ms", "--min-runnable", "300ms", "--worker-memory", "268435456"}
}

// Options configure Start. Every field is optional.
type Options struct {
	// Parent is the cgroup parent (default: a fresh random one, removed at cleanup).
	Parent string
	// Args are extra serve flags, after FastArgs (a repeated flag overrides).
	Args []string
	// Env is the sidecar's environment (nil: the test's), always without STEWARD_S3_ACCESS_KEY and
	// STEWARD_S3_SECRET_KEY, which steward serve refuses.
	Env []string
	// Credentials, when set, are the sidecar's own S3 keys, handed over as in production: a file
	// of mode 0400 owned by the sidecar's uid, passed with --s3-credentials-file.
	Credentials *rpc.Credentials
	// AllowStores are passed as --allow-store flags: the stores the sidecar's own keys go to.
	AllowStores []string
	// Plugin launches through go-plugin instead of stdio.
	Plugin bool
	// OnNotify receives the sidecar's notifications.
	OnNotify func(method string, params json.RawMessage)
	// Logs receives the sidecar's JSON log lines besides the Sidecar's own buffer.
	Logs *Logs
	// User, when not 0, runs the sidecar as this uid and gid (no supplementary groups): its
	// binary is copied to a world-readable directory and started through setpriv(1).
	User int
	// Enter are cgroup directories the sidecar process is written into (cgroup.procs) before
	// it execs, as systemd places a unit's main process: with Parent "auto" and a Delegate'd
	// tree this is a real delegated start.
	Enter []string
}

// Sidecar is one real sidecar process of a test.
type Sidecar struct {
	*host.Client
	Parent string
	Logs   *Logs
	opts   Options
	t      testing.TB
}

// Start launches a sidecar with verified isolation (a machine without it skips the test, or
// fails it under STEWARD_REQUIRE_REAL=1). At cleanup the sidecar is closed and CheckLeftovers
// runs.
func Start(t testing.TB, opts Options) *Sidecar {
	t.Helper()
	testenv.NeedRoot(t)
	if opts.Parent == "" {
		opts.Parent = testbin.RandID("steward-test-")
	}
	if opts.Logs == nil {
		opts.Logs = &Logs{}
	}
	s := &Sidecar{Parent: opts.Parent, Logs: opts.Logs, opts: opts, t: t}
	t.Cleanup(func() {
		if s.Client != nil {
			s.Client.Close()
		}
		CheckLeftovers(t, s.Parent)
		if t.Failed() {
			t.Logf("sidecar logs:\n%s", s.Logs.String())
		}
	})
	s.Restart()
	return s
}

// Restart launches a new sidecar process on the same parent and options (the previous one, if
// any, must be closed or dead).
func (s *Sidecar) Restart() {
	s.t.Helper()
	// The binary is built (once per test process) before the start's own 30 s begin: under load
	// the build alone can take most of them.
	path := testbin.Steward(s.t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.opts.User != 0 || len(s.opts.Enter) > 0 {
		path = Launcher(s.t, path, s.opts.User, s.opts.Enter)
	}
	args := FastArgs(s.Parent)
	if s.opts.Credentials != nil {
		args = append(args, "--s3-credentials-file", CredentialsFile(s.t, *s.opts.Credentials, s.opts.User))
	}
	for _, a := range s.opts.AllowStores {
		args = append(args, "--allow-store", a)
	}
	env := s.opts.Env
	if env == nil {
		env = os.Environ()
	}
	cfg := host.Config{Path: path, Args: append(args, s.opts.Args...), Env: storecfg.WithoutEnvKeys(env),
		Logger:   hclog.New(&hclog.LoggerOptions{Name: "test", Output: s.Logs, Level: hclog.Debug, JSONFormat: true}),
		OnNotify: s.opts.OnNotify, KillGrace: 2 * time.Second}
	launch := host.LaunchStdio
	if s.opts.Plugin {
		launch = host.Launch
	}
	c, err := launch(ctx, cfg)
	if err != nil {
		s.t.Fatalf("launch sidecar: %v", err)
	}
	if iso := c.Info().Isolation; iso == nil || !iso.Verified {
		c.Close()
		testenv.Unavailable(s.t, fmt.Sprintf("isolation did not verify: %+v", iso))
	}
	s.Client = c
}

// Logs is a goroutine-safe buffer of log lines.
type Logs struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *Logs) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Logs) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// CheckLeftovers runs after a sidecar on parent is gone: no process may remain in any cgroup
// below parent, and every cgroup below it, and parent itself, must be removable (it removes
// them, deepest first, waiting a moment for workers killed with their sidecar to disappear).
func CheckLeftovers(t testing.TB, parent string) {
	t.Helper()
	if pids := ProcessesIn(parent); len(pids) > 0 {
		// Workers die with their sidecar's thread (PDEATHSIG); give the kernel a moment.
		deadline := time.Now().Add(5 * time.Second)
		for len(pids) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			pids = ProcessesIn(parent)
		}
		if len(pids) > 0 {
			t.Errorf("processes left in cgroup parent %s after the sidecar exited: %v", parent, pids)
		}
	}
	if err := RemoveParent(parent); err != nil {
		t.Errorf("cgroups left after the sidecar exited: %v", err)
	}
}

// RemoveParent removes parent and everything below it in every hierarchy, deepest first,
// retrying briefly while cgroups are still busy. Absent is fine.
func RemoveParent(parent string) error {
	var errs []error
	for _, r := range Roots() {
		root := filepath.Join(r, parent)
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := removeTree(root)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("%s: %w", root, err))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return os.Remove(dir)
}

// Dirs counts the cgroup directories below parent (owner and domain levels) in every hierarchy.
func Dirs(parent string) int {
	n := 0
	for _, r := range Roots() {
		root := filepath.Join(r, parent)
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != root {
				n++
			}
			return nil
		})
	}
	return n
}

// ProcessesIn lists processes whose cgroup path matches "/parent/" or, for a pattern
// "parent/*/domain", has parent and domain as components.
func ProcessesIn(pattern string) []string {
	parent, domain, _ := strings.Cut(pattern, "/*/")
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(b), "/"+parent+"/") {
			continue
		}
		if domain == "" || strings.Contains(string(b), "/"+domain+"\n") || strings.Contains(string(b), "/"+domain+"/") {
			out = append(out, ent.Name())
		}
	}
	return out
}
