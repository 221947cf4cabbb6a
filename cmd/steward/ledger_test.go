package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestLedgerCLIUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no args", nil, 2, "usage:"},
		{"unknown", []string{"repair"}, 2, "unknown ledger command"},
		{"no reason", []string{"quarantine", "--state-dir", dir, "--by", "ops"}, 2, "--by and --reason are required"},
		{"stray argument", []string{"quarantine", "--state-dir", dir, "--by", "ops", "--reason", "x", "slot0"}, 2, "unexpected argument"},
		{"nothing corrupt", []string{"quarantine", "--state-dir", dir, "--by", "ops", "--reason", "x"}, 1, "no corrupt ledger slot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runLedger(context.Background(), tc.args, &out, &errb)
			if code != tc.wantCode || !strings.Contains(errb.String(), tc.wantErr) {
				t.Fatalf("exit %d (want %d), stderr:\n%s", code, tc.wantCode, errb.String())
			}
		})
	}
}
