package campaign

import (
	"errors"
	"slices"
	"testing"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/rpc"
)

// TestSegmentConfig: a segment campaign runs on Lance only, draws the segment kinds (on the
// failover topology its own), and a kind of one campaign is refused by another.
func TestSegmentConfig(t *testing.T) {
	py, dir, err := testbin.LanceTools()
	if err != nil {
		testenv.Unavailable(t, "Lance engine not installed: "+err.Error())
	}
	base := Config{Steward: "/bin/true", MinIOBinary: "/bin/true", Engine: EngineLance, Lance: LanceTools{Python: py, Dir: dir}, Segments: true}
	c, err := base.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Kinds, SegmentKinds()) || c.Rows != 8000 || c.Outstanding != c.Datasets {
		t.Errorf("defaults: kinds %v, rows %d, outstanding %d of %d datasets", c.Kinds, c.Rows, c.Outstanding, c.Datasets)
	}
	fo := base
	fo.failover = true
	if c, err := fo.withDefaults(); err != nil || !slices.Equal(c.Kinds, SegmentFailoverKinds()) {
		t.Errorf("failover defaults: kinds %v (%v), want %v", c.Kinds, err, SegmentFailoverKinds())
	}
	for name, bad := range map[string]Config{
		"builtin engine":         {Steward: "/bin/true", MinIOBinary: "/bin/true", Segments: true},
		"oom on segments":        func() Config { b := base; b.Kinds = []string{KindOOM}; return b }(),
		"train_oom, no segments": func() Config { b := base; b.Segments, b.Kinds = false, []string{KindTrainOOM}; return b }(),
		"train_oom on builtin":   {Steward: "/bin/true", MinIOBinary: "/bin/true", Kinds: []string{KindTrainOOM}},
		"host_kill, one host":    func() Config { b := base; b.Kinds = []string{KindHostKill}; return b }(),
		"train_oom on failover":  func() Config { b := base; b.failover, b.Kinds = true, []string{KindTrainOOM}; return b }(),
		"sidecar_kill on failover": func() Config {
			b := base
			b.failover, b.Kinds = true, []string{KindSidecarKill}
			return b
		}(),
	} {
		if _, err := bad.withDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// TestSegmentPlan: every kind once first, the TRAIN kinds on the IVF_PQ column, and a step's send
// mapped back to its job.
func TestSegmentPlan(t *testing.T) {
	plan := makeSegmentPlan(3, 40, 3, SegmentKinds())
	seen := map[string]bool{}
	for i, p := range plan {
		if i < len(SegmentKinds()) && seen[p.kind] {
			t.Errorf("kind %s twice in the first round", p.kind)
		}
		seen[p.kind] = true
		if f := segmentStepFault[p.kind]; f.op == rpc.OpTrain && segmentColumns[p.column].indexType(p.coin) != "IVF_PQ" {
			t.Errorf("%s on column %s: no TRAIN to fault", p.id(), segmentColumns[p.column].name)
		}
		for _, st := range []struct {
			op     string
			run, a int
			kind   string
		}{{rpc.OpTrain, 0, 0, "train"}, {rpc.OpSegment, 2, 3, rpc.OpSegment}, {rpc.OpCommitSegments, 0, 0, "commit"}} {
			id := dispatch.StepID(p.id(), st.kind, st.run, st.a)
			if got := parentOf(rpc.MutateParams{JobID: id, Op: st.op}); got != p.id() {
				t.Errorf("step %s: parent %q, want %q", id, got, p.id())
			}
			for _, a := range []int{1, 2} { // a failover host's SEND line names the step id only
				id := dispatch.StepID(p.id(), st.kind, st.run, a)
				if parent, op := stepOf(id); parent != p.id() || op != st.op {
					t.Errorf("stepOf(%s) = %q, %q; want %q, %q", id, parent, op, p.id(), st.op)
				}
			}
		}
	}
	if parent, op := stepOf("m0001.segment-oom"); parent != "" || op != "" {
		t.Errorf("a parent id read as step %q of %q", op, parent)
	}
	if len(seen) != len(SegmentKinds()) {
		t.Errorf("kinds drawn %v", seen)
	}
}
