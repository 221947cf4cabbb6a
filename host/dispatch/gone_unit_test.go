package dispatch

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestMarkGone: what a segmented job's plan becomes when sidecars are found gone (gone.go).
func TestMarkGone(t *testing.T) {
	plan := func() *SegmentedPlan {
		return &SegmentedPlan{BuildID: "b", Sidecars: []string{"n1", "n2", "n3"}, Committer: "n1", Adopted: []string{"n2"}}
	}
	for _, tc := range []struct {
		name      string
		gone      []string
		here      []string
		commitOut bool
		settled   bool
		want      string // the plan after, or "unchanged"
	}{
		{"a builder gone", []string{"n3"}, nil, false, false,
			"sidecars [n1 n2 n3] gone [n3] stranded [n3] committer n1 adopted [n2]"},
		{"the committer gone: replaced, what it adopted stranded", []string{"n1"}, nil, false, false,
			"sidecars [n1 n2 n3] gone [n1] stranded [n1 n2] committer n2 adopted []"},
		{"the committer gone with a commit out: kept", []string{"n1"}, nil, true, false,
			"sidecars [n1 n2 n3] gone [n1] stranded [n1] committer n1 adopted [n2]"},
		{"every plan sidecar gone: this node's join", []string{"n1", "n2", "n3"}, []string{"m1", "n2"}, false, false,
			"sidecars [n1 n2 n3 m1] gone [n1 n2 n3] stranded [n1 n2 n3] committer m1 adopted []"},
		{"every plan sidecar gone and none here: wait for a node that has one", []string{"n1", "n2", "n3"}, nil, false, false, "unchanged"},
		{"nothing new", nil, nil, false, false, "unchanged"},
		{"a settled job", []string{"n3"}, nil, false, true, "unchanged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := Job{ID: "p", State: StateRunning, Segmented: plan()}
			if tc.settled {
				j.State = StateCommitted
			}
			show := func(sp *SegmentedPlan) string {
				return fmt.Sprintf("sidecars %v gone %v stranded %v committer %s adopted %v", sp.Sidecars, sp.Gone, sp.Stranded, sp.Committer, sp.Adopted)
			}
			before := len(j.History)
			changed := markGone(&j, tc.gone, tc.here, tc.commitOut, time.Unix(1, 0))
			got := show(j.Segmented)
			if !changed {
				if tc.want != "unchanged" || got != show(plan()) || len(j.History) != before {
					t.Fatalf("reported unchanged, plan %s; want %s", got, tc.want)
				}
				return
			}
			if got != tc.want || len(j.History) != before+1 || j.History[before].Event != EventSidecarGone {
				t.Fatalf("got %s (history %v)\nwant %s", got, j.History, tc.want)
			}
		})
	}
}

// TestUnseenFor: a plan sidecar counts as gone only after it has gone unannounced for the grace,
// by the dispatcher's clock, and seeing it live again starts the count over.
func TestUnseenFor(t *testing.T) {
	now := time.Unix(1000, 0)
	s, err := OpenBolt(filepath.Join(t.TempDir(), "jobs.db"), BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := New(Config{Store: s, Now: func() time.Time { return now }, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var got []time.Duration
	for _, step := range []struct {
		advance time.Duration
		live    bool
	}{{0, false}, {30 * time.Second, false}, {31 * time.Second, false}, {0, true}, {5 * time.Second, false}, {10 * time.Second, false}} {
		now = now.Add(step.advance)
		got = append(got, d.unseenFor("n1", step.live))
	}
	want := []time.Duration{0, 30 * time.Second, 61 * time.Second, 0, 0, 10 * time.Second}
	if !slices.Equal(got, want) || d.cfg.SidecarGoneAfter != time.Minute {
		t.Fatalf("unseen %v, want %v; default grace %s", got, want, d.cfg.SidecarGoneAfter)
	}
}
