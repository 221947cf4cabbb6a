//go:build linux && v2guest

package v2vm

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/rpc"
)

// TestAsExampleDB is the database of deploy/systemd/exampledb.service in the systemd VM
// (TestShippedUnitUnderSystemd): /usr/local/bin/exampledb runs it with the unit's arguments
// after "--". As a database on systemd older than 254 must (no DelegateSubgroup=), it moves
// itself into <unit>/supervisor, then starts `--steward` with `--steward-args` over stdio,
// which must find its delegated, empty parent, and runs one BTREE build that must commit.
func TestAsExampleDB(t *testing.T) {
	args := flag.Args()
	var bin, sargs string
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--steward":
			bin = args[i+1]
		case "--steward-args":
			sargs = args[i+1]
		}
	}
	if bin == "" || !pureV2() {
		t.Fatalf("needs pure cgroup v2 and the unit's --steward (args %q)", args)
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	own := filepath.Join("/sys/fs/cgroup", strings.TrimSpace(strings.TrimPrefix(string(cg), "0::")))
	sup := filepath.Join(own, "supervisor")
	if err := os.Mkdir(sup, 0o755); err != nil {
		t.Fatalf("the unit's cgroup is not delegated to uid %d: %v", os.Geteuid(), err)
	}
	if err := os.WriteFile(filepath.Join(sup, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("uid %d moved from %s into its leaf supervisor; steward args %q", os.Geteuid(), own, sargs)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := host.LaunchStdio(ctx, host.Config{Path: bin, Args: strings.Fields(sargs)})
	if err != nil {
		t.Fatalf("launch %s: %v", bin, err)
	}
	defer c.Close()
	iso := c.Info().Isolation
	b, _ := json.Marshal(iso.Parent)
	t.Logf("hello: isolation %s verified=%v, parent %s", iso.Mode, iso.Verified, b)
	if !iso.Verified || iso.Mode != "v2" || iso.Parent == nil || iso.Parent.Source != "delegated" || len(iso.Parent.Dirs) != 1 || iso.Parent.Dirs[0] != own {
		t.Fatalf("hello: want v2 verified in the delegated unit cgroup %s", own)
	}
	root := guestStore(t, "events")
	inv := testbin.RandID("inv-")
	// The unit's arguments set no --memory-budget: on this 2 GiB guest the budget is below the
	// default worker memory (1 GiB), so the call names a limit that fits, as the refusal asks.
	res, err := c.Mutate(ctx, rpc.MutateParams{InvocationID: inv, JobID: "job-" + inv, DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(),
		Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + root}, Path: "events"}, PinnedVersion: 1, Op: rpc.OpCreate,
		Index:  rpc.IndexSpec{Name: "ix", Type: rpc.IndexBTree, Columns: []string{"name"}},
		Limits: &rpc.WorkerLimits{MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("BTREE build: %s %d %s version %d, %d ms in the domain", res.Phase, res.Code, res.CompletionReason, res.CommittedVersion, res.WallMs)
	if res.Phase != rpc.PhaseNativeReturn || res.CompletionReason != rpc.CompletionCommitted || res.CommittedVersion != 2 {
		t.Fatalf("BTREE build: %+v", res)
	}
}
