package rpc

import (
	"errors"
	"fmt"
	"slices"
)

// Segment build operations of index.mutate (docs/PROTOCOL.md §3.13). A segmented job is one TRAIN
// (vector indexes only), K SEGMENTs over disjoint fragment sets of the pinned version, and one
// COMMIT_SEGMENTS at pinned+1 that publishes them as one index. They are index.mutate ops, not a
// method of their own, because each is an ordinary contained invocation: the same admission,
// deadline, limits, single answer, custody and index.resolve as CREATE.
const (
	OpTrain          = "TRAIN"
	OpSegment        = "SEGMENT"
	OpCommitSegments = "COMMIT_SEGMENTS"
)

// Completion reasons of a NATIVE_RETURN OK that committed nothing by design: the invocation's
// objects passed to its build's custody (SegmentSpec.BuildID) instead of being published.
const (
	CompletionTrained        = "TRAINED"
	CompletionSegmentWritten = "SEGMENT_WRITTEN"
)

// MethodIndexPlan reads a version's fragments and plans a segmented build over them.
const MethodIndexPlan = "index.plan"

// CapSegments: index.mutate takes the segment ops and index.plan answers.
const CapSegments = "index.segments"

// Bounds of a segmented build.
const (
	MaxBuildID         = 128 - len("build:") // so that its owner id BuildOwner is one too
	MaxSegments        = 1024                // segments of one build, and per COMMIT_SEGMENTS
	MaxSegmentFragment = 1 << 16             // fragment ids named by one request
)

// IsSegmentOp reports whether op is one of the segment build operations.
func IsSegmentOp(op string) bool {
	return op == OpTrain || op == OpSegment || op == OpCommitSegments
}

// SegmentSpec is the segment work of a TRAIN, SEGMENT or COMMIT_SEGMENTS.
type SegmentSpec struct {
	// BuildID names the build: its objects stay in the sidecar's custody under the owner
	// host_txn "build:<BuildID>" until its COMMIT_SEGMENTS publishes or abandons them.
	BuildID string `json:"build_id"`
	// FragmentIDs (SEGMENT) are the fragments of the pinned version the segment indexes.
	FragmentIDs []uint64 `json:"fragment_ids,omitempty"`
	// TrainUUID (SEGMENT of a vector index) is the index_uuid a TRAIN of the build answered: the
	// IVF centroids and PQ codebook every segment of the build shares.
	TrainUUID string `json:"train_uuid,omitempty"`
	// Segments (COMMIT_SEGMENTS) are the segments to publish, each as a SEGMENT answered it.
	Segments []SegmentRef `json:"segments,omitempty"`
}

// SegmentRef is one written segment: its index_uuid and its fragments.
type SegmentRef struct {
	UUID        string   `json:"uuid"`
	FragmentIDs []uint64 `json:"fragment_ids"`
}

// BuildArea is the dataset-relative folder of build's own objects (its training and segment
// records); a segment's index files are under _indices/<uuid>/ (docs/PROTOCOL.md §3.13).
func BuildArea(build string) string { return "_steward/builds/" + build + "/" }

// BuildOwner is the ledger owner id (kind host_txn) that holds a build's objects between its
// invocations.
func BuildOwner(build string) string { return "build:" + build }

// validateSegment checks the segment work of p (p.Op is a segment op).
func (p Mutation) validateSegment() error {
	s := p.Segment
	if s == nil {
		return fmt.Errorf("op %s needs segment", p.Op)
	}
	// The build's ledger owner, "build:<id>", must itself be a valid owner id for objects.*.
	if !ValidID(BuildOwner(s.BuildID)) || s.BuildID == "" {
		return fmt.Errorf("segment.build_id must be 1-%d characters of [A-Za-z0-9._:-]", MaxBuildID)
	}
	if len(p.Index.Columns) != 1 || !validToken(p.Index.Type, 32, false) {
		return fmt.Errorf("%s needs index.columns (one) and index.type", p.Op)
	}
	if p.IfNotExists || p.IfExists {
		return fmt.Errorf("if_not_exists and if_exists do not apply to %s", p.Op)
	}
	switch p.Op {
	case OpTrain:
		if len(s.FragmentIDs) > 0 || len(s.Segments) > 0 || s.TrainUUID != "" {
			return errors.New("TRAIN takes segment.build_id only")
		}
	case OpSegment:
		if len(s.FragmentIDs) == 0 || len(s.FragmentIDs) > MaxSegmentFragment || len(s.Segments) > 0 {
			return fmt.Errorf("SEGMENT needs 1-%d segment.fragment_ids and no segment.segments", MaxSegmentFragment)
		}
		if s.TrainUUID != "" && !validUUID(s.TrainUUID) {
			return errors.New("segment.train_uuid must be a lowercase 8-4-4-4-12 hex uuid")
		}
		if err := ascendingUnique("segment.fragment_ids", s.FragmentIDs); err != nil {
			return err
		}
	case OpCommitSegments:
		if len(s.Segments) == 0 || len(s.Segments) > MaxSegments || len(s.FragmentIDs) > 0 || s.TrainUUID != "" {
			return fmt.Errorf("COMMIT_SEGMENTS needs 1-%d segment.segments and nothing else", MaxSegments)
		}
		n := 0
		for i, r := range s.Segments {
			if !validUUID(r.UUID) {
				return fmt.Errorf("segment.segments[%d].uuid must be a lowercase 8-4-4-4-12 hex uuid", i)
			}
			if slices.ContainsFunc(s.Segments[:i], func(o SegmentRef) bool { return o.UUID == r.UUID }) {
				return fmt.Errorf("segment %s is listed twice", r.UUID)
			}
			if n += len(r.FragmentIDs); len(r.FragmentIDs) == 0 || n > MaxSegmentFragment {
				return fmt.Errorf("segment.segments[%d]: want 1 or more fragment ids, %d in all at most", i, MaxSegmentFragment)
			}
			if err := ascendingUnique(fmt.Sprintf("segment.segments[%d].fragment_ids", i), r.FragmentIDs); err != nil {
				return err
			}
		}
	}
	return nil
}

func ascendingUnique(what string, ids []uint64) error {
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return fmt.Errorf("%s must be ascending without repeats", what)
		}
	}
	return nil
}

// validUUID: lowercase 8-4-4-4-12 hex, as Lance names index segments.
func validUUID(u string) bool {
	if len(u) != 36 {
		return false
	}
	for i, c := range []byte(u) {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// PlanParams are the params of index.plan.
type PlanParams struct {
	Dataset     DatasetRef   `json:"dataset"`
	Version     int64        `json:"version"` // the version to plan over (the job's pinned one)
	Credentials *Credentials `json:"credentials,omitempty"`
	// Segments asks for this many segments (1-MaxSegments; at most one per fragment).
	Segments int `json:"segments,omitempty"`
	// MaxRowsPerSegment asks for as few segments as keep each at or under this many physical
	// rows (a fragment larger than it is a segment of its own). Exactly one of Segments and
	// MaxRowsPerSegment is set.
	MaxRowsPerSegment int64 `json:"max_rows_per_segment,omitempty"`
}

// Validate implements Validator.
func (p PlanParams) Validate() error {
	if err := validateDataset(p.Dataset, p.Credentials); err != nil {
		return err
	}
	if p.Version < 1 {
		return errors.New("version must be ≥ 1")
	}
	if (p.Segments > 0) == (p.MaxRowsPerSegment > 0) || p.Segments < 0 || p.Segments > MaxSegments || p.MaxRowsPerSegment < 0 {
		return fmt.Errorf("set exactly one of segments (1-%d) and max_rows_per_segment (> 0)", MaxSegments)
	}
	return nil
}

// PlanFragment is one fragment of the planned version.
type PlanFragment struct {
	ID           uint64 `json:"id"`
	PhysicalRows uint64 `json:"physical_rows"`
}

// PlanResult is index.plan's answer: the version's fragments, read from its manifest by the
// sidecar, and disjoint fragment sets covering them exactly, contiguous in fragment id order and
// balanced by physical rows.
type PlanResult struct {
	Version   int64          `json:"version"`
	Fragments []PlanFragment `json:"fragments"`
	Segments  [][]uint64     `json:"segments"`
}
