package sidecar

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage/lancemanifest"
)

func frags(rows ...uint64) []lancemanifest.Fragment {
	out := make([]lancemanifest.Fragment, len(rows))
	for i, r := range rows {
		out[i] = lancemanifest.Fragment{ID: uint64(i), PhysicalRows: r}
	}
	return out
}

// TestPlanSegments: the runs are contiguous, disjoint, cover every fragment, and balance rows.
func TestPlanSegments(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rows    []uint64
		k       int
		maxRows int64
		want    [][]uint64
	}{
		{"even split", []uint64{10, 10, 10, 10, 10, 10}, 3, 0, [][]uint64{{0, 1}, {2, 3}, {4, 5}}},
		{"balanced by rows", []uint64{40, 10, 10, 10, 10, 10}, 2, 0, [][]uint64{{0, 1}, {2, 3, 4, 5}}},
		{"more segments than fragments", []uint64{5, 5}, 4, 0, [][]uint64{{0}, {1}}},
		{"one segment", []uint64{5, 5, 5}, 1, 0, [][]uint64{{0, 1, 2}}},
		{"max rows", []uint64{10, 10, 10, 10, 10}, 0, 20, [][]uint64{{0, 1}, {2, 3}, {4}}},
		{"a fragment above max rows", []uint64{50, 10}, 0, 20, [][]uint64{{0}, {1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := planSegments(frags(tc.rows...), tc.k, tc.maxRows)
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Fatalf("plan %v, want %v", got, tc.want)
			}
			m := lancemanifest.Manifest{Version: 1, Fragments: frags(tc.rows...)}
			var refs []rpc.SegmentRef
			for i, run := range got {
				refs = append(refs, rpc.SegmentRef{UUID: strings.Repeat(string(rune('a'+i)), 8), FragmentIDs: run})
			}
			if err := checkCoverage(m, refs); err != nil {
				t.Fatalf("the plan does not cover its version: %v", err)
			}
		})
	}
}

// TestCheckCoverage: overlaps, missing fragments and fragments of no version are refused.
func TestCheckCoverage(t *testing.T) {
	m := lancemanifest.Manifest{Version: 3, Fragments: frags(1, 1, 1)}
	for _, tc := range []struct {
		name string
		segs []rpc.SegmentRef
		want string
	}{
		{"overlap", []rpc.SegmentRef{{UUID: "a", FragmentIDs: []uint64{0, 1}}, {UUID: "b", FragmentIDs: []uint64{1, 2}}}, "fragment 1 is in segments a and b"},
		{"missing", []rpc.SegmentRef{{UUID: "a", FragmentIDs: []uint64{0, 1}}}, "fragment 2 of version 3 is in no segment"},
		{"unknown fragment", []rpc.SegmentRef{{UUID: "a", FragmentIDs: []uint64{0, 1, 2, 7}}}, "names fragment 7"},
	} {
		err := checkCoverage(m, tc.segs)
		if !errors.Is(err, errCoverage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := checkCoverage(m, []rpc.SegmentRef{{UUID: "a", FragmentIDs: []uint64{0, 2}}, {UUID: "b", FragmentIDs: []uint64{1}}}); err != nil {
		t.Errorf("exact cover refused: %v", err)
	}
}
