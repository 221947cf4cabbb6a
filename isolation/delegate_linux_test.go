package isolation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// These run over a fake cgroupfs (plain directories and files) because this machine's only
// cgroup2 is hybrid's controller-less /sys/fs/cgroup/unified: a pure v2 hierarchy with memory and
// pids, where the no-internal-process rule applies, cannot exist here. The v1/hybrid delegation
// runs for real in sidecar's TestDelegatedUnprivileged.

// fakeCgroup makes dir look like a cgroup2 directory holding procs.
func fakeCgroup(t *testing.T, dir string, procs string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, v := range map[string]string{"cgroup.procs": procs, "cgroup.subtree_control": "", "cgroup.controllers": "memory pids"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPlaceDomainsV2(t *testing.T) {
	for _, tc := range []struct {
		name     string
		own      string
		others   []int
		v2Limits bool
		upProcs  string // cgroup.procs of own's parent
		parent   string
		leaf     string
		err      string
	}{
		{name: "alone: leaf, domains beside it", own: "system.slice/db.service", v2Limits: true,
			parent: "system.slice/db.service", leaf: "system.slice/db.service/supervisor"},
		{name: "shared without controllers: below own", own: "svc", others: []int{42}, parent: "svc"},
		{name: "shared on v2: the delegated empty parent (DelegateSubgroup)", own: "db.service/supervisor", others: []int{42},
			v2Limits: true, parent: "db.service"},
		{name: "shared on v2, parent busy: refused", own: "db.service/supervisor", others: []int{42}, v2Limits: true,
			upProcs: "7\n", err: "is not empty"},
		{name: "shared on v2 at the top: refused", own: "db.service", others: []int{42}, v2Limits: true, err: "DelegateSubgroup"},
		{name: "hierarchy root: a directory of its own", own: "", others: []int{1}, v2Limits: true, parent: DefaultParent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			fakeCgroup(t, root, "1\n")
			if up := filepath.Dir(tc.own); tc.own != "" && up != "." {
				fakeCgroup(t, filepath.Join(root, up), tc.upProcs)
			}
			fakeCgroup(t, filepath.Join(root, tc.own), "")
			pl, err := placeDomains(root, tc.own, tc.others, tc.v2Limits)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("placeDomains = %+v, %v; want an error with %q", pl, err, tc.err)
				}
				return
			}
			if err != nil || pl.parent != tc.parent || pl.leaf != tc.leaf {
				t.Fatalf("placeDomains = %+v, %v; want parent %q leaf %q", pl, err, tc.parent, tc.leaf)
			}
			if tc.own != "" && pl.enable != pl.parent {
				t.Fatalf("enable %q: a delegated tree enables from its parent down, not %q", pl.enable, pl.parent)
			}
		})
	}
}

// TestV2EnablesOnlyBelowTheDelegation: controllers are written into subtree_control from the
// delegated parent down and never above it (those cgroups are systemd's).
func TestV2EnablesOnlyBelowTheDelegation(t *testing.T) {
	mount := t.TempDir()
	fakeCgroup(t, mount, "1\n")
	fakeCgroup(t, filepath.Join(mount, "system.slice"), "")
	fakeCgroup(t, filepath.Join(mount, "system.slice", "db.service"), "")
	g, err := newV2Group(mount, "system.slice/db.service/42-7/w1", "system.slice/db.service", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.remove()
	for dir, want := range map[string]string{
		mount:                          "",
		"system.slice":                 "",
		"system.slice/db.service":      "+memory +pids",
		"system.slice/db.service/42-7": "+memory +pids",
	} {
		b, _ := os.ReadFile(filepath.Join(mount, dir, "cgroup.subtree_control"))
		if string(b) != want {
			t.Errorf("%s/cgroup.subtree_control = %q, want %q", dir, b, want)
		}
	}
}
