package isolation

import (
	"os"
	"testing"
)

// TestProcCgroupPath: the ladder's one-line parser agrees with the full parse of
// /proc/<pid>/cgroup for every hierarchy isolation uses, and finds nothing for a missing pid.
func TestProcCgroupPath(t *testing.T) {
	v1, unified, err := readProcCgroup(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, controller, want string }{
		{"unified", "", unified},
		{"memory", hMemory, v1[hMemory]},
		{"pids", hPids, v1[hPids]},
		{"freezer", hFreezer, v1[hFreezer]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := procCgroupPath(os.Getpid(), tc.controller)
			if ok != (tc.want != "") || got != tc.want {
				t.Fatalf("procCgroupPath(self, %q) = %q, %v; want %q", tc.controller, got, ok, tc.want)
			}
		})
	}
	if p, ok := procCgroupPath(1<<30, ""); ok {
		t.Fatalf("pid 1<<30: %q, want none", p)
	}
}
