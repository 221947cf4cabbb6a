package rpc_test

import (
	"math"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
)

// safety_age_ms converts to a Duration without wrapping: 317 years is "never", not 10 minutes.
func TestSweepSafetyAgeSaturates(t *testing.T) {
	const year = int64(365*24) * int64(time.Hour/time.Millisecond)
	never := time.Duration(math.MaxInt64)
	tests := []struct {
		name string
		ms   int64
		want time.Duration
	}{
		{"unset", 0, 0},
		{"one hour", 3_600_000, time.Hour},
		{"the longest distinct age", rpc.MaxSafetyAgeMs, time.Duration(rpc.MaxSafetyAgeMs) * time.Millisecond},
		{"one past it", rpc.MaxSafetyAgeMs + 1, never},
		{"317 years", 317 * year, never},
		{"largest integer", math.MaxInt64, never},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := rpc.ObjectsSweepParams{SafetyAgeMs: tc.ms}
			if got := p.SafetyAge(); got != tc.want || got < 0 {
				t.Fatalf("SafetyAge(%d ms) = %v, want %v", tc.ms, got, tc.want)
			}
		})
	}
}
