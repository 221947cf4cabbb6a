package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestVersion: `steward version` names the build version first (as steward.hello reports it),
// then the module, the commit and the platform; the Makefile's stamps win over build info.
func TestVersion(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v1.2.3-4-gabcdef0-dirty", "abcdef0123456789abcdef0123456789abcdef01"
	var out bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &out); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{"steward v1.2.3-4-gabcdef0-dirty", "module  github.com/cba1309c/steward ",
		"commit  abcdef0123456789abcdef0123456789abcdef01 (modified)", "built   go"}
	if len(lines) != len(want) {
		t.Fatalf("version output:\n%s", out.String())
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d %q, want it to begin %q", i+1, lines[i], w)
		}
	}
}
