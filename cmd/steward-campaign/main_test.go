package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestCampaignFlags checks the refusals that need no sidecar and no MinIO: a real campaign runs
// in internal/testing/campaign's tests (TestCampaign, TestFailoverCampaign).
func TestCampaignFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown kind", []string{"--steward", "/bin/true", "--kinds", "hang,meteor", "--minio-bin", "/nonexistent"}, `unknown fault kind "meteor"`},
		{"unfunded deadline", []string{"--steward", "/bin/true", "--deadline", "1s"}, "does not fund the kill budget"},
		{"negative count", []string{"--steward", "/bin/true", "--mutations", "-1"}, "must not be negative"},
		{"stray argument", []string{"now"}, "unexpected argument"},
		{"unknown engine", []string{"--steward", "/bin/true", "--engine", "oracle", "--minio-bin", "/nonexistent"}, `unknown engine "oracle"`},
		{"no steward", []string{"--steward", "/nonexistent/steward"}, "the sidecars' executable"},
		{"lance not installed", []string{"--steward", "/bin/true", "--engine", "lance", "--lance-python", "/nonexistent/python", "--minio-bin", "/nonexistent"}, "Lance engine not installed"},
		{"node without config", []string{"node"}, "STEWARD_CAMPAIGN_NODE is not set"},
		{"failover lance unsegmented", []string{"--steward", "/bin/true", "--failover", "--engine", "lance", "--lance-python", "/nonexistent/python", "--minio-bin", "/nonexistent"}, "or segmented Lance builds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("STEWARD_CAMPAIGN_NODE", "")
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tc.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2; stderr: %s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tc.want)
			}
		})
	}
}
