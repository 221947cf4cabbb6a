package campaign

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestTempLeftovers: each domain dir inside a leftover sidecar dir is counted, an empty sidecar
// dir and a stray file once each, and an empty or missing TMPDIR holds nothing.
func TestTempLeftovers(t *testing.T) {
	dir := t.TempDir()
	if got, err := tempLeftovers(filepath.Join(dir, "missing")); err != nil || len(got) != 0 {
		t.Fatalf("missing TMPDIR: %v %v, want nothing", got, err)
	}
	if got, err := tempLeftovers(dir); err != nil || len(got) != 0 {
		t.Fatalf("empty TMPDIR: %v %v, want nothing", got, err)
	}
	for _, d := range []string{"steward-10-20/steward-a-1-x", "steward-10-20/steward-b-2-y", "steward-11-21"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := tempLeftovers(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"steward-10-20/steward-a-1-x", "steward-10-20/steward-b-2-y", "steward-11-21", "stray"}
	for i := range want {
		want[i] = filepath.Join(dir, want[i])
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("leftovers %v, want %v", got, want)
	}
}
