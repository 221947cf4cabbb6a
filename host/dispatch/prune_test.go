package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
)

// Finished jobs are pruned beyond Config.PruneKeep and past Config.PruneAge, at most every
// PruneInterval; UNKNOWN jobs not released and live jobs are never pruned, and a pass with
// nothing due writes nothing. (The store used to keep every job forever.)
func TestPruneFinishedJobs(t *testing.T) {
	noLeaks(t)
	e := newEnv(t, func(c *Config) { c.PruneKeep = 3; c.PruneAge = 24 * time.Hour; c.PruneInterval = time.Hour })
	f := newFake()
	e.d.AddSidecar("n1", f)
	var committed []string
	for i := range 6 {
		j := e.submit(fakeRequest(fmt.Sprintf("done_%d", i)))
		e.waitJob(j.ID, "committed", settled)
		committed = append(committed, j.ID)
		e.clock.Advance(time.Second) // distinct update times: the newest are kept
	}
	f.setAnswer(func(_ context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
		return rpc.MutateResult{Phase: rpc.PhaseIndeterminate, Code: rpc.ReasonWorkerLost, InvocationID: p.InvocationID, Epoch: f.Epoch()}, nil
	})
	unknown := e.waitJob(e.submit(fakeRequest("lost")).ID, "unknown", stateIs(StateUnknown))
	released := e.waitJob(e.submit(fakeRequest("lost_released")).ID, "unknown", stateIs(StateUnknown))
	if _, err := e.d.Release(released.ID, "ops", "storage gone"); err != nil {
		t.Fatal(err)
	}
	e.d.RemoveSidecar("n1")
	pending := e.submit(fakeRequest("waiting"))

	ids := func() map[string]bool {
		jobs, err := e.d.List(ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, j := range jobs {
			out[j.ID] = true
		}
		return out
	}
	if st := e.round(); st.Pruned != 0 {
		t.Fatalf("pruned before PruneInterval passed: %+v", st)
	}
	e.clock.Advance(time.Hour)
	if st := e.round(); st.Pruned != 4 {
		t.Fatalf("7 finished jobs, keep 3: round %+v", st)
	}
	left := ids()
	// The released UNKNOWN job is the most recently updated finished one, then done_5 and done_4.
	for id, want := range map[string]bool{
		committed[0]: false, committed[3]: false, committed[4]: true, committed[5]: true,
		released.ID: true, unknown.ID: true, pending.ID: true,
	} {
		if left[id] != want {
			t.Fatalf("job %s kept %t, want %t (left: %v)", id, left[id], want, left)
		}
	}
	e.clock.Advance(25 * time.Hour)
	if st := e.round(); st.Pruned != 3 {
		t.Fatalf("past PruneAge: round %+v", st)
	}
	if left := ids(); len(left) != 2 || !left[unknown.ID] || !left[pending.ID] {
		t.Fatalf("left %v, want only the UNKNOWN and the PENDING job", left)
	}
	before := fileState(t, e.path)
	e.clock.Advance(2 * time.Hour)
	if st := e.round(); st != (RoundStats{}) {
		t.Fatalf("nothing due: round %+v", st)
	}
	if fileState(t, e.path) != before {
		t.Fatal("a prune pass with nothing due wrote to the store")
	}
	e.close()
}

// TestPruneKeepsStepsOfLiveSegmentedJobs: a finished step is never pruned while its segmented job
// is unfinished (the job reads its answer: the segment's uuid); once the job is finished, both go.
func TestPruneKeepsStepsOfLiveSegmentedJobs(t *testing.T) {
	noLeaks(t)
	e := newEnv(t, func(c *Config) { c.PruneKeep = 1; c.PruneAge = time.Hour; c.PruneInterval = time.Minute })
	now := e.clock.Now()
	parent := Job{ID: "seg", Op: rpc.OpCreate, State: StateRunning, SlotHeld: true, Refresh: RefreshNotRequired, Created: now,
		Segmented: &SegmentedPlan{BuildID: "seg", Fragments: []uint64{0, 1}, Runs: [][]uint64{{0}, {1}}, Sidecars: []string{"n1"},
			Committer: "n1", Attempts: []int{1, 0}}}
	step := Job{ID: StepID("seg", rpc.OpSegment, 0, 1), Op: rpc.OpSegment, State: StateCommitted, Refresh: RefreshNotRequired,
		Created: now, Updated: now, Parent: "seg", Sidecar: "n1", Segment: &rpc.SegmentSpec{BuildID: "seg", FragmentIDs: []uint64{0}},
		Result: &Result{Phase: rpc.PhaseNativeReturn, IndexUUID: "0b5e6d3a-3c1b-4a55-9f3e-2f1f1f1f1f1f"}}
	put := func(js ...Job) {
		t.Helper()
		mustUpdate(t, e.d.store, func(tx Tx) error {
			for _, j := range js {
				if err := tx.Put(&j); err != nil {
					return err
				}
			}
			return nil
		})
	}
	put(parent, step)
	e.d.SetEnabled(false)
	e.clock.Advance(2 * time.Hour)
	if st := e.round(); st.Pruned != 0 {
		t.Fatalf("a step of a live segmented job was pruned: %+v", st)
	}
	if _, err := e.d.Get(step.ID); err != nil {
		t.Fatal(err)
	}
	parent.State, parent.SlotHeld, parent.Updated = StateNotCommitted, false, e.clock.Now()
	parent.Segmented.Failed = "test"
	put(parent)
	steps, err := Steps(e.d.store, "seg")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		if s.ID != step.ID {
			s.State, s.SlotHeld = StateNotCommitted, false
			put(s)
		}
	}
	e.clock.Advance(2 * time.Hour)
	if st := e.round(); st.Pruned != 1+len(steps) {
		t.Fatalf("finished job and its %d steps: %+v", len(steps), st)
	}
	e.close()
}
