package rpc

import (
	"strings"
	"testing"
)

func TestSegmentValidate(t *testing.T) {
	const u1, u2 = "0b0e1c1e-1111-4222-8333-444455556666", "0b0e1c1e-1111-4222-8333-444455556667"
	base := func(op string, seg *SegmentSpec) MutateParams {
		return MutateParams{InvocationID: "i1", DeadlineUnixMs: 1, PinnedVersion: 1, Op: op,
			Dataset: DatasetRef{Store: StoreSpec{URL: "file:///tmp/x"}, Path: "ds"},
			Index:   IndexSpec{Name: "idx", Columns: []string{"vec"}, Type: "IVF_PQ"}, Segment: seg, Engine: "lance"}
	}
	for _, tc := range []struct {
		name string
		p    MutateParams
		want string // "" = valid
	}{
		{"train", base(OpTrain, &SegmentSpec{BuildID: "b1"}), ""},
		{"segment", base(OpSegment, &SegmentSpec{BuildID: "b1", FragmentIDs: []uint64{0, 3}, TrainUUID: u1}), ""},
		{"commit", base(OpCommitSegments, &SegmentSpec{BuildID: "b1", Segments: []SegmentRef{{UUID: u1, FragmentIDs: []uint64{0}}, {UUID: u2, FragmentIDs: []uint64{1}}}}), ""},
		{"no segment", base(OpTrain, nil), "needs segment"},
		{"segment on CREATE", base(OpCreate, &SegmentSpec{BuildID: "b1"}), "applies to TRAIN"},
		{"bad build id", base(OpTrain, &SegmentSpec{BuildID: "b/1"}), "build_id"},
		{"build id too long for its owner", base(OpTrain, &SegmentSpec{BuildID: strings.Repeat("b", MaxBuildID+1)}), "build_id"},
		{"longest build id", base(OpTrain, &SegmentSpec{BuildID: strings.Repeat("b", MaxBuildID)}), ""},
		{"train with fragments", base(OpTrain, &SegmentSpec{BuildID: "b1", FragmentIDs: []uint64{1}}), "build_id only"},
		{"segment without fragments", base(OpSegment, &SegmentSpec{BuildID: "b1"}), "fragment_ids"},
		{"fragments not ascending", base(OpSegment, &SegmentSpec{BuildID: "b1", FragmentIDs: []uint64{3, 1}}), "ascending"},
		{"bad train uuid", base(OpSegment, &SegmentSpec{BuildID: "b1", FragmentIDs: []uint64{1}, TrainUUID: "X"}), "train_uuid"},
		{"commit without segments", base(OpCommitSegments, &SegmentSpec{BuildID: "b1"}), "segment.segments"},
		{"segment listed twice", base(OpCommitSegments, &SegmentSpec{BuildID: "b1", Segments: []SegmentRef{{UUID: u1, FragmentIDs: []uint64{0}}, {UUID: u1, FragmentIDs: []uint64{1}}}}), "twice"},
		{"bad segment uuid", base(OpCommitSegments, &SegmentSpec{BuildID: "b1", Segments: []SegmentRef{{UUID: "nope", FragmentIDs: []uint64{0}}}}), "uuid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPlanValidate(t *testing.T) {
	p := PlanParams{Dataset: DatasetRef{Store: StoreSpec{URL: "file:///tmp/x"}, Path: "ds"}, Version: 1}
	for _, tc := range []struct {
		k    int
		rows int64
		ok   bool
	}{{3, 0, true}, {0, 1000, true}, {0, 0, false}, {2, 10, false}, {MaxSegments + 1, 0, false}} {
		p.Segments, p.MaxRowsPerSegment = tc.k, tc.rows
		if err := p.Validate(); (err == nil) != tc.ok {
			t.Errorf("segments=%d max_rows=%d: %v", tc.k, tc.rows, err)
		}
	}
	p.Segments, p.MaxRowsPerSegment = 2, 0
	for name, edit := range map[string]func(*PlanParams){
		"version 0":   func(p *PlanParams) { p.Version = 0 },
		"no store":    func(p *PlanParams) { p.Dataset.Store.URL = "" },
		"path escape": func(p *PlanParams) { p.Dataset.Path = "../ds" },
	} {
		q := p
		edit(&q)
		if err := q.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}
