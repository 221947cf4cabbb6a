package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/cba1309c/steward/internal/testbin"
	"github.com/cba1309c/steward/internal/testenv"
)

// needLanceTools points steward at the installed Lance engine (fails under STEWARD_REQUIRE_REAL=1
// when it is missing).
func needLanceTools(t *testing.T) {
	t.Helper()
	py, dir, err := testbin.LanceTools()
	if err != nil {
		testenv.Unavailable(t, "Lance engine not installed: "+err.Error())
	}
	t.Setenv(envLancePython, py)
	t.Setenv(envLanceDir, dir)
}

// TestDatasetCreateLance: --format lance makes a real Lance dataset (read back by Lance's own
// library through describe and versions).
func TestDatasetCreateLance(t *testing.T) {
	needLanceTools(t)
	dir := t.TempDir()
	if code, out, errOut := runDS(t, "create", "--format", "lance", "--store", dir, "--path", "wh/events", "--rows", "500", "--dim", "8"); code != 0 {
		t.Fatalf("create: %d %s %s", code, out, errOut)
	}
	code, out, errOut := runDS(t, "describe", "--format", "lance", "--store", "file://"+dir, "--path", "wh/events")
	var d struct {
		Version int64             `json:"version"`
		Rows    int64             `json:"rows"`
		Schema  map[string]string `json:"schema"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || d.Rows != 500 || d.Version != 1 || d.Schema["vec"] == "" {
		t.Fatalf("describe: %d %q %s (%+v)", code, out, errOut, d)
	}
	if code, out, _ := runDS(t, "versions", "--format", "lance", "--store", dir, "--path", "wh/events"); code != 0 || out == "" {
		t.Fatalf("versions: %d %q", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "wh", "events", "_versions")); err != nil {
		t.Fatalf("no Lance version chain: %v", err)
	}
	if code, _, _ := runDS(t, "create", "--format", "lance", "--store", dir, "--path", "x", "--csv", "f.csv"); code != 2 {
		t.Errorf("--format lance with --csv: exit %d, want 2", code)
	}
}
