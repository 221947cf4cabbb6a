package campaign_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/campaign"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testetcd"
)

// failoverMutationsEnv sizes the failover campaign (default 32: every failover kind at least
// twice). The closing-note run:
//
//	STEWARD_FAILOVER_MUTATIONS=300 nice go test ./internal/testing/campaign -run TestFailoverCampaign -v -timeout 60m
const failoverMutationsEnv = "STEWARD_FAILOVER_MUTATIONS"

// TestFailoverCampaign runs a small failover campaign: three host processes with their own real
// sidecars on one journal in a real 3-member etcd cluster and one real MinIO, hosts SIGKILLed and
// SIGSTOPped and etcd members killed mid-run. The checker must find nothing, and every invocation
// reached a worker at most once across the cluster, by the sidecars' own logs.
func TestFailoverCampaign(t *testing.T) {
	etcd := failoverNeeds(t)
	n := envInt(t, failoverMutationsEnv, 2*int64(len(campaign.FailoverKinds())))
	seed := envInt(t, seedEnv, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(n)*3*time.Second)
	defer cancel()
	start := time.Now()
	rep, err := campaign.RunFailover(ctx, campaign.Config{
		Steward: testbin.Steward(t), Node: self(t), MinIOBinary: minioBinary(t), EtcdBinary: etcd, WorkDir: workDir(t),
		Mutations: int(n), Seed: seed, Rows: 4000, Keep: os.Getenv("STEWARD_CAMPAIGN_KEEP") == "1",
	})
	logReport(t, "failover campaign", n, start, rep, err)
	if rep.Jobs != int(n) {
		t.Errorf("%d jobs in the journal, want %d", rep.Jobs, n)
	}
	checkOnce(t, rep)
	if !rep.OK() {
		t.Errorf("%d violations", len(rep.Violations))
	}
}

// segmentFailoverEnv sizes the failover campaign of segmented builds (default 10: every kind
// twice). A large run:
//
//	STEWARD_SEGMENT_FAILOVER_MUTATIONS=60 go test ./internal/testing/campaign -run TestSegmentFailoverCampaign -v -timeout 30m
const segmentFailoverEnv = "STEWARD_SEGMENT_FAILOVER_MUTATIONS"

// TestSegmentFailoverCampaign runs segmented Lance builds (BTREE, and IVF_PQ with its TRAIN) on
// the failover topology: each submitted through a host process, whose dispatcher plans it on its
// own sidecar, while hosts are SIGKILLed (a successor continues under the same name) or
// SIGSTOPped, etcd members killed and MinIO stopped, each timed from the first send of one step
// of a job. The checker must find nothing: Lance's describe_indices over every COMMITTED job, no
// segment of a NOT_COMMITTED job in any version, no build object, no orphan, every invocation
// sent and handed to a worker at most once across the hosts, the ledgers drained.
func TestSegmentFailoverCampaign(t *testing.T) {
	etcd := failoverNeeds(t)
	py, dir, err := testbin.LanceTools()
	if err != nil {
		testenv.Unavailable(t, "Lance engine not installed: "+err.Error())
	}
	n := envInt(t, segmentFailoverEnv, 2*int64(len(campaign.SegmentFailoverKinds())))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(n)*5*time.Second)
	defer cancel()
	start := time.Now()
	rep, err := campaign.RunFailover(ctx, campaign.Config{
		Steward: testbin.Steward(t), Node: self(t), MinIOBinary: minioBinary(t), EtcdBinary: etcd, WorkDir: workDir(t),
		Engine: campaign.EngineLance, Lance: campaign.LanceTools{Python: py, Dir: dir}, Segments: true,
		Mutations: int(n), Seed: envInt(t, seedEnv, 1), Keep: os.Getenv("STEWARD_CAMPAIGN_KEEP") == "1",
	})
	logReport(t, "segment failover campaign", n, start, rep, err)
	for _, k := range rep.Kinds {
		if k.Total() == 0 {
			t.Errorf("fault kind %s never ran", k.Kind)
		}
	}
	if rep.Jobs != int(n) {
		t.Errorf("%d jobs in the journal, want %d", rep.Jobs, n)
	}
	if rep.IndexesChecked == 0 || rep.Steps == 0 {
		t.Errorf("%d indexes read back over %d steps: the checker checked no segmented commit", rep.IndexesChecked, rep.Steps)
	}
	checkOnce(t, rep)
	if !rep.OK() {
		t.Errorf("%d violations", len(rep.Violations))
	}
}

// TestFailoverNeedsNode: without an executable for its host processes a failover campaign is a
// configuration error, found before anything starts.
func TestFailoverNeedsNode(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the failover campaign runs on Linux only")
	}
	_, err := campaign.RunFailover(context.Background(), campaign.Config{Steward: "/bin/true", MinIOBinary: "/bin/true"})
	if !errors.Is(err, campaign.ErrConfig) {
		t.Fatalf("RunFailover without Node: %v, want ErrConfig", err)
	}
}

// self is this test binary, which TestMain turns into a failover host process.
func self(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("find the test binary: %v", err)
	}
	return exe
}

// workDir is t's temp dir, or $TMPDIR when STEWARD_CAMPAIGN_KEEP=1 keeps the campaign directory
// (logs of every host and sidecar incarnation, etcd data) past the test.
func workDir(t *testing.T) string {
	if os.Getenv("STEWARD_CAMPAIGN_KEEP") == "1" {
		return ""
	}
	return t.TempDir()
}

// failoverNeeds fails (or, without STEWARD_REQUIRE_REAL, skips) a failover campaign test that
// lacks root, cgroups or etcd, and returns the etcd executable.
func failoverNeeds(t *testing.T) string {
	t.Helper()
	testenv.NeedRoot(t)
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		testenv.Unavailable(t, "cgroups unavailable: "+err.Error())
	}
	etcd, err := testetcd.Binary()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	return etcd
}

// checkOnce: some invocations reached a worker, none twice, and no host sent one twice.
func checkOnce(t *testing.T, rep campaign.Report) {
	t.Helper()
	if rep.Assigned == 0 || rep.MaxAssigned > 1 || rep.MaxSends > 1 {
		t.Errorf("%d invocations reached a worker, at most %d times each (SEND at most %d): want some, at most once",
			rep.Assigned, rep.MaxAssigned, rep.MaxSends)
	}
}
