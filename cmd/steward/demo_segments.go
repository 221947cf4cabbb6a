package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/cba1309c/steward/rpc"
)

// demoSegments is how many segments the demo's segmented build has.
const demoSegments = 4

// segmentAct is the Lance act's second half: the IVF_PQ the memory wall killed, built instead as
// segments (PROTOCOL.md §3.13), each its own contained worker under the same limit: one TRAIN,
// one SEGMENT per planned fragment run, one COMMIT_SEGMENTS at pinned+1; then Lance's own reader
// describes the segments and answers a query through the index. The invocations go straight to
// the sidecar: the dispatcher does not drive segmented jobs.
func (d *demo) segmentAct(ctx context.Context) error {
	if d.vectors <= 0 || d.lance == "" {
		return nil
	}
	ref := rpc.DatasetRef{Store: d.ref.Store, Path: d.ref.Path + "-segments"}
	fmt.Fprintf(d.out, "   the same IVF_PQ in %d segments, each a worker under the %s limit (as many rows, in 8 fragments; the training, a bounded sample, with the default):\n",
		demoSegments, bytesIEC(d.vecOOM))
	var created struct {
		Version int64 `json:"version"`
	}
	if err := d.lancectlJSON(ctx, &created, ref, "create", "--rows", fmt.Sprint(d.vectors), "--fragments", "8"); err != nil {
		return err
	}
	pinned := created.Version
	var plan rpc.PlanResult
	if err := d.client.Call(ctx, rpc.MethodIndexPlan, rpc.PlanParams{Dataset: ref, Version: pinned, Credentials: d.creds,
		Segments: demoSegments}, &plan); err != nil {
		return fmt.Errorf("index.plan: %w", err)
	}
	build := "demo-" + demoHex(4)
	ivf := rpc.IndexSpec{Name: "by_vec", Columns: []string{"vec"}, Type: "IVF_PQ",
		Params: map[string]string{"num_partitions": "64", "num_sub_vectors": "16"}}
	start := time.Now()
	call := func(op, what string, seg *rpc.SegmentSpec) (rpc.MutateResult, error) {
		// The training reads a sample whose size the index's parameters bound (partitions × 256
		// rows, 256 × 256 for the codebook), not the dataset's: it runs with the sidecar's limit.
		var limits *rpc.WorkerLimits
		if op != rpc.OpTrain {
			limits = &rpc.WorkerLimits{MemoryBytes: d.vecOOM}
		}
		res, err := d.client.Mutate(ctx, rpc.MutateParams{InvocationID: "seg-" + demoHex(6), JobID: build,
			DeadlineUnixMs: time.Now().Add(10 * time.Minute).UnixMilli(), Dataset: ref, PinnedVersion: pinned, Op: op,
			Index: ivf, Engine: "lance", Credentials: d.creds, Limits: limits, Segment: seg})
		if err != nil {
			return res, fmt.Errorf("%s: %w", op, err)
		}
		fmt.Fprintf(d.out, "     %-16s %-22s %s %d %s, peak %s, %v\n", op, what, res.Phase, res.Code,
			res.CompletionReason, bytesIEC(res.PeakMemoryBytes), (time.Duration(res.WallMs) * time.Millisecond).Round(time.Millisecond))
		if res.Phase != rpc.PhaseNativeReturn || res.Code != rpc.NativeOK {
			return res, fmt.Errorf("%s: %s %d: %s", op, res.Phase, res.Code, res.Message)
		}
		return res, nil
	}
	train, err := call(rpc.OpTrain, "centroids, codebook", &rpc.SegmentSpec{BuildID: build})
	if err != nil {
		return err
	}
	var refs []rpc.SegmentRef
	for _, frags := range plan.Segments {
		res, err := call(rpc.OpSegment, fmt.Sprintf("fragments %v", frags), &rpc.SegmentSpec{BuildID: build, FragmentIDs: frags, TrainUUID: train.IndexUUID})
		if err != nil {
			return err
		}
		refs = append(refs, rpc.SegmentRef{UUID: res.IndexUUID, FragmentIDs: frags})
	}
	res, err := call(rpc.OpCommitSegments, fmt.Sprintf("%d segments", len(refs)), &rpc.SegmentSpec{BuildID: build, Segments: refs})
	if err != nil {
		return err
	}
	var segs struct {
		NumSegments   int   `json:"num_segments"`
		UnindexedRows int64 `json:"unindexed_rows"`
	}
	if err := d.lancectlJSON(ctx, &segs, ref, "segments", ivf.Name); err != nil {
		return err
	}
	var rec, single struct {
		Recall float64 `json:"recall"`
	}
	if err := d.lancectlJSON(ctx, &rec, ref, "recall", "vec", "--queries", "20"); err != nil {
		return err
	}
	// The single build of the act's first half, on its own dataset, measured the same way.
	if err := d.lancectlJSON(ctx, &single, rpc.DatasetRef{Store: d.ref.Store, Path: d.ref.Path + "-vectors"}, "recall", "vec", "--queries", "20"); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "   committed version %d in %v; Lance reads one index of %d segments, %d unindexed rows\n",
		res.CommittedVersion, time.Since(start).Round(time.Millisecond), segs.NumSegments, segs.UnindexedRows)
	fmt.Fprintf(d.out, "   recall@10 against an exact scan, 20 queries, nprobes 16: segmented %.2f, the single build above %.2f\n", rec.Recall, single.Recall)
	return nil
}

func demoHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
