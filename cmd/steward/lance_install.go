package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	lanceengine "github.com/cba1309c/steward/engines/lance"
)

const lanceUsage = `usage:
  steward lance install [--venv DIR] [--python PYTHON]

Installs steward's Lance engine from this binary into a Python virtualenv (docs/ENGINE.md §7):
first the exact wheels of its hash lock (pip --require-hashes --no-deps --only-binary=:all:,
from PyPI, or from wherever pip's own settings point: PIP_INDEX_URL, or PIP_NO_INDEX=1 with
PIP_FIND_LINKS=<a folder of the wheels>), then the engine package itself, built from the sources
this binary carries, with no network. Running it again over the same venv updates the engine.

--venv defaults to $STEWARD_LANCE_VENV, else /opt/steward/lance: it must be a path the contained
engine's unprivileged guest uid can read (not under a 0700 home directory), at most 100 bytes.
--python defaults to /usr/bin/python3 (the lock is for CPython 3.11). Then:

  steward serve --engine lance=<venv>/bin/steward-lance-engine

and "steward demo" finds the engine there.
`

// envLanceVenv names the venv `steward lance install` makes and steward looks in.
const envLanceVenv = "STEWARD_LANCE_VENV"

// defaultLanceVenv is where the engine is installed when nothing says otherwise.
const defaultLanceVenv = "/opt/steward/lance"

// maxVenvPath keeps pip's console scripts on a plain "#!<venv>/bin/python" line: past 127 bytes
// of interpreter path pip writes a /bin/sh trampoline, which a contained engine cannot run.
const maxVenvPath = 100

func runLance(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "lance", lanceUsage, map[string]subcommand{"install": lanceInstall}, args, stdout, stderr)
}

func lanceInstall(ctx context.Context, args []string, stdout io.Writer) error {
	fset := flag.NewFlagSet("lance install", flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	venv := fset.String("venv", lanceVenv(), "the virtualenv to install into")
	python := fset.String("python", "/usr/bin/python3", "the interpreter that makes the venv")
	if err := fset.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fset.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fset.Arg(0))
	}
	dir, err := filepath.Abs(*venv)
	if err != nil {
		return err
	}
	if len(dir) > maxVenvPath || strings.ContainsAny(dir, " \t\n") {
		return fmt.Errorf("--venv %q: use a path of at most %d bytes without spaces (pip would start the engine through /bin/sh, which a contained engine cannot run)", dir, maxVenvPath)
	}
	src, err := os.MkdirTemp("", "steward-lance-src-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	if err := os.CopyFS(src, lanceengine.Files); err != nil {
		return fmt.Errorf("write the engine's sources: %w", err)
	}
	start := time.Now()
	py := filepath.Join(dir, "bin", "python")
	pip := []string{py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input", "--no-deps"}
	for _, step := range [][]string{
		{*python, "-m", "venv", dir},
		append(pip, "--only-binary=:all:", "--require-hashes", "-r", filepath.Join(src, lanceengine.Lock)),
		append(pip, "--no-index", "--force-reinstall", src),
		{py, "-c", "import lance, pyarrow, numpy, steward_lance.engine"},
	} {
		cmd := exec.CommandContext(ctx, step[0], step[1:]...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = src, stdout, stdout
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("lance install: %s: %w", strings.Join(step, " "), err)
		}
	}
	engine := filepath.Join(dir, "bin", "steward-lance-engine")
	fmt.Fprintf(stdout, "the Lance engine is installed in %s (%v); register it with\n  steward serve --engine lance=%s\n",
		dir, time.Since(start).Round(time.Second), engine)
	if p := unreachableByOthers(dir); p != "" {
		fmt.Fprintf(stdout, "warning: %s cannot be searched by other users: a contained engine (an unprivileged guest uid) will not start from it\n", p)
	}
	return nil
}

// lanceVenv is the venv `steward lance install` uses and steward looks in.
func lanceVenv() string {
	if v := os.Getenv(envLanceVenv); v != "" {
		return v
	}
	return defaultLanceVenv
}

// unreachableByOthers is the first of dir and its parents that others may not search, or "".
func unreachableByOthers(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.Mode().Perm()&0o001 == 0 {
			return d
		}
		if d == filepath.Dir(d) {
			return ""
		}
	}
}

// installedLance finds an engine installed by `steward lance install`: in $STEWARD_LANCE_VENV (or
// /opt/steward/lance), else steward-lance-engine on PATH. Symlinks are resolved: the sidecar
// grants a contained engine the folders its command is really in.
func installedLance() (lanceCommands, error) {
	var tried []string
	candidates := []string{filepath.Join(lanceVenv(), "bin", "steward-lance-engine")}
	if p, err := exec.LookPath("steward-lance-engine"); err == nil {
		candidates = append(candidates, p)
	}
	for _, c := range candidates {
		real, err := filepath.EvalSymlinks(c)
		if err == nil {
			real, err = filepath.Abs(real)
		}
		if err != nil {
			tried = append(tried, c)
			continue
		}
		ctl := filepath.Join(filepath.Dir(real), "steward-lancectl")
		if _, err := os.Stat(ctl); err != nil {
			tried = append(tried, ctl)
			continue
		}
		return lanceCommands{engine: []string{real}, ctl: []string{ctl}}, nil
	}
	return lanceCommands{}, fmt.Errorf("not installed at %s: %w", strings.Join(tried, ", "), fs.ErrNotExist)
}
