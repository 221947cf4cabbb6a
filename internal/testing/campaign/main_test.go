package campaign_test

import (
	"context"
	"os"
	"testing"

	"github.com/cba1309c/steward/internal/testing/campaign"
	"github.com/cba1309c/steward/internal/testing/testbin"
)

// TestMain doubles as a failover host process: TestFailoverCampaign names this test binary as
// Config.Node, and the campaign re-runs it with the node's config in the environment.
func TestMain(m *testing.M) {
	if os.Getenv(campaign.NodeConfigEnv) != "" {
		os.Exit(campaign.NodeMain(context.Background(), os.Stdin, os.Stdout, os.Stderr))
	}
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}
