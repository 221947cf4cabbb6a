//go:build linux && v2guest

package isolation

import (
	"strings"
	"testing"
)

// TestV2ProbeLeavesTheDelegatedTreeAsFound is systemd's ExecStartPre=steward doctor without
// DelegateSubgroup= (systemd < 254): as uid 65534, alone in a cgroup delegated to it, Probe moves
// itself into the supervisor leaf and enables memory and pids in its own cgroup (cgroup v2's
// no-internal-process rule then forbids any process there), verifies v2, and undoes it all: the
// cgroup's processes, subtree_control and children are as found, and a process can be born in
// it again, as systemd's ExecStart must be.
func TestV2ProbeLeavesTheDelegatedTreeAsFound(t *testing.T) {
	needPureV2(t)
	r := probeLeavesTheTreeAsFound(t, testParent+"-restore-delegated", 65534)
	last := r.Report.Checks[len(r.Report.Checks)-1]
	if r.Report.Mode != ModeV2 || !strings.Contains(last.Detail, "disabled memory pids in ") {
		t.Errorf("mode %s, last check %+v: want v2, memory and pids disabled again in the delegated cgroup", r.Report.Mode, last)
	}
}
