//go:build linux && v2guest

package v2vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/enginetest"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/rpc"
)

// lanceDeadline bounds each build, the worker's start (Python and pylance's import) included:
// a bound for a loaded machine under TCG, far above a quiet one's (docs/V2VM.md).
const lanceDeadline = 4 * time.Minute

// TestLanceOnPureV2 is the Lance engine through a real sidecar on pure cgroup v2, run inside the
// 6.12 VM by TestLanceOnPureCgroupV2 with the host's root as the guest's (the venv's python and
// pylance at their host paths). Hello must report v2 verified; an IVF_PQ build under a memory
// limit below its need is OOM-killed and answered -21 with oom_killed, and index.resolve settles
// it NOT_COMMITTED by fencing pinned+1; an IVF_PQ build within the default limit commits at
// pinned+1 and Lance's own reader (lancectl.py, in the guest) lists it, plans with it and finds
// the scan's neighbours through it; nothing is left behind.
func TestLanceOnPureV2(t *testing.T) {
	// Built only with the v2guest tag, into the binary TestLanceOnPureCgroupV2 boots: it fails,
	// never skips, without what it needs.
	bin, py, engines, seed := os.Getenv(stewardEnv), os.Getenv(lancePythonEnv), os.Getenv(lanceDirEnv), os.Getenv(lanceSeedEnv)
	if !pureV2() || bin == "" || py == "" || engines == "" || seed == "" {
		t.Fatalf("needs pure cgroup v2, $%s, $%s, $%s and $%s", stewardEnv, lancePythonEnv, lanceDirEnv, lanceSeedEnv)
	}
	root := testenv.GuestDir(t)
	if err := enginetest.LinkCopy(seed, root); err != nil {
		t.Fatal(err)
	}
	testenv.GuestOwn(t, root)
	tmp := testenv.GuestDir(t) // the sidecar's TMPDIR: the domains' private temp dirs
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// Lance's library and its Python are read once here, in this test's cgroup, while the sidecar
	// starts: their page cache (pylance's library is large) is then charged here, as on a host
	// where the engine ran before, and the 80 MiB limit below meets the build's own memory. A
	// domain of 80 MiB that must fault the library in first reclaims and refaults it over 9p, for
	// minutes under TCG.
	warm := exec.Command(py, "-B", "-s", "-E", "-c", "import lance, numpy, pyarrow")
	var warmOut bytes.Buffer
	warm.Env, warm.Stdout, warm.Stderr = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}, &warmOut, &warmOut
	t0 := time.Now()
	if err := warm.Start(); err != nil {
		t.Fatalf("import lance: %v", err)
	}
	c := launchWith(ctx, t, bin, "steward-v2lance",
		[]string{"--engine", "lance=" + py + " -B -s -E " + filepath.Join(engines, "engine.py")}, []string{"TMPDIR=" + tmp})
	iso := c.Info().Isolation
	b, _ := json.MarshalIndent(iso, "", "  ")
	t.Logf("hello in %v: isolation %s", time.Since(t0).Round(time.Millisecond), b)
	if err := warm.Wait(); err != nil {
		t.Fatalf("import lance: %v: %s", err, warmOut.String())
	}
	t.Logf("Lance imported in the test's cgroup in %v", time.Since(t0).Round(time.Millisecond))
	if iso == nil || !iso.Verified || iso.Mode != "v2" || iso.Parent == nil || len(iso.Parent.Dirs) != 1 {
		t.Fatalf("hello's isolation: want v2 verified with one parent")
	}
	var lance *rpc.EngineInfo
	for _, e := range c.Info().Engines {
		if e.Name == "lance" {
			lance = &e
		}
	}
	if lance == nil || lance.Settle != rpc.SettleFence {
		t.Fatalf("hello's engines %+v: want lance, settled by fencing", c.Info().Engines)
	}
	store := rpc.StoreSpec{URL: "file://" + root}
	params := func(inv, path string, idx map[string]string) rpc.MutateParams {
		return rpc.MutateParams{InvocationID: inv, JobID: "job-" + inv, Engine: "lance", PinnedVersion: 1, Op: rpc.OpCreate,
			DeadlineUnixMs: time.Now().Add(lanceDeadline).UnixMilli(), Dataset: rpc.DatasetRef{Store: store, Path: path},
			Index: rpc.IndexSpec{Name: "ix", Type: "IVF_PQ", Columns: []string{"vec"}, Params: idx}}
	}

	// The build's training sample (20,000 vectors of 128) takes it past 80 MiB early.
	inv := testbin.RandID("inv-")
	p := params(inv, lanceOOM, map[string]string{"num_partitions": "16", "num_sub_vectors": "16"})
	p.Limits = &rpc.WorkerLimits{MemoryBytes: 80 << 20}
	t1 := time.Now()
	res, err := c.Mutate(ctx, p)
	if err != nil {
		t.Fatalf("oom: %v", err)
	}
	t.Logf("IVF_PQ under 80 MiB: %s %d oom_killed=%v signal=%q peak %d MiB in %v (%d ms in the domain): %s",
		res.Phase, res.Code, res.OOMKilled, res.Signal, res.PeakMemoryBytes>>20, time.Since(t1).Round(time.Millisecond), res.WallMs, res.Message)
	if res.Phase != rpc.PhaseIndeterminate || res.Code != rpc.ReasonWorkerLost || !res.OOMKilled {
		t.Errorf("oom: %s %d oom_killed=%v, want %s %d oom_killed=true", res.Phase, res.Code, res.OOMKilled, rpc.PhaseIndeterminate, rpc.ReasonWorkerLost)
	}
	t1 = time.Now()
	r, err := c.Resolve(ctx, rpc.ResolveParams{InvocationID: inv, PinnedVersion: 1, Engine: "lance", Dataset: p.Dataset})
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	t.Logf("resolve of the OOM-killed build: %s fenced=%v version %d in %v", r.Outcome, r.Fenced, r.Version, time.Since(t1).Round(time.Millisecond))
	if r.Outcome != rpc.OutcomeNotCommitted || !r.Fenced || r.Version != 2 {
		t.Errorf("resolve: %+v, want NOT_COMMITTED, version 2 fenced", r)
	}

	inv = testbin.RandID("inv-")
	t1 = time.Now()
	res, err = c.Mutate(ctx, params(inv, lanceCommit, map[string]string{"num_partitions": "4", "num_sub_vectors": "4"}))
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	t.Logf("IVF_PQ: %s %d %s version %d, peak %d MiB in %v (%d ms in the domain)", res.Phase, res.Code, res.CompletionReason,
		res.CommittedVersion, res.PeakMemoryBytes>>20, time.Since(t1).Round(time.Millisecond), res.WallMs)
	if res.Phase != rpc.PhaseNativeReturn || res.Code != rpc.NativeOK || res.CompletionReason != rpc.CompletionCommitted || res.CommittedVersion != 2 {
		t.Fatalf("commit: %+v", res)
	}
	// The next Lance spare, started once the answer was written, waits frozen by cgroup.freeze
	// (v2's freezer: cgroup.events reads frozen 1) until a call takes it.
	t1 = time.Now()
	spare := waitFrozenDomain(t, iso.Parent.Dirs[0], time.Minute)
	t.Logf("an idle Lance spare frozen %v after the answer: %s", time.Since(t1).Round(time.Millisecond), spare)
	c.Close()
	if left, _ := filepath.Glob(filepath.Join(tmp, "steward-*")); len(left) > 0 {
		t.Errorf("domain temp dirs left after the sidecar exited: %v", left)
	}
	assertNothingLeft(t, iso.Parent.Dirs[0])

	// Lance's own reader, outside steward.
	t1 = time.Now()
	cmd := exec.Command(py, "-B", filepath.Join(engines, "lancectl.py"), "check", filepath.Join(root, lanceCommit), "ix", "vec", "IVF_PQ")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + t.TempDir()}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lancectl check: %v: %s", err, out)
	}
	var chk struct {
		Listed    bool    `json:"listed"`
		UsesIndex bool    `json:"uses_index"`
		Recall    float64 `json:"recall"`
		Last      struct {
			Version    int64  `json:"version"`
			Invocation string `json:"invocation"`
			Kind       string `json:"kind"`
		} `json:"last"`
	}
	if err := json.Unmarshal(out, &chk); err != nil {
		t.Fatalf("lancectl check: %v: %s", err, out)
	}
	t.Logf("Lance reads it back in %v: listed=%v uses_index=%v recall %.2f, last version %d by %s (%s)", time.Since(t1).Round(time.Millisecond),
		chk.Listed, chk.UsesIndex, chk.Recall, chk.Last.Version, chk.Last.Invocation, chk.Last.Kind)
	if !chk.Listed || !chk.UsesIndex || chk.Recall < 0.8 || chk.Last.Version != 2 || chk.Last.Invocation != inv || chk.Last.Kind != "commit" {
		t.Errorf("Lance's reader: %s", out)
	}
}

// waitFrozenDomain waits for a populated cgroup under parentDir (the supervisor's leaf aside)
// whose cgroup.events says frozen 1, and returns its path relative to parentDir.
func waitFrozenDomain(t *testing.T, parentDir string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var seen []string
		err := filepath.WalkDir(parentDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() || p == parentDir {
				return err
			}
			if d.Name() == "supervisor" && filepath.Dir(p) == parentDir {
				return filepath.SkipDir
			}
			ev, err := os.ReadFile(filepath.Join(p, "cgroup.events"))
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(parentDir, p)
			seen = append(seen, rel+": "+strings.Join(strings.Fields(string(ev)), " "))
			if strings.Contains(string(ev), "populated 1") && strings.Contains(string(ev), "frozen 1") {
				return errFound{rel}
			}
			return nil
		})
		var found errFound
		if errors.As(err, &found) {
			return found.dir
		}
		if err != nil {
			t.Fatalf("walking %s: %v", parentDir, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no frozen, populated domain under %s within %v; cgroup.events: %q", parentDir, within, seen)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// errFound stops waitFrozenDomain's walk at the frozen domain.
type errFound struct{ dir string }

func (e errFound) Error() string { return "found " + e.dir }
