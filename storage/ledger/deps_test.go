package ledger_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The ledger is a storage leaf: among steward packages it may import only storage and
// internal/boltfile, itself a leaf. What it needs to know about datasets (the sweep's layout)
// its caller passes in.
func TestLeafImports(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", "github.com/cba1309c/steward/storage/ledger").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		rest, ok := strings.CutPrefix(p, "github.com/cba1309c/steward/")
		if ok && rest != "storage/ledger" && rest != "storage" && rest != "internal/boltfile" {
			t.Errorf("storage/ledger depends on %s", p)
		}
	}
}
