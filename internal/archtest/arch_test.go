// Package archtest enforces steward's dependency direction with `go list -deps`: leaves stay
// leaves, the host never links the supervisor, the worker never links the host side, and the
// product links no test harness.
package archtest

import (
	"encoding/json"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/cba1309c/steward"

type pkg struct {
	ImportPath string
	Deps       []string
}

func list(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps=false", "-json", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		deps[p.ImportPath] = p.Deps // Deps: every package imported, transitively (non-test code)
	}
	if len(deps) < 8 {
		t.Fatalf("go list found only %d packages", len(deps))
	}
	// The rules below only mean something if Deps is the transitive list: the binary links all.
	found := false
	for _, d := range deps[module+"/cmd/steward"] {
		found = found || d == module+"/sidecar"
	}
	if !found {
		t.Fatalf("cmd/steward does not list sidecar among its deps: go list output is not what this test expects")
	}
	return deps
}

// within reports whether path is pkg or below it.
func within(path, pkg string) bool {
	return path == module+"/"+pkg || strings.HasPrefix(path, module+"/"+pkg+"/")
}

func TestDependencyDirection(t *testing.T) {
	all := list(t)
	rules := []struct {
		name string
		from string                // package tree the rule applies to
		bad  func(dep string) bool // forbidden import
		must bool                  // the tree must exist
		desc string
	}{
		{"rpc is a leaf", "rpc", func(d string) bool { return strings.HasPrefix(d, module+"/") }, true, "imports steward package"},
		{"isolation is a leaf", "isolation", func(d string) bool { return strings.HasPrefix(d, module+"/") }, true, "imports steward package"},
		{"storage is a leaf", "storage", func(d string) bool {
			return strings.HasPrefix(d, module+"/") && !within(d, "storage") && d != module+"/internal/boltfile"
		}, true, "imports steward package outside storage"},
		// boltfile (opening bbolt files without trusting them) is shared by the ledger in storage
		// and the dispatcher in host, which may import nothing of each other: it stays a leaf.
		{"internal/boltfile is a leaf", "internal/boltfile", func(d string) bool { return strings.HasPrefix(d, module+"/") }, true, "imports steward package"},
		{"host never links the supervisor", "host", func(d string) bool {
			return within(d, "sidecar") || within(d, "isolation") || within(d, "storage")
		}, true, "imports"},
		{"worker never links the host side", "sidecar/worker", func(d string) bool {
			return within(d, "host") || within(d, "plugin")
		}, false, "imports"},
		{"the ledger links only storage", "storage/ledger", func(d string) bool {
			return strings.HasPrefix(d, module+"/") && d != module+"/storage" && d != module+"/internal/boltfile"
		}, true, "imports"},
		{"the dataset layout stays in storage/dataset", "storage/ledger", func(d string) bool {
			return within(d, "storage/dataset") || within(d, "storage/index")
		}, true, "imports"},
		{"the supervisor never links the worker", "sidecar", func(d string) bool {
			return within(d, "sidecar/worker")
		}, true, "imports"},
		// The index format (storage/index) owns what readers agree on; its builder sorts and
		// reaches the format only through the writer's exported calls.
		{"the index builder links only the index format", "storage/index/build", func(d string) bool {
			return strings.HasPrefix(d, module+"/") && d != module+"/storage/index" && d != module+"/storage"
		}, true, "imports"},
		{"storecfg links only rpc and storage", "storecfg", func(d string) bool {
			return strings.HasPrefix(d, module+"/") && !within(d, "rpc") && !within(d, "storage")
		}, true, "imports"},
	}
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			found := false
			for path, deps := range all {
				if !within(path, r.from) || strings.HasSuffix(path, "_test") {
					continue
				}
				found = true
				for _, d := range deps {
					if r.bad(d) {
						t.Errorf("%s %s %s", path, r.desc, d)
					}
				}
			}
			if r.must && !found {
				t.Fatalf("no package under %s: the rule checks nothing", r.from)
			}
		})
	}
}

// harness reports whether dep is a test harness: a package under internal/testing (launchers,
// fake servers, test engines, the fault campaign), or a steward package named like the standard
// library's test helpers (storage/storagetest, internal/boltfile/boltfiletest, as net/http/httptest).
func harness(dep string) bool {
	return within(dep, "internal/testing") || strings.HasPrefix(dep, module+"/") && strings.HasSuffix(path.Base(dep), "test")
}

// tools are the commands besides the harnesses themselves that may link a harness: test tools,
// never shipped.
var tools = []string{"cmd/steward-campaign"}

// TestProductLinksNoHarness: the shipped binaries link no harness, and outside the harnesses and
// the test tools no package imports one, even indirectly; tests (_test.go files, which Deps does
// not list) import them freely. bbolt keeps internal/btesting out of its library the same way.
func TestProductLinksNoHarness(t *testing.T) {
	all := list(t)
	for _, bin := range []string{"cmd/steward", "cmd/steward-worker"} {
		t.Run(bin, func(t *testing.T) {
			deps, ok := all[module+"/"+bin]
			if !ok {
				t.Fatalf("%s is not in go list ./...: the rule checks nothing", bin)
			}
			for _, d := range deps {
				if harness(d) {
					t.Errorf("%s links the harness %s", bin, d)
				}
			}
		})
	}
	t.Run("harnesses only from tests and tools", func(t *testing.T) {
		harnesses := 0
		for p, deps := range all {
			if harness(p) {
				harnesses++
				continue
			}
			if strings.HasSuffix(p, "_test") || slices.ContainsFunc(tools, func(tool string) bool { return within(p, tool) }) {
				continue
			}
			for _, d := range deps {
				if harness(d) {
					t.Errorf("%s imports the harness %s", p, d)
				}
			}
		}
		if harnesses < 8 {
			t.Fatalf("only %d harness packages found: the rule checks little", harnesses)
		}
	})
}
