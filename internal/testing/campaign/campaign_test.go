package campaign_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/campaign"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testminio"
)

// mutationsEnv sets the campaign's size (default 36: every fault kind at least twice);
// seedEnv its seed (default 1). A large run:
//
//	STEWARD_CAMPAIGN_MUTATIONS=240 go test ./internal/testing/campaign -run TestCampaign -v -timeout 30m
const (
	mutationsEnv = "STEWARD_CAMPAIGN_MUTATIONS"
	seedEnv      = "STEWARD_CAMPAIGN_SEED"
)

func envInt(t *testing.T, name string, def int64) int64 {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// minioBinary is the tools dir's MinIO, found from the repository root (or $STEWARD_TOOLS).
func minioBinary(t *testing.T) string {
	t.Helper()
	bin, err := testminio.Binary()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	return bin
}

// TestCampaign runs a small randomized fault campaign against a real MinIO and real sidecars, and
// requires the checker to find nothing: every COMMITTED job in its dataset's manifest chain, no
// NOT_COMMITTED one there, no UNKNOWN left, no orphan object, no leftover process or cgroup.
func TestCampaign(t *testing.T) {
	if _, err := exec.LookPath("/bin/sleep"); err != nil {
		testenv.Unavailable(t, "/bin/sleep is needed by the fork_bomb fault")
	}
	runCampaign(t, "campaign", envInt(t, mutationsEnv, 2*int64(len(campaign.Kinds()))), campaign.Config{})
}

// runCampaign runs a campaign of n mutations on cfg (Steward, MinIO, work dir and Keep filled in;
// the seed from the environment, else cfg's, else 1), and requires every fault kind to have run, every job in the store and no violation.
func runCampaign(t *testing.T, what string, n int64, cfg campaign.Config) campaign.Report {
	t.Helper()
	testenv.NeedRoot(t)
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		testenv.Unavailable(t, "cgroups unavailable: "+err.Error())
	}
	cfg.Steward, cfg.MinIOBinary, cfg.WorkDir = testbin.Steward(t), minioBinary(t), testenv.GuestDir(t) // contained workers reach their temp dirs below it
	cfg.Mutations, cfg.Seed, cfg.Keep = int(n), envInt(t, seedEnv, max(cfg.Seed, 1)), os.Getenv("STEWARD_CAMPAIGN_KEEP") == "1"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute+time.Duration(n)*3*time.Second)
	defer cancel()
	start := time.Now()
	rep, err := campaign.Run(ctx, cfg)
	logReport(t, what, n, start, rep, err)
	for _, k := range rep.Kinds {
		if k.Total() == 0 {
			t.Errorf("fault kind %s never ran", k.Kind)
		}
	}
	if rep.Jobs != int(n) {
		t.Errorf("%d jobs in the store, want %d", rep.Jobs, n)
	}
	if !rep.OK() {
		t.Errorf("%d violations", len(rep.Violations))
	}
	return rep
}

// logReport logs a campaign's table (and its job lines when verbose or failing), and ends t on a
// campaign error: skipped when the sidecars' isolation did not verify, failed otherwise.
func logReport(t *testing.T, what string, n int64, start time.Time, rep campaign.Report, err error) {
	t.Helper()
	var table strings.Builder
	_ = rep.WriteTable(&table)
	if testing.Verbose() || !rep.OK() {
		_ = rep.WriteJobs(&table)
	}
	t.Logf("%s of %d mutations in %s:\n%s", what, n, time.Since(start).Round(time.Second), table.String())
	if err != nil {
		if errors.Is(err, campaign.ErrIsolation) {
			testenv.Unavailable(t, err.Error())
		}
		t.Fatal(err)
	}
}

// lanceMutationsEnv sets the Lance campaign's size (default 16: every Lance fault kind at least
// twice). A large run:
//
//	STEWARD_LANCE_CAMPAIGN_MUTATIONS=240 go test ./internal/testing/campaign -run TestLanceCampaign -v -timeout 30m
const lanceMutationsEnv = "STEWARD_LANCE_CAMPAIGN_MUTATIONS"

// TestLanceCampaign runs the fault campaign on the real Lance engine (engines/lance, registered in
// every sidecar) against a real MinIO: every Lance fault kind — the engine's own crashes, a real
// OOM kill under a lowered memory limit, sidecar SIGKILLs, MinIO outages, deadlines — and requires
// the checker, reading Lance's own version chain, to find nothing.
func TestLanceCampaign(t *testing.T) {
	py, dir, err := testbin.LanceTools()
	if err != nil {
		testenv.Unavailable(t, "Lance engine not installed: "+err.Error())
	}
	rep := runCampaign(t, "Lance campaign", envInt(t, lanceMutationsEnv, 2*int64(len(campaign.LanceKinds()))),
		// Seed 4 draws six clean or crash_after_commit CREATEs and REPLACEs among the 16: enough
		// for commits to land between the faults, so that the commit checks run.
		campaign.Config{Engine: campaign.EngineLance, Lance: campaign.LanceTools{Python: py, Dir: dir}, Seed: 4})
	if rep.Commits == 0 {
		t.Errorf("no job committed a version: the checker checked no commit")
	}
}

// segmentMutationsEnv sets the segment campaign's size (default: every segment fault kind once).
// The closing run of issue 45:
//
//	STEWARD_SEGMENT_CAMPAIGN_MUTATIONS=200 go test ./internal/testing/campaign -run TestSegmentCampaign -v -timeout 60m
const segmentMutationsEnv = "STEWARD_SEGMENT_CAMPAIGN_MUTATIONS"

// TestSegmentCampaign runs segmented index builds (BTREE, and IVF_PQ with its TRAIN) through the
// dispatcher and real Lance sidecars on MinIO, with a fault in one step of each: OOM kills and
// engine crashes in TRAIN, SEGMENT (before and after Lance writes it, after its record) and
// COMMIT_SEGMENTS, sidecar SIGKILLs and MinIO outages. The checker reads Lance's describe_indices:
// every COMMITTED job's index covers every fragment exactly once with the segments its commit
// listed, no NOT_COMMITTED job's index is in any version, no build object is left, no orphan.
func TestSegmentCampaign(t *testing.T) {
	py, dir, err := testbin.LanceTools()
	if err != nil {
		testenv.Unavailable(t, "Lance engine not installed: "+err.Error())
	}
	rep := runCampaign(t, "segment campaign", envInt(t, segmentMutationsEnv, int64(len(campaign.SegmentKinds()))),
		campaign.Config{Engine: campaign.EngineLance, Lance: campaign.LanceTools{Python: py, Dir: dir}, Segments: true})
	if rep.IndexesChecked == 0 || rep.Steps == 0 {
		t.Errorf("%d indexes read back over %d steps: the checker checked no segmented commit", rep.IndexesChecked, rep.Steps)
	}
}
