package campaign

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const cgroupRoot = "/sys/fs/cgroup"

// leftovers looks for what the campaign may have left behind once its sidecars and MinIO are
// stopped: processes in its cgroup parent or mentioning its directory on their command line
// (sidecars, workers, MinIO, escapees), and cgroups under its parent in any hierarchy. Empty
// owner directories of exited sidecars are removed and not reported; a domain directory, a
// directory with processes, or one that cannot be removed is a leftover. The parent itself is
// removed last.
func leftovers(dir, parent string) (procs, cgroups []string, err error) {
	// Processes killed with their sidecar may take a moment to be reaped by init.
	for range 50 {
		if procs, err = processes(dir, parent); err != nil || len(procs) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return nil, nil, err
	}
	for _, h := range hierarchies() {
		cgroups = append(cgroups, removeParent(filepath.Join(h, parent))...)
	}
	return procs, cgroups, nil
}

// processes lists the processes (other than this one) that belong to the campaign.
func processes(dir, parent string) ([]string, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.Contains(cg, []byte("/"+parent)) || bytes.Contains(cmd, []byte(dir)) || bytes.Contains(cmd, []byte(parent)) {
			out = append(out, fmt.Sprintf("pid %d: %s", pid, strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")))
		}
	}
	return out, nil
}

// hierarchies lists the cgroup hierarchy roots: the v1 controllers and the unified hierarchy
// (hybrid), or the root itself (pure v2).
func hierarchies() []string {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return []string{cgroupRoot}
	}
	ents, _ := os.ReadDir(cgroupRoot)
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, filepath.Join(cgroupRoot, e.Name()))
		}
	}
	return out
}

// removeParent removes the campaign's parent in one hierarchy, deepest first, and returns what
// counts as left over.
func removeParent(root string) []string {
	if _, err := os.Stat(root); err != nil {
		return nil
	}
	var out []string
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.Reverse(dirs) // children before parents
	for _, d := range dirs {
		depth := strings.Count(strings.TrimPrefix(d, root), "/") // 0 parent, 1 owner, 2 domain
		if procs, _ := os.ReadFile(filepath.Join(d, "cgroup.procs")); len(bytes.TrimSpace(procs)) > 0 {
			out = append(out, fmt.Sprintf("%s holds processes %s", d, strings.Fields(string(procs))))
			continue
		}
		if depth >= 2 {
			out = append(out, d+" (a worker domain left after its sidecar exited)")
		}
		if err := syscall.Rmdir(d); err != nil && !os.IsNotExist(err) {
			out = append(out, fmt.Sprintf("%s cannot be removed: %v", d, err))
		}
	}
	return out
}
