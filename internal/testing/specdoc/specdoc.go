// Package specdoc hands tests the text of the repository's contracts (docs/PROTOCOL.md), so that
// a test can hold the binary and the spec to each other.
package specdoc

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Protocol returns the part of docs/PROTOCOL.md from the level-2 heading that begins with
// heading ("## Appendix A") to the next level-2 heading, or fails t.
func Protocol(t testing.TB, heading string) string {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("specdoc: no caller information")
	}
	path := filepath.Join(filepath.Dir(self), "..", "..", "..", "docs", "PROTOCOL.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n"+heading)
	if !ok {
		t.Fatalf("%s has no heading %q", path, heading)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	return sec
}
