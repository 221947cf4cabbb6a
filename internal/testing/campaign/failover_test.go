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
	testenv.NeedRoot(t)
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		testenv.Unavailable(t, "cgroups unavailable: "+err.Error())
	}
	etcd, err := testetcd.Binary()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
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
	if rep.Assigned == 0 || rep.MaxAssigned > 1 || rep.MaxSends > 1 {
		t.Errorf("%d invocations reached a worker, at most %d times each (SEND at most %d): want some, at most once",
			rep.Assigned, rep.MaxAssigned, rep.MaxSends)
	}
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
