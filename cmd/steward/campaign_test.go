package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestCampaignFlags checks the refusals that need no sidecar: a real campaign runs this
// executable as its sidecars, which a test binary cannot be (see campaign.TestCampaign).
func TestCampaignFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown kind", []string{"--kinds", "hang,meteor", "--minio-bin", "/nonexistent"}, `unknown fault kind "meteor"`},
		{"unfunded deadline", []string{"--deadline", "1s"}, "does not fund the kill budget"},
		{"negative count", []string{"--mutations", "-1"}, "must not be negative"},
		{"stray argument", []string{"now"}, "unexpected argument"},
		{"unknown engine", []string{"--engine", "oracle", "--minio-bin", "/nonexistent"}, `unknown engine "oracle"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := runCampaign(context.Background(), tc.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit %d, want 2; stderr: %s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tc.want)
			}
		})
	}
}
