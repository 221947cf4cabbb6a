package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
)

// TestDemo runs `steward demo` as a newcomer would (smaller dataset) and checks that every act of
// the story happened: two commits, an OOM kill classified and resolved, lookups that agree with a
// scan, the jobs table and the ledger figures.
func TestDemo(t *testing.T) {
	text := runDemoCmd(t, "--rows", "400000", "--vectors", "0")
	for _, want := range []string{
		"BTREE by_id(id)", "committed v2", "BITMAP by_category(category)", "committed v3",
		"OOM-killed", "resolved NOT_COMMITTED", "build-by-name-small-memory  CREATE  by_name      NOT_COMMITTED",
		"speed-up", "tickets held now                0 of 65,536",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if strings.Count(text, "→ COMMITTED") != 2 {
		t.Errorf("want exactly two committed jobs")
	}
	if t.Failed() {
		t.Log(text)
	}
}

// TestDemoVectors runs the demo's Lance act (small): IVF_PQ OOM-killed under a small limit and
// resolved NOT_COMMITTED through the Lance engine, then COMMITTED, then a nearest-neighbour query
// by Lance's own reader; then the same index in 4 segments under the limit that killed it.
func TestDemoVectors(t *testing.T) {
	needLanceTools(t)
	text := runDemoCmd(t, "--rows", "100000", "--vectors", "20000", "--vector-oom-limit", "83886080")
	for _, want := range []string{
		"20,000 rows × 128-dim", "ivf-pq-small-memory         CREATE  by_vec       NOT_COMMITTED  INDETERMINATE_AFTER_LAUNCH",
		"ivf-pq                      CREATE  by_vec       COMMITTED", "nearest 10 neighbours", "listed true, planned true",
		"tickets held now                0 of 65,536",
		"COMMIT_SEGMENTS  4 segments             NATIVE_RETURN 0 COMMITTED", "one index of 4 segments, 0 unindexed rows", "recall@10 against an exact scan",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(text)
	}
}

// runDemoCmd runs `steward demo` (as root) and returns its output.
func runDemoCmd(t *testing.T, args ...string) string {
	t.Helper()
	testenv.NeedRoot(t)
	cmd := exec.Command(testbin.Steward(t), append([]string{"demo"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("steward demo: %v\n%s", err, out)
	}
	return string(out)
}
