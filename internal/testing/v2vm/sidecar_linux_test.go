//go:build linux && v2guest

package v2vm

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// pureV2 reports whether /sys/fs/cgroup is cgroup2 and no v1 hierarchy is mounted beside it.
func pureV2() bool {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		return false
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	return !strings.Contains(string(b), " - cgroup ")
}

// TestSidecarOnPureV2 is the sidecar end to end on the built-in engine, run inside the VM by
// TestOnPureCgroupV2 twice: as root with a configured parent, and as uid 65534 started
// (as systemd's DelegateSubgroup=supervisor starts a service) in the subgroup "supervisor" of a
// cgroup delegated to it, sharing it with the sidecar, so that --cgroup-parent auto must put
// domains in the delegated, empty parent. Hello must report v2 verified there; a mutation
// commits; an OOM kill answers -21 with oom_killed, a fork bomb -22 (or -21 when its own
// runtime dies at pids.max first), a worker ignoring SIGTERM -22 ended by SIGKILL through
// cgroup.kill; after each answer its domain is gone, and after the sidecar closes no domain,
// owner directory or process is left.
// guestDeadline is the deadline of the faulted calls that end by it. The sidecar starts the kill
// ladder its kill budget (3.6 s with testsidecar.FastArgs) before the deadline, so 5 s left the
// worker 1.4 s: under TCG on a loaded machine, once too little for it to reach its fault (a
// namespace's init that a SIGTERM makes exit 2, not the ladder's SIGKILL), once too little to
// start at all (-1 before invocation). 10 s leaves 6.4 s.
const guestDeadline = 10 * time.Second

func TestSidecarOnPureV2(t *testing.T) {
	// Built only with the v2guest tag, into the binary TestOnPureCgroupV2 boots: it fails, never
	// skips, without what it needs.
	bin := os.Getenv(stewardEnv)
	if !pureV2() || bin == "" {
		t.Fatalf("needs pure cgroup v2 and $%s", stewardEnv)
	}
	root := guestStore(t, "events", "f-oom", "f-fork_bomb", "f-ignore_sigterm")
	parent := "steward-v2e2e"
	if os.Geteuid() != 0 {
		parent = "auto"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := launch(ctx, t, bin, parent)
	iso := c.Info().Isolation
	b, _ := json.Marshal(iso)
	t.Logf("hello as uid %d: isolation %s", os.Geteuid(), b)
	if iso == nil || !iso.Verified || iso.Mode != "v2" || iso.Parent == nil || len(iso.Parent.Dirs) != 1 {
		t.Fatalf("hello's isolation %s: want v2 verified with one parent", b)
	}
	parentDir := iso.Parent.Dirs[0]
	if os.Geteuid() != 0 && (iso.Parent.Source != "delegated" || !strings.HasSuffix(parentDir, ".service")) {
		t.Fatalf("uid %d: parent %+v, want the delegated unit cgroup (its own, the supervisor subgroup, is shared)", os.Geteuid(), iso.Parent)
	}
	for _, tc := range []struct {
		name, path, fault string
		deadline          time.Duration
		phase             string
		codes             []int // the true answers
		oom               bool
		signal            string
	}{
		{name: "commit", path: "events", phase: rpc.PhaseNativeReturn, codes: []int{rpc.NativeOK}},
		{name: "oom", path: "f-oom", fault: "oom", phase: rpc.PhaseIndeterminate, codes: []int{rpc.ReasonWorkerLost}, oom: true},
		{name: "fork bomb", path: "f-fork_bomb", fault: "fork_bomb", deadline: guestDeadline, phase: rpc.PhaseIndeterminate,
			codes: []int{rpc.ReasonDeadline, rpc.ReasonWorkerLost}},
		{name: "kill ladder", path: "f-ignore_sigterm", fault: "ignore_sigterm", deadline: guestDeadline, phase: rpc.PhaseIndeterminate,
			codes: []int{rpc.ReasonDeadline}, signal: "SIGKILL"},
	} {
		inv := testbin.RandID("inv-")
		p := rpc.MutateParams{InvocationID: inv, JobID: "job-" + inv, DeadlineUnixMs: time.Now().Add(30 * time.Second).UnixMilli(),
			Dataset:       rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + root}, Path: tc.path},
			PinnedVersion: 1, Op: rpc.OpCreate, Index: rpc.IndexSpec{Name: "ix", Type: rpc.IndexBTree, Columns: []string{"name"}}, Fault: tc.fault}
		if tc.deadline > 0 {
			p.DeadlineUnixMs = time.Now().Add(tc.deadline).UnixMilli()
		}
		t0 := time.Now()
		res, err := c.Mutate(ctx, p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		t.Logf("%-12s %s %d oom_killed=%v signal=%q in %v: %s", tc.name, res.Phase, res.Code, res.OOMKilled, res.Signal, time.Since(t0).Round(time.Millisecond), res.Message)
		if res.Phase != tc.phase || !slices.Contains(tc.codes, res.Code) || res.OOMKilled != tc.oom || (tc.signal != "" && res.Signal != tc.signal) {
			t.Errorf("%s: %s %d oom_killed=%v signal=%q, want %s %v oom_killed=%v signal=%q",
				tc.name, res.Phase, res.Code, res.OOMKilled, res.Signal, tc.phase, tc.codes, tc.oom, tc.signal)
		}
		if n := domains(parentDir); n > 1 {
			t.Errorf("%s: %d worker domains after the answer, want at most the one idle spare", tc.name, n)
		}
	}
	c.Close()
	assertNothingLeft(t, parentDir)
}

// guestStore is a local store the contained workers' guest can use, holding a generated dataset
// of 20,000 rows at each path.
func guestStore(t *testing.T, paths ...string) string {
	t.Helper()
	root := testenv.GuestDir(t)
	store, err := storage.OpenStore(context.Background(), storage.StoreConfig{Kind: storage.KindLocal, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if _, _, err := dataset.Create(context.Background(), store, p, dataset.NewGenerator(20000, 7), dataset.WriteOptions{RowsPerFragment: 10001}); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// launch starts bin's sidecar over stdio with the tests' fast flags, one executor and parent;
// it is closed at cleanup (again: Close is idempotent), its log shown if the test failed.
func launch(ctx context.Context, t *testing.T, bin, parent string) *host.Client {
	t.Helper()
	return launchWith(ctx, t, bin, parent, nil, nil)
}

// launchWith is launch with extra serve flags and environment.
func launchWith(ctx context.Context, t *testing.T, bin, parent string, args, env []string) *host.Client {
	t.Helper()
	var logs testsidecar.Logs
	c, err := host.LaunchStdio(ctx, host.Config{Path: bin,
		Args:   append(append(testsidecar.FastArgs(parent), "--executors", "1"), args...),
		Env:    append([]string{"HOME=/tmp", "PATH=/v2", "STEWARD_STATE_DIR=" + t.TempDir()}, env...),
		Logger: hclog.New(&hclog.LoggerOptions{Name: "v2e2e", Output: &logs, Level: hclog.Debug, JSONFormat: true})})
	if err != nil {
		t.Fatalf("launch the sidecar: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		if t.Failed() {
			t.Logf("sidecar logs:\n%s", logs.String())
		}
	})
	return c
}

// domains counts the worker domains below a sidecar's parent: directories of its owner
// directories (the supervisor leaf is no owner).
func domains(parentDir string) int {
	n := 0
	owners, _ := os.ReadDir(parentDir)
	for _, o := range owners {
		if !o.IsDir() || o.Name() == "supervisor" {
			continue
		}
		ds, _ := os.ReadDir(filepath.Join(parentDir, o.Name()))
		for _, d := range ds {
			if d.IsDir() {
				n++
			}
		}
	}
	return n
}

// assertNothingLeft: once the sidecar has exited, its parent holds no cgroup but the
// supervisor leaf, and that holds no process but this test's; a configured parent is removable.
func assertNothingLeft(t *testing.T, parentDir string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ents, err := os.ReadDir(parentDir)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, e := range ents {
			if e.IsDir() && e.Name() != "supervisor" {
				left = append(left, e.Name())
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cgroups left in %s after the sidecar exited: %v", parentDir, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if os.Geteuid() == 0 {
		if err := os.Remove(parentDir); err != nil {
			t.Fatalf("the configured parent is not removable: %v", err)
		}
		return
	}
	procs, _ := os.ReadFile(filepath.Join(parentDir, "supervisor", "cgroup.procs"))
	if f := strings.Fields(string(procs)); len(f) != 1 || f[0] != strconv.Itoa(os.Getpid()) {
		t.Fatalf("processes in the supervisor leaf after the sidecar exited: %q (this test is %d)", procs, os.Getpid())
	}
}
