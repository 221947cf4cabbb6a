package isolation

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// OwnMemoryCeiling reads the memory this process may use (MemoryCeiling) from /proc and
// /sys/fs/cgroup.
func OwnMemoryCeiling() (MemoryCeiling, error) { return memoryCeiling("/") }

// memoryCeiling is OwnMemoryCeiling with every path below root (a fake cgroupfs in tests): it
// reads root/proc/self/cgroup and root/proc/meminfo, and the limits under root/sys/fs/cgroup.
// Both the v1 memory hierarchy and the unified one are walked, where mounted; a cgroup path that
// is not visible there (a container's view) is walked from its deepest visible ancestor.
func memoryCeiling(root string) (MemoryCeiling, error) {
	mi, err := os.ReadFile(filepath.Join(root, "proc/meminfo"))
	if err != nil {
		return MemoryCeiling{}, fmt.Errorf("isolation: memory ceiling: %w", err)
	}
	total, ok := meminfoBytes(string(mi), "MemTotal")
	if !ok || total <= 0 {
		return MemoryCeiling{}, errors.New("isolation: memory ceiling: no MemTotal in /proc/meminfo")
	}
	c := MemoryCeiling{Bytes: total, Source: CeilingMachine, Detail: "/proc/meminfo MemTotal"}
	pc, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return c, nil // no cgroups: the machine is the ceiling
	}
	fs := filepath.Join(root, "sys/fs/cgroup")
	for _, line := range strings.Split(string(pc), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var hier, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			// The unified hierarchy: at the root on a pure v2 host, beside v1 on a hybrid one
			// (where it has no memory controller, so no memory.max either).
			for _, m := range []string{fs, filepath.Join(fs, "unified")} {
				if _, err := os.Stat(filepath.Join(m, "cgroup.controllers")); err == nil {
					hier, file = m, "memory.max"
					break
				}
			}
		case containsField(parts[1], "memory"):
			hier, file = filepath.Join(fs, "memory"), "memory.limit_in_bytes"
		}
		if hier == "" {
			continue
		}
		if b, p, ok := lowestLimit(hier, parts[2], file); ok && b < c.Bytes {
			c = MemoryCeiling{Bytes: b, Source: CeilingCgroup, Detail: strings.TrimPrefix(p, strings.TrimSuffix(root, "/"))}
		}
	}
	return c, nil
}

func containsField(list, name string) bool {
	for _, f := range strings.Split(list, ",") {
		if f == name {
			return true
		}
	}
	return false
}

// lowestLimit reads file in the cgroup rel of the hierarchy mounted at hier and in each of its
// ancestors, and returns the lowest limit and its path ("max" and absent files count as none).
func lowestLimit(hier, rel, file string) (int64, string, bool) {
	var best int64
	var at string
	found := false
	for p := path.Clean("/" + rel); ; p = path.Dir(p) {
		f := filepath.Join(hier, p, file)
		if b, err := os.ReadFile(f); err == nil {
			if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 && (!found || v < best) {
				best, at, found = v, f, true
			}
		}
		if p == "/" {
			return best, at, found
		}
	}
}
