package sidecar_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cba1309c/steward/rpc"
)

// progressOf is the $/progress trace of one invocation, in the order the host got it.
func (e *sidecarEnv) progressOf(inv string) []rpc.ProgressParams {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []rpc.ProgressParams
	for _, p := range e.progress {
		if p.InvocationID == inv {
			out = append(out, p)
		}
	}
	return out
}

// checkStages fails t unless trace passes through exactly the stages want, in that order, with
// done never going back within a stage and never past a known total, and ends with done == total.
func checkStages(t *testing.T, trace []rpc.ProgressParams, want []string) {
	t.Helper()
	var seen []string
	var lines []string
	for i, p := range trace {
		lines = append(lines, fmt.Sprintf("%s %d/%d", p.Stage, p.Done, p.Total))
		if len(seen) == 0 || seen[len(seen)-1] != p.Stage {
			if slices.Contains(seen, p.Stage) {
				t.Errorf("stage %q came back after %v", p.Stage, seen)
			}
			seen = append(seen, p.Stage)
		} else if p.Done < trace[i-1].Done {
			t.Errorf("stage %s went back: %d after %d", p.Stage, p.Done, trace[i-1].Done)
		}
		if p.Total > 0 && p.Done > p.Total {
			t.Errorf("stage %s: done %d past total %d", p.Stage, p.Done, p.Total)
		}
	}
	t.Logf("$/progress trace (%d notifications): %s", len(trace), strings.Join(lines, ", "))
	if !slices.Equal(seen, want) {
		t.Fatalf("stages %v, want %v", seen, want)
	}
	if last := trace[len(trace)-1]; last.Done != last.Total {
		t.Errorf("the last report %+v is not its stage's end", last)
	}
}

// TestLanceProgressStagesOfIVFPQ: a real IVF_PQ build through a real sidecar reports Lance's own
// stages (lance.progress.IndexProgress, forwarded by the engine) and then the engine's commit, in
// order, each with monotone done counts (docs/ENGINE.md §7).
func TestLanceProgressStagesOfIVFPQ(t *testing.T) {
	l := newLanceSidecar(t, false)
	const path = "vectors"
	var created struct {
		Version int64 `json:"version"`
	}
	l.ctl(&created, "create", l.uri(path), "--rows", "8000", "--dim", "32")
	inv := randID("inv-")
	res := l.mutate(l.lanceParams(inv, path, created.Version, rpc.OpCreate, "idx_vec", "vec", "IVF_PQ",
		map[string]string{"num_partitions": "8", "num_sub_vectors": "4"}))
	if res.Code != rpc.NativeOK || res.CommittedVersion != created.Version+1 {
		t.Fatalf("result %+v", res)
	}
	checkStages(t, l.progressOf(inv), []string{"train_ivf", "train_quantizer", "shuffle", "merge_partitions", "commit"})
}

// TestBuiltinProgressStages: the built-in engine reports load_data (rows read), write (rows of the
// segment stored) and commit, in order, each with monotone done counts; a DROP only commits.
func TestBuiltinProgressStages(t *testing.T) {
	e := newSidecar(t)
	e.makeDataset("ds", 200_000)
	inv := randID("inv-")
	if res := e.mutate(e.params(inv, "ds", 1, rpc.OpCreate, "by_id", "id", rpc.IndexBTree)); res.Code != rpc.NativeOK {
		t.Fatalf("CREATE: %+v", res)
	}
	checkStages(t, e.progressOf(inv), []string{"load_data", "write", "commit"})
	inv = randID("inv-")
	if res := e.mutate(e.params(inv, "ds", 2, rpc.OpDrop, "by_id", "", "")); res.Code != rpc.NativeOK {
		t.Fatalf("DROP: %+v", res)
	}
	checkStages(t, e.progressOf(inv), []string{"commit"})
}
