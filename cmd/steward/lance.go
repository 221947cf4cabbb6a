package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cba1309c/steward/rpc"
)

// The Lance engine's tools: installed as a package by `steward lance install` (lance_install.go),
// or in a checkout, by scripts/lance.sh, as the venv's python and engines/lance. steward finds a
// checkout's through the environment, or relative to the working directory.
const (
	envLancePython = "STEWARD_LANCE_PYTHON" // a checkout's venv interpreter
	envLanceDir    = "STEWARD_LANCE_DIR"    // engines/lance (engine.py, lancectl.py)
	envTools       = "STEWARD_TOOLS"        // the tools dir scripts/lance.sh installs into
)

// errNoLance: the Lance engine is not installed where steward looks for it.
var errNoLance = errors.New("the Lance engine is not installed (run steward lance install; in a checkout scripts/lance.sh install, or set " + envLancePython + " and " + envLanceDir + ")")

// lanceCommands are the command lines of an installed Lance engine.
type lanceCommands struct {
	engine []string // the engine: what --engine lance=… registers
	ctl    []string // lancectl: Lance's own library, outside the sidecar
}

// findLance looks, in order, at $STEWARD_LANCE_PYTHON (a checkout's venv, with
// $STEWARD_LANCE_DIR), $STEWARD_LANCE_VENV (an installed package), the checkout the working
// directory is in (.tools/lance and engines/lance), /opt/steward/lance, and PATH.
func findLance() (lanceCommands, error) {
	explicitVenv := os.Getenv(envLanceVenv) != ""
	if os.Getenv(envLancePython) == "" && explicitVenv {
		if c, err := installedLance(); err == nil {
			return c, nil
		}
	}
	py, dir, err := checkoutLance()
	if err == nil {
		flags := []string{py, "-B", "-s", "-E"}
		return lanceCommands{engine: append(flags, filepath.Join(dir, "engine.py")),
			ctl: append(slices.Clip(flags), filepath.Join(dir, "lancectl.py"))}, nil
	}
	if os.Getenv(envLancePython) != "" {
		return lanceCommands{}, err
	}
	c, ierr := installedLance()
	if ierr != nil {
		return lanceCommands{}, fmt.Errorf("%w: %w; %w", errNoLance, err, ierr)
	}
	return c, nil
}

// checkoutLance returns a checkout's venv python and engine folder.
func checkoutLance() (python, dir string, err error) {
	python = os.Getenv(envLancePython)
	if python == "" {
		tools := os.Getenv(envTools)
		if tools == "" {
			tools = ".tools"
		}
		python = filepath.Join(tools, "lance", "bin", "python")
	}
	if dir = os.Getenv(envLanceDir); dir == "" {
		dir = filepath.Join("engines", "lance")
	}
	if python, err = filepath.Abs(python); err == nil {
		dir, err = filepath.Abs(dir)
	}
	if err != nil {
		return "", "", err
	}
	for _, p := range []string{python, filepath.Join(dir, "lancectl.py"), filepath.Join(dir, "engine.py")} {
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("no checkout's engine: %w", err)
		}
	}
	return python, dir, nil
}

// lanceEngineFlag is the --engine value that registers the Lance engine with a sidecar.
func lanceEngineFlag() (string, error) {
	c, err := findLance()
	if err != nil {
		return "", err
	}
	return "lance=" + strings.Join(c.engine, " "), nil
}

// lanceURI is the URI Lance's own library opens for the dataset at path in spec's store.
func lanceURI(spec rpc.StoreSpec, path string) (string, error) {
	p, err := spec.Parse()
	if err != nil {
		return "", err
	}
	if p.Kind == rpc.StoreS3 {
		key := strings.Trim(path, "/")
		if p.Prefix != "" {
			key = p.Prefix + "/" + key
		}
		return "s3://" + p.Bucket + "/" + key, nil
	}
	return filepath.Join(p.Root, path), nil
}

// lancectl runs lancectl (engines/lance/lancectl.py: Lance's own library, outside the sidecar) with an
// allow-listed environment: the S3 settings and nothing else of steward's.
func lancectl(ctx context.Context, stdout, stderr io.Writer, args ...string) error {
	c, err := findLance()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, c.ctl[0], append(c.ctl[1:len(c.ctl):len(c.ctl)], args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + os.TempDir()}
	for _, k := range []string{envS3Endpoint, envS3AccessKey, envS3SecretKey} {
		if v := os.Getenv(k); v != "" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("lancectl %s: %w", args[0], err)
	}
	return nil
}

// lancectlOn runs the lancectl command cmd on the dataset at path in spec's store. Engines reach
// the store only through the sidecar's gateway, as the sidecar's own user, so whoever writes a
// dataset here needs to hand nothing over to a guest.
func lancectlOn(ctx context.Context, stdout, stderr io.Writer, spec rpc.StoreSpec, path, cmd string, extra ...string) error {
	uri, err := lanceURI(spec, path)
	if err != nil {
		return err
	}
	return lancectl(ctx, stdout, stderr, append([]string{cmd, uri}, extra...)...)
}
