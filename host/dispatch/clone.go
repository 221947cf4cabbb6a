package dispatch

import (
	"maps"
	"slices"

	"github.com/cba1309c/steward/rpc"
)

// clone returns a deep copy of j: no slice, map or pointer of the copy is shared with j, so a
// store can hand out a job it keeps (decodeCache) and the caller may change it freely.
// TestCloneSharesNothing fails when a field added to Job (or to a type it holds) is shared.
func (j *Job) clone() Job {
	c := *j
	c.Index.Columns = slices.Clone(j.Index.Columns)
	c.Index.Params = maps.Clone(j.Index.Params)
	c.Schema = slices.Clone(j.Schema)
	c.Limits = clonePtr(j.Limits)
	c.Segmented = j.Segmented.clone()
	c.Segment = cloneSegment(j.Segment)
	c.Result = clonePtr(j.Result)
	c.Resolution = clonePtr(j.Resolution)
	if j.Cancel != nil {
		c.Cancel = clonePtr(j.Cancel)
		c.Cancel.Reply = clonePtr(j.Cancel.Reply)
	}
	c.History = slices.Clone(j.History)
	return c
}

func (p *SegmentedPlan) clone() *SegmentedPlan {
	if p == nil {
		return nil
	}
	c := *p
	c.Fragments = slices.Clone(p.Fragments)
	if p.Runs != nil {
		c.Runs = make([][]uint64, len(p.Runs))
		for i, r := range p.Runs {
			c.Runs[i] = slices.Clone(r)
		}
	}
	c.Sidecars = slices.Clone(p.Sidecars)
	c.Attempts = slices.Clone(p.Attempts)
	c.Adopted = slices.Clone(p.Adopted)
	c.Gone = slices.Clone(p.Gone)
	c.Stranded = slices.Clone(p.Stranded)
	return &c
}

func cloneSegment(s *rpc.SegmentSpec) *rpc.SegmentSpec {
	if s == nil {
		return nil
	}
	c := *s
	c.FragmentIDs = slices.Clone(s.FragmentIDs)
	if s.Segments != nil {
		c.Segments = slices.Clone(s.Segments)
		for i, r := range s.Segments {
			c.Segments[i].FragmentIDs = slices.Clone(r.FragmentIDs)
		}
	}
	return &c
}

// clonePtr copies the value p points to (a shallow copy: for types without references).
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}
