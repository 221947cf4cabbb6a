package campaign_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSeesSidecarsFromOutside fails if the campaign imports the sidecar, isolation or plugin
// packages, or depends on sidecar or isolation at all: it sees a sidecar only as a host does
// (host itself uses plugin for the go-plugin transport, so plugin is banned as a direct import).
func TestSeesSidecarsFromOutside(t *testing.T) {
	const mod = "github.com/cba1309c/steward/"
	list := func(format string) []string {
		out, err := exec.Command("go", "list", "-f", format, mod+"internal/testing/campaign").Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		return strings.Fields(strings.Trim(string(out), "[]\n"))
	}
	for _, dep := range list("{{.Imports}}") {
		for _, banned := range []string{"sidecar", "isolation", "plugin"} {
			if dep == mod+banned || strings.HasPrefix(dep, mod+banned+"/") {
				t.Errorf("campaign imports %s", dep)
			}
		}
	}
	for _, dep := range list("{{.Deps}}") {
		for _, banned := range []string{"sidecar", "isolation"} {
			if dep == mod+banned || strings.HasPrefix(dep, mod+banned+"/") {
				t.Errorf("campaign depends on %s", dep)
			}
		}
	}
}
