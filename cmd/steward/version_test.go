package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testbin"
)

// TestVersion: `steward version` names the build version first (as steward.hello reports it),
// then the module, the commit, the platform and what its workers run (a test binary embeds no
// worker); the Makefile's stamps win over build info.
func TestVersion(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v1.2.3-4-gabcdef0-dirty", "abcdef0123456789abcdef0123456789abcdef01"
	var out bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &out); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"steward v1.2.3-4-gabcdef0-dirty", "module  github.com/cba1309c/steward ",
		"commit  abcdef0123456789abcdef0123456789abcdef01 (modified)", "built   go", "workers this binary"}
	if len(lines) != len(want) {
		t.Fatalf("version output:\n%s", out.String())
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d %q, want it to begin %q", i+1, lines[i], w)
		}
	}
}

// TestVersionOfBuiltBinary: steward as make build and the tests build it says its workers run
// the steward-worker it embeds, of the size that binary has.
func TestVersionOfBuiltBinary(t *testing.T) {
	out, err := exec.Command(testbin.Steward(t), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("steward version: %v\n%s", err, out)
	}
	fi, err := os.Stat(testbin.Worker(t))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("\nworkers the embedded steward-worker (%.1f MB)\n", float64(fi.Size())/1e6)
	if !strings.Contains(string(out), want) {
		t.Fatalf("steward version:\n%s\nwant a line %q", out, strings.TrimSpace(want))
	}
}
