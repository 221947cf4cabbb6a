package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
)

// TestLanceInstallServesAndDemo is the machine with only a released steward: `steward lance
// install` makes a fresh venv from the binary alone (the lock's wheels from a folder, pip with no
// index: the pinned versions and nothing else; the engine package built from the sources the
// binary carries). A real sidecar registers `--engine lance=<venv>/bin/steward-lance-engine`
// (a console script, contained) and builds an index that Lance's reader, the installed
// steward-lancectl, lists and uses; `steward demo` run outside any checkout finds the engine
// through STEWARD_LANCE_VENV and runs its Lance act.
func TestLanceInstallServesAndDemo(t *testing.T) {
	testenv.NeedRoot(t)
	wheels, err := testbin.LanceWheels()
	if err != nil {
		testenv.Unavailable(t, "the Lance engine's wheels are not downloaded: "+err.Error())
	}
	steward := testbin.Steward(t)
	// Outside the checkout, with none of its hints: what a released binary sees.
	env := []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=" + t.TempDir(), "TMPDIR=" + testenv.GuestDir(t)}
	venv := filepath.Join(testenv.GuestDir(t), "venv")
	install := exec.Command(steward, "lance", "install", "--venv", venv)
	install.Dir, install.Env = t.TempDir(), append(env, "PIP_NO_INDEX=1", "PIP_FIND_LINKS="+wheels)
	start := time.Now()
	out, err := install.CombinedOutput()
	if err != nil {
		t.Fatalf("steward lance install: %v\n%s", err, out)
	}
	engine := filepath.Join(venv, "bin", "steward-lance-engine")
	if !strings.Contains(string(out), "--engine lance="+engine) {
		t.Fatalf("install does not say how to register the engine:\n%s", out)
	}
	t.Logf("steward lance install into a fresh venv: %v", time.Since(start).Round(100*time.Millisecond))

	root := t.TempDir()
	ctl := exec.Command(filepath.Join(venv, "bin", "steward-lancectl"), "create", filepath.Join(root, "events"), "--rows", "2000", "--dim", "8")
	ctl.Env = env
	if out, err := ctl.CombinedOutput(); err != nil {
		t.Fatalf("steward-lancectl create: %v\n%s", err, out)
	}
	sc := testsidecar.Start(t, testsidecar.Options{Args: []string{"--engine", "lance=" + engine}, Env: append(os.Environ(), env[3])})
	registered := false
	for _, e := range sc.Info().Engines {
		registered = registered || e.Name == "lance"
	}
	if !registered {
		t.Fatalf("the sidecar did not register the installed engine: %+v\n%s", sc.Info().Engines, sc.Logs.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := sc.Mutate(ctx, rpc.MutateParams{InvocationID: testbin.RandID("inv-"), DeadlineUnixMs: time.Now().Add(3 * time.Minute).UnixMilli(),
		Engine: "lance", Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + root}, Path: "events"},
		PinnedVersion: 1, Op: rpc.OpCreate, Index: rpc.IndexSpec{Name: "by_id", Columns: []string{"id"}, Type: "BTREE"}})
	if err != nil || res.Code != rpc.NativeOK || res.CommittedVersion != 2 {
		t.Fatalf("mutate through the installed engine: %+v %v\n%s", res, err, sc.Logs.String())
	}
	check := exec.Command(filepath.Join(venv, "bin", "steward-lancectl"), "check", filepath.Join(root, "events"), "by_id", "id", "BTREE")
	check.Env = env
	b, err := check.Output()
	var chk struct {
		Listed    bool `json:"listed"`
		UsesIndex bool `json:"uses_index"`
		Equal     bool `json:"equal"`
	}
	if err != nil || json.Unmarshal(b, &chk) != nil || !chk.Listed || !chk.UsesIndex || !chk.Equal {
		t.Fatalf("Lance's reader after the build: %v %s", err, b)
	}

	start = time.Now()
	demo := exec.Command(steward, "demo", "--rows", "20000", "--vectors", "5000")
	demo.Dir, demo.Env = t.TempDir(), append(env, envLanceVenv+"="+venv)
	out, err = demo.CombinedOutput()
	if err != nil {
		t.Fatalf("steward demo: %v\n%s", err, out)
	}
	t.Logf("steward demo outside a checkout: %v", time.Since(start).Round(100*time.Millisecond))
	for _, want := range []string{"5,000 rows × 128-dim", "nearest 10 neighbours", "listed true, planned true"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo outside a checkout lacks %q:\n%s", want, out)
		}
	}
}

// TestFindLanceOutsideACheckout: outside a checkout steward finds an installed engine in
// $STEWARD_LANCE_VENV, else as steward-lance-engine on PATH (its symlink resolved to the venv),
// and otherwise says how to install it.
func TestFindLanceOutsideACheckout(t *testing.T) {
	venv := t.TempDir()
	bin := filepath.Join(venv, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"steward-lance-engine", "steward-lancectl"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/false\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	onPath := t.TempDir()
	if err := os.Symlink(filepath.Join(bin, "steward-lance-engine"), filepath.Join(onPath, "steward-lance-engine")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	for _, k := range []string{envLancePython, envLanceDir, envTools} {
		t.Setenv(k, "")
	}
	want := lanceCommands{engine: []string{filepath.Join(bin, "steward-lance-engine")}, ctl: []string{filepath.Join(bin, "steward-lancectl")}}
	for _, tc := range []struct {
		name, venv, path string
		found            bool
	}{
		{"STEWARD_LANCE_VENV", venv, "/usr/bin:/bin", true},
		{"PATH", filepath.Join(t.TempDir(), "none"), onPath + ":/usr/bin:/bin", true},
		{"nowhere", filepath.Join(t.TempDir(), "none"), "/usr/bin:/bin", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envLanceVenv, tc.venv)
			t.Setenv("PATH", tc.path)
			got, err := findLance()
			switch {
			case tc.found && (err != nil || !slices.Equal(got.engine, want.engine) || !slices.Equal(got.ctl, want.ctl)):
				t.Fatalf("findLance = %+v, %v; want %+v", got, err, want)
			case !tc.found && (!errors.Is(err, errNoLance) || !strings.Contains(err.Error(), "steward lance install")):
				t.Fatalf("findLance with nothing installed = %+v, %v", got, err)
			}
		})
	}
}
