package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
)

// needLanceTools points steward at the installed Lance engine (fails under STEWARD_REQUIRE_REAL=1
// when it is missing).
func needLanceTools(t *testing.T) {
	t.Helper()
	py, dir, err := testbin.LanceTools()
	if err != nil {
		testenv.Unavailable(t, "Lance engine not installed: "+err.Error())
	}
	t.Setenv(envLancePython, py)
	t.Setenv(envLanceDir, dir)
}

// TestDatasetCreateLance: --format lance makes a real Lance dataset (read back by Lance's own
// library through describe and versions).
func TestDatasetCreateLance(t *testing.T) {
	needLanceTools(t)
	dir := t.TempDir()
	if code, out, errOut := runDS(t, "create", "--format", "lance", "--store", dir, "--path", "wh/events", "--rows", "500", "--dim", "8"); code != 0 {
		t.Fatalf("create: %d %s %s", code, out, errOut)
	}
	code, out, errOut := runDS(t, "describe", "--format", "lance", "--store", "file://"+dir, "--path", "wh/events")
	var d struct {
		Version int64             `json:"version"`
		Rows    int64             `json:"rows"`
		Schema  map[string]string `json:"schema"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || d.Rows != 500 || d.Version != 1 || d.Schema["vec"] == "" {
		t.Fatalf("describe: %d %q %s (%+v)", code, out, errOut, d)
	}
	if code, out, _ := runDS(t, "versions", "--format", "lance", "--store", dir, "--path", "wh/events"); code != 0 || out == "" {
		t.Fatalf("versions: %d %q", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "wh", "events", "_versions")); err != nil {
		t.Fatalf("no Lance version chain: %v", err)
	}
	if code, _, _ := runDS(t, "create", "--format", "lance", "--store", dir, "--path", "x", "--csv", "f.csv"); code != 2 {
		t.Errorf("--format lance with --csv: exit %d, want 2", code)
	}
}

// TestDatasetCreateLanceNeedsNoHandover: as root, `steward dataset create --format lance` in a
// private (0700) directory leaves a dataset that is root's and stays so — nothing is handed to
// the contained workers' guest — and a real sidecar's contained Lance engine builds an index on
// it all the same: it reaches the store only through its gateway, as the sidecar's own user.
func TestDatasetCreateLanceNeedsNoHandover(t *testing.T) {
	testenv.NeedRoot(t)
	needLanceTools(t)
	root := t.TempDir()
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	const path = "wh/lake/events"
	out, err := exec.Command(testbin.Steward(t), "dataset", "create", "--format", "lance", "--store", "file://"+root,
		"--path", path, "--rows", "2000", "--dim", "16").CombinedOutput()
	if err != nil {
		t.Fatalf("dataset create: %v\n%s", err, out)
	}
	n := 0
	err = filepath.WalkDir(filepath.Join(root, "wh"), func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		if uid := ownerOf(t, p); uid != 0 {
			t.Errorf("%s: uid %d, want root's (nothing is handed over)", p, uid)
		}
		return nil
	})
	if err != nil || n < 4 {
		t.Fatalf("walk the dataset: %v (%d entries)", err, n)
	}

	engine, err := lanceEngineFlag()
	if err != nil {
		t.Fatal(err)
	}
	sc := testsidecar.Start(t, testsidecar.Options{Args: []string{"--engine", engine},
		Env: append(os.Environ(), "TMPDIR="+testenv.GuestDir(t))})
	if c := sc.Info().Isolation.Containment; c == nil || c.Guest != fmt.Sprintf("%d:%d", isolation.DefaultGuestID, isolation.DefaultGuestID) {
		t.Fatalf("workers are not contained as the guest: %+v", c)
	}
	registered := false
	for _, e := range sc.Info().Engines {
		registered = registered || e.Name == "lance"
	}
	if !registered { // e.g. a venv the guest cannot run (STEWARD_TOOLS must be readable by uid 65534)
		t.Fatalf("the sidecar did not register the Lance engine %q: %+v\n%s", engine, sc.Info().Engines, sc.Logs.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := rpc.MutateParams{InvocationID: testbin.RandID("inv-"), JobID: "job-guest-lance",
		DeadlineUnixMs: time.Now().Add(3 * time.Minute).UnixMilli(), Engine: "lance",
		Dataset:       rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + root}, Path: path},
		PinnedVersion: 1, Op: rpc.OpCreate, Index: rpc.IndexSpec{Name: "by_id", Columns: []string{"id"}, Type: "BTREE"}}
	res, err := sc.Mutate(ctx, p)
	if err != nil {
		t.Fatalf("mutate: %v", err)
	}
	if res.Phase != rpc.PhaseNativeReturn || res.Code != 0 || res.CommittedVersion != 2 || res.CompletionReason != rpc.CompletionCommitted {
		t.Fatalf("the contained Lance engine could not build on a root-owned dataset in a 0700 directory: %+v\n%s", res, sc.Logs.String())
	}
	code, desc, errOut := runDS(t, "describe", "--format", "lance", "--store", root, "--path", path)
	var d struct {
		Version int64 `json:"version"`
		Rows    int64 `json:"rows"`
	}
	if code != 0 || json.Unmarshal([]byte(desc), &d) != nil || d.Version != 2 || d.Rows != 2000 {
		t.Fatalf("Lance's reader after the build: %d %q %s", code, desc, errOut)
	}
}

func ownerOf(t *testing.T, p string) int {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}
