package isolation

import (
	"os"
	"path"
	"path/filepath"
)

// Hierarchy names: the v1 controllers isolation uses and the unified (cgroup2) hierarchy, wherever
// it is mounted (/sys/fs/cgroup on pure v2, /sys/fs/cgroup/unified on hybrid).
const (
	hMemory  = "memory"
	hPids    = "pids"
	hFreezer = "freezer"
	hUnified = "unified"
)

var allHierarchies = []string{hMemory, hPids, hFreezer, hUnified}

// hierarchyRoot is the mount point of h, or "" if it is not mounted.
func hierarchyRoot(h string) string {
	if h == hUnified {
		return unifiedMount()
	}
	if !v1Mounted(h) {
		return ""
	}
	return filepath.Join(v1Root, h)
}

// mountedHierarchies lists the hierarchies isolation may have created directories in.
func mountedHierarchies() []string {
	var out []string
	for _, h := range allHierarchies {
		if hierarchyRoot(h) != "" {
			out = append(out, h)
		}
	}
	return out
}

// hierarchiesOf lists the hierarchies a mode keeps domains in.
func hierarchiesOf(m Mode) []string {
	switch m {
	case ModeV2:
		return []string{hUnified}
	case ModeHybrid:
		return []string{hMemory, hPids, hUnified}
	case ModeV1:
		return []string{hMemory, hPids, hFreezer}
	}
	return nil
}

// tree is where one supervisor keeps its cgroups: per hierarchy, the parent directory of its
// owner directory, relative to that hierarchy's root. A configured --cgroup-parent is the same
// name in every hierarchy; a delegated (auto) parent is the sidecar's own cgroup in each, which
// may differ between v1 hierarchies.
type tree struct {
	parent map[string]string // hierarchy → parent relative to its root, "" for the root itself
	// enable is, per hierarchy, the highest cgroup whose cgroup.subtree_control isolation may
	// write ("" is the root). A configured parent enables from the root down, as root must; a
	// delegated one from the parent down, never above it (those cgroups belong to whoever
	// delegated the subtree).
	enable map[string]string
	// changes, when set, records what creating domains changes outside them (Probe's journal).
	changes *changes
}

// fixedTree is a configured parent: the same relative directory in every hierarchy.
func fixedTree(parent string) tree {
	t := tree{parent: map[string]string{}, enable: map[string]string{}}
	for _, h := range allHierarchies {
		t.parent[h], t.enable[h] = parent, ""
	}
	return t
}

// rel joins sub to h's parent, relative to h's root (what /proc/<pid>/cgroup shows, without "/").
func (t tree) rel(h string, sub ...string) string {
	return path.Join(append([]string{t.parent[h]}, sub...)...)
}

// abs is rel under h's mount point.
func (t tree) abs(h string, sub ...string) string {
	return filepath.Join(hierarchyRoot(h), t.rel(h, sub...))
}

// exists reports whether h's parent directory exists (a delegated one always does).
func (t tree) exists(h string) bool {
	_, err := os.Stat(t.abs(h))
	return err == nil
}

// hierarchies lists the mounted hierarchies t has a parent in. A delegated tree has none in a
// hierarchy that was not delegated: nothing of isolation's is there, and nothing is touched.
func (t tree) hierarchies() []string {
	var out []string
	for _, h := range mountedHierarchies() {
		if _, ok := t.parent[h]; ok {
			out = append(out, h)
		}
	}
	return out
}
